// Package dhcp is the appliance's DHCPv4 server for the cluster's nodes:
// reservations from the config's nodes, an optional dynamic pool,
// authoritative answers and crash-safe leases.
//
// The reply logic is one pure function, Policy.Decide: a request, the lease
// view and the time in, a reply (OFFER, ACK, NAK) or a drop reason out. It
// never touches a socket or a clock, so every RFC 2131 state (SELECTING,
// INIT-REBOOT, RENEWING, REBINDING, INFORM, RELEASE, DECLINE) is table-tested
// and fuzzed apart from the network. Server owns the socket (0.0.0.0:67 bound
// to the interface), a bounded worker pool and the Store; Store keeps leases
// in memory and on disk, and an ACK that creates or extends a pool lease
// leaves only after the lease file holding it has been fsynced and renamed
// into place.
//
// Reservations need no lease file: they are the authority, so every server
// of the cluster answers them identically, also right after a restart that
// lost its leases. The pool is answered only while Options.ServePool says so
// (cmd wires it to holding a VIP), so one server hands out pool addresses at
// a time.
package dhcp
