// Package netlab builds throw-away network topologies out of Linux network
// namespaces for tests, benchmarks and the `appliance lab` demo.
//
// A lab is one "hub" namespace holding a bridge (br0) plus one namespace per
// node. Each node is wired to the bridge by a veth pair: the node sees eth0
// with a deterministic MAC and addresses, the hub sees a bridge port named
// after the node (n0, n1, ...). Every interface is created directly inside
// the namespace it belongs to, so the root namespace is never touched: no
// links, addresses, routes, sysctls or nftables there, not even briefly.
//
// Namespaces are named <Prefix>-hub and <Prefix>-nI under /run/netns, where
// the prefix "apl<pid>-<4 hex>[-label]" carries the creating process's pid.
// That lets [Sweep] (run by every [New]) remove what a crashed run left
// behind, and lets tools run inside a node with `ip netns exec`.
//
// Package netlab owns namespace and process lifetimes: a Lab's Close kills
// everything started through it and every process still inside its
// namespaces, then deletes the namespaces.
package netlab
