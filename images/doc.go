// Package images owns the base OS images the cluster's VMs boot from: it
// reads RHCOS stream metadata, picks the artifact each platform needs, and
// fetches it into a local cache with resume, streaming decompression,
// sha256 verification and progress reporting. It knows no platform's API;
// the provisioning code converts an Image into what a platform consumes.
package images
