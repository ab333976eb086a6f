// Package bootstrap puts the appliance on a cluster's nodes. It owns what a
// node is given before it runs anything: the static pod that runs `appliance
// run`, the node's own appliance.yaml, the kubelet's node IP hint, the files
// that make the node resolve through its own DNS (and the kubelet wait for
// it), and the two ways they reach the node: merged into the
// installer's Ignition configs (bootstrap.ign and the master/worker pointer
// configs) and as MachineConfig manifests that keep them there through day-2
// changes and upgrades.
//
// Everything here is a pure function of the validated cluster model and a few
// options (config in, Ignition or YAML out), except EditAssets, which reads
// and rewrites an installer's asset folder. Ignition is parsed, merged,
// marshalled and validated with github.com/coreos/ignition/v2's own config
// packages, each input kept at its own spec version. The package provisions
// no machine and imports no other service.
package bootstrap
