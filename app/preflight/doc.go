// Package preflight owns the checks `appliance preflight` runs before an
// install: that the VIPs are free on the segment, that the config places
// every address sensibly, that no other DHCP server or VRRP router gets in
// the way, that DNS answers as the installer expects, that this node's
// ports and path MTU are ready, and that its kubelet will get a node IP in
// the machine network.
//
// Every check is split in two: a gatherer that opens sockets and records
// what it saw (an Observation type), and a pure decision function that turns
// observations into a Result. The decisions are table-tested without a
// network; the gatherers are exercised in network namespaces.
//
// It imports internal/cluster for the model, internal/nodeip for
// OpenShift's choice of the node IP and vrrp for its advert codec, and no
// service package otherwise.
package preflight
