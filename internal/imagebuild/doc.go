// Package imagebuild writes the appliance's node image: an OCI image archive
// (the format `skopeo inspect oci-archive:FILE` and `podman load` read) of one
// layer holding the static binary at /appliance on an empty base, built
// without a container daemon and reproducibly: the same binary, version,
// revision and creation time give the same bytes and so the same digest.
//
// It is a build tool, used by cmd/imagebuild (`make image`); the appliance
// binary never imports it, so go-containerregistry stays out of the nodes.
package imagebuild
