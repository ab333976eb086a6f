// Package vrrp implements VRRP v2 (RFC 3768) and v3 (RFC 5798): codec,
// state machine, raw-socket transport, VIP ownership, weighted tracking.
//
// The codec (Packet, Parse) and the state machine (Machine) are pure: they
// never touch a socket, a clock or a goroutine, so every wire format and
// every transition is covered by table, golden-byte and fuzz tests. The
// transport, VIP manager and tracking code feed them packets, time and
// priorities and carry out the actions the machine returns.
//
// Accept mode: a master installs its VIPs as local addresses, so it always
// accepts traffic addressed to them, as keepalived does without vrrp_strict.
// RFC 5798's non-accept mode (a non-owner master dropping such traffic) would
// need a firewall rule and is not implemented; Config.Accept only reaches the
// state machine.
//
// Transport: multicast to 224.0.0.18 / ff02::12, or unicast (Config.Unicast)
// to a set of peers that SetUnicastPeers replaces while the router runs,
// accepting adverts from those peers only. A unicast IPv6 router sends from
// a global address, the one its peers list, as keepalived's unicast_src_ip.
//
// The package knows nothing of clusters: callers hand it interfaces,
// addresses, VRIDs and checks.
package vrrp
