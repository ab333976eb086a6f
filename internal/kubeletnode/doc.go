// Package kubeletnode runs a real kubelet (with containerd and runc) inside
// a netlab node, the way the project's kubelet tools do it
// (../shared/tools/kubelet: start.sh, stop.sh): no API server, static pods
// only, the node's network namespace as the pods' host network, the node's
// files under /etc, /run and /var/lib in overlays of its own, and its own
// host name. It puts a static pod's manifest in place and takes it away as
// a node's tools do, and reads back what the kubelet (its /pods), the
// container runtime (crictl) and the pod's container say.
//
// The kubelet tier of e2e and `appliance lab --kubelet` use it; it starts
// nothing but the scripts, and a Node's Stop (or the scripts' watchdog,
// when the process that started it dies) ends everything it started.
package kubeletnode
