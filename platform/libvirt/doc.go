// Package libvirt provisions a cluster's VMs on libvirt over its RPC protocol
// (no cgo): a local socket or a remote qemu+tcp/qemu+tls/qemu+ssh URI, and the
// test:///default driver for benchmarks.
//
// It owns the libvirt side of `appliance provision`: uploading the base image
// into a storage pool, one qcow2 overlay per node, the Ignition delivery
// (fw_cfg for qemu-flavoured images, a config-drive ISO for openstack ones),
// the domain definition and its power state, and destroy.
//
// Every domain it defines carries an element in our own XML namespace in its
// <metadata>: the infra ID, the node, and the volumes the domain owns. The
// base image is owned by a never-started marker domain "<infraID>-image".
// Domains are defined before their volumes are created, so nothing this
// package creates ever exists unmarked, and Destroy deletes exactly the
// volumes the marks list.
package libvirt
