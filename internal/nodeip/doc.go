// Package nodeip owns the kubelet's node IP as OpenShift chooses it on a
// node: nodeip-configuration.service runs baremetal-runtimecfg's
// `node-ip set` with the hints of /etc/default/nodeip-configuration, and
// what it picks becomes KUBELET_NODE_IP(S), hence the Node's InternalIPs,
// which the appliance takes its members from.
//
// Choose is that choice as a pure function of a node's links, addresses
// and routes: first an address whose network holds a hint, else the
// addresses of the interfaces with a default route in runtimecfg's sort
// order. Read gathers the links, addresses and routes from netlink;
// HintFile and ParseHintFile are the hint file's format. The package
// imports no other package of this project.
package nodeip
