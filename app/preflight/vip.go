package preflight

import (
	"bytes"
	"net"
	"net/netip"
	"strings"

	"appliance/internal/cluster"
)

// VIPObservation is what probing one VIP on the segment found.
type VIPObservation struct {
	Kind cluster.VIPKind
	VIP  netip.Addr
	// Answers are the MAC addresses that claimed the VIP (ARP reply or
	// request from the VIP, or a Neighbor Advertisement for it).
	Answers []net.HardwareAddr
	// LocalIface is set when this machine itself holds the VIP.
	LocalIface string
	// Err is set when the probe could not be sent.
	Err error
}

// vipDetails is the JSON form of a VIP observation.
type vipDetails struct {
	VIP     netip.Addr `json:"vip"`
	Answers []string   `json:"answeredBy,omitempty"`
	Node    string     `json:"node,omitempty"`
	Local   string     `json:"localInterface,omitempty"`
}

// DecideVIP fails when anyone answered for the VIP, naming each MAC (and the
// configured node it belongs to, if any). A VIP held by one of this
// cluster's own nodes or by this machine only warns: an appliance or
// keepalived of this cluster already runs, which is not a stranger.
func DecideVIP(cfg *cluster.Config, o VIPObservation) Result {
	id := IDVIPFree + "." + cluster.VIPName(o.Kind, o.VIP)
	field := "network.apiVIPs"
	if o.Kind == cluster.VIPIngress {
		field = "network.ingressVIPs"
	}
	proto := "an ARP probe (RFC 5227)"
	if o.VIP.Is6() {
		proto = "a neighbour solicitation"
	}
	d := vipDetails{VIP: o.VIP, Local: o.LocalIface}
	if o.Err != nil {
		return warn(id, "%s VIP %s not probed: %v", o.Kind, o.VIP, o.Err).with(d)
	}
	var strangers, ours []string
	for _, mac := range o.Answers {
		d.Answers = append(d.Answers, mac.String())
		if n := nodeByMAC(cfg, mac); n != "" {
			ours = append(ours, mac.String()+" (node "+n+")")
			d.Node = n
		} else {
			strangers = append(strangers, mac.String())
		}
	}
	switch {
	case len(strangers) > 0:
		return fail(id, "%s VIP %s is in use: %s answered %s; free the address on that host or pick another %s",
			o.Kind, o.VIP, strings.Join(strangers, ", "), proto, field).with(d)
	case len(ours) > 0:
		return warn(id, "%s VIP %s is already held by this cluster's %s; fine if the cluster runs, a leftover otherwise",
			o.Kind, o.VIP, strings.Join(ours, ", ")).with(d)
	case o.LocalIface != "":
		return warn(id, "%s VIP %s is already on this machine's %s; fine if this node's VIP service runs, a leftover otherwise (ip addr del it)",
			o.Kind, o.VIP, o.LocalIface).with(d)
	}
	return pass(id, "%s VIP %s is free: nobody answered %s", o.Kind, o.VIP, proto).with(d)
}

func nodeByMAC(cfg *cluster.Config, mac net.HardwareAddr) string {
	for _, n := range cfg.Nodes {
		if n.MAC != nil && bytes.Equal(n.MAC, mac) {
			return n.Name
		}
	}
	return ""
}
