// Package soak is the fault soak behind `make soak` (`appliance soak`): a
// whole cluster in network namespaces (a bootstrap node, three masters and
// two workers, each running `appliance run`, next to the lab's stand-in
// apiservers, Machine Config Servers and ingress routers, and a real
// kube-apiserver as the Node source when the shared tools are there) under
// constant load, while a seeded random schedule injects faults, one or
// several at once, for as long as asked.
//
// The load: API calls through the API VIP on new connections and
// long-lived watch-like streams; DNS questions to every node (the
// cluster's names, every node's name and PTR, forwarded names, a day-2
// worker's); DHCP renewals of reserved and pool clients. The faults:
// kill -9 and SIGTERM of appliances, link flaps and packet loss, a VIP
// deleted, the node's address moved onto br-ex, nft flush ruleset,
// apiservers made unready, killed, restarted, the Kubernetes API stopped,
// an upstream DNS server black-holed, the bootstrap's teardown, day-2
// Nodes. The invariants, checked the whole time: one holder per VIP, a
// holder but for a bounded outage, DNS answering node names with node
// addresses only, no failed call or broken stream that no unplanned fault
// explains, DHCP keeping reservations and acknowledged leases, flat
// memory, goroutines and descriptors per process.
//
// It prints a line per fault and a summary, writes report.json, and its
// Report says whether every invariant held. With Options.Stack
// StackClassic the nodes run what the appliance replaces instead
// (keepalived, haproxy and CoreDNS as OpenShift's templates configure
// them, runtimecfg's monitors as loops of the soak), under the same
// schedule and invariants; Compare prints two reports side by side. It reuses the lab's pieces
// through the binary (the hidden `appliance lab apiserver|mcs|router`
// stand-ins) and internal/netlab's namespaces; it imports no other
// composition.
package soak
