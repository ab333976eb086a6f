package render

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"appliance/dnsserver"
	"appliance/internal/cluster"
)

// zone is one zone's records, owner names absolute.
type zone struct {
	name    string // fully qualified, lower case: "ocp4.example.com."
	records []dns.RR
}

// BIND returns bind/named.conf (zone statements only, for a site's
// named.conf to include) and one zone file per zone beside it: the cluster
// domain, and a reverse zone for each piece of the machine networks that
// holds a PTR record.
func BIND(cfg *cluster.Config, opts Options) ([]File, error) {
	zones, err := clusterZones(cfg)
	if err != nil {
		return nil, err
	}
	var conf strings.Builder
	conf.WriteString(header("//", cfg, opts, "BIND zone statements"))
	conf.WriteString(`// Include this file from named.conf. The zone files' paths are relative to
// the folder this file is in: set named's "directory" option to it, or copy
// the zone files into named's directory.
`)
	files := []File{{Path: "bind/named.conf"}}
	for _, z := range zones {
		file := zoneFileName(z.name)
		fmt.Fprintf(&conf, "\nzone %q IN {\n\ttype master;\n\tfile %q;\n\tallow-update { none; };\n};\n",
			strings.TrimSuffix(z.name, "."), file)
		files = append(files, File{Path: "bind/" + file, Data: []byte(zoneFile(cfg, opts, z))})
	}
	files[0].Data = []byte(conf.String())
	return files, nil
}

// zoneFileName is a zone's file name: its name without the final dot, plus
// ".zone".
func zoneFileName(name string) string { return strings.TrimSuffix(name, ".") + ".zone" }

// clusterZones splits the records `appliance dns` answers from cfg into the cluster
// zone and the reverse zones, each with the cluster zone's SOA and NS at its
// apex. The reverse zones are cut at the machine network's prefix rounded
// up to a label boundary (octets for IPv4, at most a /24; nibbles for IPv6),
// so a /24 gives one zone and a /20 one per /24 that holds a record.
func clusterZones(cfg *cluster.Config) ([]zone, error) {
	rrs := dnsserver.ConfigRecords(cfg, dnsserver.DefaultTTL)
	var soa *dns.SOA
	var ns *dns.NS
	fwd := zone{name: dns.CanonicalName(cfg.Cluster.Domain())}
	reverse := map[string]*zone{}
	var order []string
	for _, rr := range rrs {
		switch r := rr.(type) {
		case *dns.SOA:
			soa = r
			continue
		case *dns.NS:
			ns = r
			continue
		case *dns.PTR:
			name, err := reverseZone(cfg, r.Hdr.Name)
			if err != nil {
				return nil, err
			}
			z, ok := reverse[name]
			if !ok {
				z = &zone{name: name}
				reverse[name] = z
				order = append(order, name)
			}
			z.records = append(z.records, rr)
			continue
		}
		fwd.records = append(fwd.records, rr)
	}
	if soa == nil || ns == nil {
		return nil, fmt.Errorf("render: bind: no SOA or NS for %s", fwd.name)
	}
	apex := func(name string) []dns.RR {
		s, n := *soa, *ns
		s.Hdr.Name, n.Hdr.Name = name, name
		return []dns.RR{&s, &n}
	}
	fwd.records = append(apex(fwd.name), fwd.records...)
	out := []zone{fwd}
	slices.Sort(order)
	for _, name := range order {
		z := reverse[name]
		z.records = append(apex(name), z.records...)
		out = append(out, *z)
	}
	return out, nil
}

// reverseZone is the reverse zone that holds the PTR owner name ptr.
func reverseZone(cfg *cluster.Config, ptr string) (string, error) {
	addr, err := addrOfReverse(ptr)
	if err != nil {
		return "", err
	}
	bits := 24
	if addr.Is6() {
		bits = 64
	}
	if p, ok := cfg.Network.PrefixFor(addr); ok {
		if addr.Is4() {
			bits = min((p.Bits()+7)/8*8, 24)
		} else {
			bits = min((p.Bits()+3)/4*4, 124)
		}
	}
	labels := dns.SplitDomainName(ptr)
	// Drop the labels that name the host part: one per octet or nibble.
	drop := (32 - bits) / 8
	if addr.Is6() {
		drop = (128 - bits) / 4
	}
	return strings.Join(labels[drop:], ".") + ".", nil
}

// addrOfReverse reads the address back from a full in-addr.arpa or ip6.arpa
// name.
func addrOfReverse(name string) (netip.Addr, error) {
	labels := dns.SplitDomainName(name)
	slices.Reverse(labels)
	switch {
	case len(labels) == 6 && labels[0] == "arpa" && labels[1] == "in-addr":
		return netip.ParseAddr(strings.Join(labels[2:], "."))
	case len(labels) == 34 && labels[0] == "arpa" && labels[1] == "ip6":
		var b strings.Builder
		for i, l := range labels[2:] {
			if i > 0 && i%4 == 0 {
				b.WriteByte(':')
			}
			b.WriteString(l)
		}
		return netip.ParseAddr(b.String())
	}
	return netip.Addr{}, fmt.Errorf("render: bind: %s is not a reverse name of one address", name)
}

// zoneFile writes z in master-file format with owner names relative to the
// zone's origin.
func zoneFile(cfg *cluster.Config, opts Options, z zone) string {
	var b strings.Builder
	b.WriteString(header(";", cfg, opts, "BIND zone "+strings.TrimSuffix(z.name, ".")))
	b.WriteString("; The SOA serial is the one `appliance dns` reports for a config (1); a site\n; with secondaries raises it when it loads a changed zone.\n")
	fmt.Fprintf(&b, "$ORIGIN %s\n$TTL %d\n", z.name, dnsserver.DefaultTTL)
	for _, rr := range z.records {
		h := rr.Header()
		owner := "@"
		if h.Name != z.name {
			owner = strings.TrimSuffix(h.Name, "."+z.name)
		}
		rdata := strings.TrimPrefix(rr.String(), h.String())
		fmt.Fprintf(&b, "%-24s IN %-5s %s\n", owner, dns.TypeToString[h.Rrtype], rdata)
	}
	return b.String()
}
