// Package host owns "who and where am I" for the machine the appliance runs
// on, for every command (run, vip, dns, dhcp, lb, preflight).
//
// Who: which node this is, in one order (see Who): --node; else the
// configured node owning a local address (never a VIP, loopback or
// link-local address); else the configured node named like the short host
// name; else, with --role (as the static pod passes it), the short host name
// as a node that joins on day 2; else an error naming the host name, the
// local addresses, the known nodes and the fix. A configured node keeps its
// configured role.
//
// Where: the machine's own addresses inside the machine networks (never a
// VIP of the cluster, never an address the appliance itself added) and the
// interface that holds them (see Locate). Host keeps that view current from
// a netlink subscription to links and addresses and publishes each change to
// its subscribers (VRRP, mDNS, DNS self-records, DHCP, the LB, the member
// sources). It decides nothing about what a service does when the view
// changes.
package host
