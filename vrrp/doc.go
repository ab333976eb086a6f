// Package vrrp implements VRRP v2 (RFC 3768) and v3 (RFC 5798): codec,
// state machine, raw-socket transport, VIP ownership, weighted tracking.
//
// The codec (Packet, Parse) and the state machine (Machine) are pure: they
// never touch a socket, a clock or a goroutine, so every wire format and
// every transition is covered by table, golden-byte and fuzz tests. The
// transport, VIP manager and tracking code feed them packets, time and
// priorities and carry out the actions the machine returns.
//
// The package knows nothing of clusters: callers hand it interfaces,
// addresses, VRIDs and checks.
package vrrp
