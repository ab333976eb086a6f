// Package host owns "who and where am I" for the node the appliance runs on:
// which configured node this is (by --node, by a local address, else by host
// name), the node's own addresses inside the machine networks (never a VIP of
// the cluster, never an address the appliance itself added) and the interface
// that holds them. Host keeps that view current from a netlink subscription to
// links and addresses and publishes each change to its subscribers (VRRP,
// mDNS, DNS self-records, DHCP, the member sources). It decides nothing about
// what a service does when the view changes.
package host
