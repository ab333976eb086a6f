package dnsserver

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"appliance/internal/cluster"
)

// ConfigRecords lists every record the cluster plugin answers from cfg alone
// (its nodes and VIPs, no discovered members), with the given TTL: the apex
// SOA and NS, the A and AAAA records of api, api-int, "*.apps" and every
// node under the cluster domain, and the PTR records of node addresses and
// VIPs. The records are the plugin's own answers to those questions, so a zone
// written from them (appliance render) answers as `appliance dns` does; only
// the single-label short names, which no zone can hold, are left out.
func ConfigRecords(cfg *cluster.Config, ttl uint32) []dns.RR {
	z := newZoneData(cfg, ttl)
	snap := cluster.NewState(cfg).Snapshot()
	var out []dns.RR
	ask := func(name string, qtype uint16) {
		res := z.lookup(dns.Question{Name: name, Qtype: qtype, Qclass: dns.ClassINET}, snap)
		if res.result == resultAnswer {
			out = append(out, res.answer...)
		}
	}
	ask(z.zone, dns.TypeSOA)
	ask(z.zone, dns.TypeNS)
	names := []string{"api", "api-int", "*.apps"}
	for _, m := range snap.Members {
		names = append(names, strings.ToLower(m.Name))
	}
	for _, n := range names {
		ask(n+"."+z.zone, dns.TypeA)
		ask(n+"."+z.zone, dns.TypeAAAA)
	}
	seen := map[netip.Addr]bool{}
	ptr := func(a netip.Addr) {
		a = a.Unmap()
		if seen[a] {
			return
		}
		seen[a] = true
		if rev, err := dns.ReverseAddr(a.String()); err == nil {
			ask(rev, dns.TypePTR)
		}
	}
	for _, m := range snap.Members {
		for _, a := range m.IPs {
			ptr(a)
		}
	}
	for _, a := range z.apiVIPs {
		ptr(a)
	}
	for _, a := range z.ingressVIPs {
		ptr(a)
	}
	return out
}
