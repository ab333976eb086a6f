package dnsserver

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"appliance/internal/cluster"
)

// Outcomes of a lookup, also the label values of the answers metric.
const (
	resultAnswer      = "answer"
	resultNoData      = "nodata"
	resultNXDomain    = "nxdomain"
	resultFallthrough = "fallthrough"
)

// zoneData is what the cluster plugin knows that does not change while it
// runs: the cluster zone and the VIPs. Members come from a State snapshot
// per query, so they change without a restart.
type zoneData struct {
	zone        string // lower case, fully qualified: "ocp4.example.com."
	apiVIPs     []netip.Addr
	ingressVIPs []netip.Addr
	ttl         uint32
}

func newZoneData(cfg *cluster.Config, ttl uint32) zoneData {
	return zoneData{
		zone:        dns.CanonicalName(cfg.Cluster.Domain()),
		apiVIPs:     cfg.Network.APIVIPs,
		ingressVIPs: cfg.Network.IngressVIPs,
		ttl:         ttl,
	}
}

// lookupResult is the verdict on one question: result says which kind of
// reply to send (resultFallthrough: not ours, pass it on).
type lookupResult struct {
	result string
	answer []dns.RR
	ns     []dns.RR
}

// rcode is the reply's response code.
func (l lookupResult) rcode() int {
	if l.result == resultNXDomain {
		return dns.RcodeNameError
	}
	return dns.RcodeSuccess
}

// lookup answers q from z and the snapshot. It is pure: the same question and
// snapshot always give the same reply, which keeps it table-testable and
// fuzzable. Owner names echo the question's spelling.
func (z *zoneData) lookup(q dns.Question, snap *cluster.Snapshot) lookupResult {
	if q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY {
		return lookupResult{result: resultFallthrough}
	}
	name := strings.ToLower(dns.Fqdn(q.Name))
	if strings.HasSuffix(name, ".in-addr.arpa.") || strings.HasSuffix(name, ".ip6.arpa.") {
		return z.lookupPTR(q, name, snap)
	}
	if rel, ok := z.relative(name); ok {
		return z.lookupZone(q, rel, snap)
	}
	// A single label may be a node's short name; anything else is not ours.
	if short, ok := strings.CutSuffix(name, "."); ok && short != "" && !strings.Contains(short, ".") {
		if m, found := findMember(snap, short); found {
			res := z.addresses(q, m.IPs, snap)
			// The zone's SOA would be out of bailiwick for a short name.
			res.ns = nil
			return res
		}
	}
	return lookupResult{result: resultFallthrough}
}

// relative returns name without the cluster zone ("" for the apex) and
// whether name is inside the zone at all.
func (z *zoneData) relative(name string) (string, bool) {
	if name == z.zone {
		return "", true
	}
	rel, ok := strings.CutSuffix(name, "."+z.zone)
	return rel, ok
}

func (z *zoneData) lookupZone(q dns.Question, rel string, snap *cluster.Snapshot) lookupResult {
	switch {
	case rel == "":
		switch q.Qtype {
		case dns.TypeSOA:
			return lookupResult{result: resultAnswer, answer: []dns.RR{z.soa(snap)}}
		case dns.TypeNS:
			return lookupResult{result: resultAnswer, answer: []dns.RR{z.nsRecord()}}
		}
		return z.noData(snap)
	case rel == "api" || rel == "api-int":
		return z.addresses(q, z.apiVIPs, snap)
	case rel == "apps":
		// An empty non-terminal: names exist below it, so NODATA, not NXDOMAIN.
		return z.noData(snap)
	case strings.HasSuffix(rel, ".apps"):
		return z.addresses(q, z.ingressVIPs, snap)
	case !strings.Contains(rel, "."):
		if m, ok := findMember(snap, rel); ok {
			return z.addresses(q, m.IPs, snap)
		}
	}
	return lookupResult{result: resultNXDomain, ns: []dns.RR{z.soa(snap)}}
}

// addresses answers an address-bearing name: A or AAAA records of the right
// family, or NODATA when the name has none of that family (never a forward).
func (z *zoneData) addresses(q dns.Question, ips []netip.Addr, snap *cluster.Snapshot) lookupResult {
	var rrs []dns.RR
	for _, ip := range ips {
		ip = ip.Unmap()
		switch {
		case ip.Is4() && (q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY):
			rrs = append(rrs, &dns.A{Hdr: z.hdr(q.Name, dns.TypeA), A: ip.AsSlice()})
		case ip.Is6() && (q.Qtype == dns.TypeAAAA || q.Qtype == dns.TypeANY):
			rrs = append(rrs, &dns.AAAA{Hdr: z.hdr(q.Name, dns.TypeAAAA), AAAA: ip.AsSlice()})
		}
	}
	if len(rrs) == 0 {
		return z.noData(snap)
	}
	return lookupResult{result: resultAnswer, answer: rrs}
}

// lookupPTR answers reverse names of node addresses and VIPs. Other reverse
// names belong to whoever owns the network, so they fall through.
func (z *zoneData) lookupPTR(q dns.Question, name string, snap *cluster.Snapshot) lookupResult {
	ip, ok := reverseAddr(name)
	if !ok {
		return lookupResult{result: resultFallthrough}
	}
	var targets []string
	for _, m := range snap.Members {
		for _, a := range m.IPs {
			if a.Unmap() == ip {
				targets = append(targets, dns.CanonicalName(m.Name)+z.zone)
			}
		}
	}
	for _, a := range z.apiVIPs {
		if a.Unmap() == ip {
			targets = append(targets, "api."+z.zone)
		}
	}
	for _, a := range z.ingressVIPs {
		if a.Unmap() == ip {
			// *.apps cannot be a PTR target; this name resolves back to the VIP.
			targets = append(targets, "ingress.apps."+z.zone)
		}
	}
	if len(targets) == 0 {
		return lookupResult{result: resultFallthrough}
	}
	if q.Qtype != dns.TypePTR && q.Qtype != dns.TypeANY {
		return lookupResult{result: resultNoData}
	}
	rrs := make([]dns.RR, 0, len(targets))
	for _, t := range targets {
		rrs = append(rrs, &dns.PTR{Hdr: z.hdr(q.Name, dns.TypePTR), Ptr: t})
	}
	return lookupResult{result: resultAnswer, answer: rrs}
}

func (z *zoneData) noData(snap *cluster.Snapshot) lookupResult {
	return lookupResult{result: resultNoData, ns: []dns.RR{z.soa(snap)}}
}

func (z *zoneData) hdr(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: z.ttl}
}

// soa is the zone's SOA. Its serial is the State version, so secondaries and
// humans can see that the member list changed.
func (z *zoneData) soa(snap *cluster.Snapshot) *dns.SOA {
	return &dns.SOA{
		Hdr:     z.hdr(z.zone, dns.TypeSOA),
		Ns:      "api-int." + z.zone,
		Mbox:    "hostmaster." + z.zone,
		Serial:  uint32(snap.Version),
		Refresh: 3600, Retry: 600, Expire: 86400,
		Minttl: z.ttl,
	}
}

// nsRecord names api-int as the zone's server: the API VIP always sits on a
// node that runs this DNS.
func (z *zoneData) nsRecord() *dns.NS {
	return &dns.NS{Hdr: z.hdr(z.zone, dns.TypeNS), Ns: "api-int." + z.zone}
}

// findMember finds a member by a lower-case label, ignoring case in the
// member's name.
func findMember(snap *cluster.Snapshot, label string) (cluster.Member, bool) {
	if m, ok := snap.Member(label); ok {
		return m, true
	}
	for _, m := range snap.Members {
		if strings.EqualFold(m.Name, label) {
			return m, true
		}
	}
	return cluster.Member{}, false
}

// reverseAddr turns a full in-addr.arpa or ip6.arpa name into the address it
// names; partial names (a network, not a host) are not addresses.
func reverseAddr(name string) (netip.Addr, bool) {
	if rest, ok := strings.CutSuffix(name, ".in-addr.arpa."); ok {
		labels := strings.Split(rest, ".")
		if len(labels) != 4 {
			return netip.Addr{}, false
		}
		for i, j := 0, len(labels)-1; i < j; i, j = i+1, j-1 {
			labels[i], labels[j] = labels[j], labels[i]
		}
		a, err := netip.ParseAddr(strings.Join(labels, "."))
		if err != nil || !a.Is4() {
			return netip.Addr{}, false
		}
		return a, true
	}
	rest, ok := strings.CutSuffix(name, ".ip6.arpa.")
	if !ok {
		return netip.Addr{}, false
	}
	labels := strings.Split(rest, ".")
	if len(labels) != 32 {
		return netip.Addr{}, false
	}
	var b [16]byte
	for i, l := range labels {
		if len(l) != 1 {
			return netip.Addr{}, false
		}
		n := strings.IndexByte("0123456789abcdef", l[0])
		if n < 0 {
			return netip.Addr{}, false
		}
		// labels[0] is the lowest nibble of the last byte.
		pos := 31 - i
		if pos%2 == 0 {
			b[pos/2] |= byte(n) << 4
		} else {
			b[pos/2] |= byte(n)
		}
	}
	return netip.AddrFrom16(b), true
}
