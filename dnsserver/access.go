package dnsserver

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"

	"github.com/coredns/caddy"
	coredns "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"

	"appliance/internal/cluster"
)

// Where a network the DNS answers comes from: loopback always, the others
// from the config field of that name (the place to change it).
const (
	ClientSourceLoopback = "loopback"
	ClientSourceMachine  = "network.machineCIDRs"
	ClientSourceCluster  = "network.clusterNetwork"
	ClientSourceAllow    = "dns.allowFrom"
)

// loopbackNets are always answered: the node itself, and a resolv.conf
// that points at 127.0.0.1.
var loopbackNets = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// ClientNet is a network whose clients the DNS answers, and where it comes
// from.
type ClientNet struct {
	Prefix netip.Prefix `json:"prefix"`
	// Source is one of the ClientSource constants.
	Source string `json:"source"`
}

// UnmarshalJSON also reads a bare prefix, as an appliance before sources
// were shown wrote it, so `appliance status` still draws its table.
func (c *ClientNet) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		*c = ClientNet{}
		return json.Unmarshal(b, &c.Prefix)
	}
	type plain ClientNet
	return json.Unmarshal(b, (*plain)(c))
}

// clientNets is who the DNS answers: loopback, the machine networks, the
// cluster's pod networks and dns.allowFrom. The pods' own DNS (OpenShift's
// dns-default) forwards every name outside cluster.local to the node's
// resolv.conf, whose first nameserver is this server, from pod addresses
// through the node's ovn-k8s-mp0. Everyone else is refused, so a node
// address is never an open resolver (recursion for anyone, an amplifier)
// and the cluster's names are not told to strangers.
type clientNets []ClientNet

func newClientNets(cfg *cluster.Config) clientNets {
	var n clientNets
	add := func(src string, ps []netip.Prefix) {
		for _, p := range ps {
			n = append(n, ClientNet{Prefix: p, Source: src})
		}
	}
	add(ClientSourceLoopback, loopbackNets)
	add(ClientSourceMachine, cfg.Network.MachineCIDRs)
	add(ClientSourceCluster, cfg.Network.ClusterNetworks)
	add(ClientSourceAllow, cfg.DNS.AllowFrom)
	return n
}

// allows reports whether client a is answered. An IPv4 client on a
// dual-stack socket arrives as ::ffff:a.b.c.d and a link-local one with a
// zone; both are judged by the bare address.
func (n clientNets) allows(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	for i := range n {
		if n[i].Prefix.Contains(a) {
			return true
		}
	}
	return false
}

// remoteAddr is the client's address, without allocating for the UDP and
// TCP writers the server uses; the zero Addr when it cannot be told.
func remoteAddr(w dns.ResponseWriter) netip.Addr {
	var ip net.IP
	switch a := w.RemoteAddr().(type) {
	case *net.UDPAddr:
		ip = a.IP
	case *net.TCPAddr:
		ip = a.IP
	case nil:
		return netip.Addr{}
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.Addr{}
		}
		return ap.Addr()
	}
	addr, _ := netip.AddrFromSlice(ip)
	return addr
}

// accessHandler is the access plugin: it passes the queries of allowed
// clients on untouched and answers everyone else REFUSED.
type accessHandler struct {
	next plugin.Handler
	nets clientNets
	m    *metrics
}

// Name implements plugin.Handler.
func (h *accessHandler) Name() string { return "access" }

// ServeDNS implements plugin.Handler.
func (h *accessHandler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if h.nets.allows(remoteAddr(w)) {
		if h.next == nil {
			return plugin.NextOrFailure(h.Name(), h.next, ctx, w, r)
		}
		// Straight to the next plugin: plugin.NextOrFailure would allocate
		// a writer per query only to name the plugin that answered.
		return h.next.ServeDNS(ctx, w, r)
	}
	h.m.refusedClients.Inc()
	m := new(dns.Msg)
	m.SetRcode(r, dns.RcodeRefused)
	if opt := r.IsEdns0(); opt != nil {
		// Extended DNS Error 18 tells the one asking (dig shows it) that
		// the refusal is a policy, not a broken server.
		m.SetEdns0(ednsBufSize, false)
		o := m.IsEdns0()
		o.Option = append(o.Option, &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeProhibited})
	}
	// Nothing is logged per query: a flood from outside must not fill the
	// log. The refusal is counted in appliance_dns_refused_queries_total.
	_ = w.WriteMsg(m)
	return dns.RcodeSuccess, nil
}

// setupAccess parses "access { instance ID }". The networks are the
// Server's (from its config), not the Corefile's.
func setupAccess(c *caddy.Controller) error {
	var srv *Server
	for c.Next() {
		if len(c.RemainingArgs()) != 0 {
			return plugin.Error("access", c.ArgErr())
		}
		var err error
		if srv, err = parseInstance(c); err != nil {
			return plugin.Error("access", err)
		}
	}
	if srv == nil {
		return plugin.Error("access", c.ArgErr())
	}
	coredns.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		return &accessHandler{next: next, nets: srv.clients, m: srv.metrics}
	})
	return nil
}
