// Package kubevirt provisions a cluster's nodes as KubeVirt VirtualMachines in
// one namespace of an existing Kubernetes cluster.
//
// It owns the KubeVirt side of `appliance provision`: a golden DataVolume that
// imports the RHCOS image once, one VirtualMachine per node whose root disk is
// cloned from it (or imported from a container disk), the node's Ignition in a
// Secret read through a config drive, a bridge NIC with the node's
// deterministic MAC on a Multus network, and soft anti-affinity so nodes of
// one role group land on different hosts.
//
// Every object carries the label appliance.io/infra-id; List and Destroy find
// objects by that label only. Object building is pure (build.go) so the
// manifests a cluster would receive can be tested without one.
package kubevirt
