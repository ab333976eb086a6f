package dnsserver

import (
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"appliance/internal/cluster"
	"appliance/internal/host"
)

func TestLookup(t *testing.T) {
	cfg := testConfig()
	z := newZoneData(cfg, 30)
	snap := cluster.NewState(cfg).Snapshot()
	for _, c := range []struct {
		name   string
		qtype  uint16
		qclass uint16
		result string
		n      int // answers
	}{
		{"api.ocp4.example.com.", dns.TypeA, dns.ClassINET, resultAnswer, 1},
		{"api.ocp4.example.com.", dns.TypeANY, dns.ClassINET, resultAnswer, 2},
		{"api.ocp4.example.com.", dns.TypeA, dns.ClassCHAOS, resultFallthrough, 0},
		{"x.apps.ocp4.example.com.", dns.TypeAAAA, dns.ClassINET, resultNoData, 0},
		{"apps.ocp4.example.com.", dns.TypeA, dns.ClassINET, resultNoData, 0},
		{"master-0.ocp4.example.com.", dns.TypeANY, dns.ClassINET, resultAnswer, 2},
		{"MASTER-0.", dns.TypeA, dns.ClassINET, resultAnswer, 1},
		{"master-9.", dns.TypeA, dns.ClassINET, resultFallthrough, 0},
		{"example.com.", dns.TypeSOA, dns.ClassINET, resultFallthrough, 0},
		{"xocp4.example.com.", dns.TypeA, dns.ClassINET, resultFallthrough, 0},
		{"foo.ocp4.example.com.", dns.TypeA, dns.ClassINET, resultNXDomain, 0},
		{"ocp4.example.com.", dns.TypeSOA, dns.ClassINET, resultAnswer, 1},
		{"10.126.168.192.in-addr.arpa.", dns.TypePTR, dns.ClassINET, resultAnswer, 1},
		{"10.126.168.192.in-addr.arpa.", dns.TypeA, dns.ClassINET, resultNoData, 0},
		{"126.168.192.in-addr.arpa.", dns.TypePTR, dns.ClassINET, resultFallthrough, 0},
		{"300.126.168.192.in-addr.arpa.", dns.TypePTR, dns.ClassINET, resultFallthrough, 0},
		{"x.0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", dns.TypePTR, dns.ClassINET, resultFallthrough, 0},
		{".", dns.TypeNS, dns.ClassINET, resultFallthrough, 0},
	} {
		res := z.lookup(dns.Question{Name: c.name, Qtype: c.qtype, Qclass: c.qclass}, snap)
		if res.result != c.result || len(res.answer) != c.n {
			t.Errorf("%s %s: got %s with %d answers %v, want %s with %d", c.name, dns.TypeToString[c.qtype], res.result, len(res.answer), res.answer, c.result, c.n)
		}
	}
}

func TestReverseAddr(t *testing.T) {
	for _, a := range []string{"192.0.2.1", "10.0.0.255", "2001:db8::1", "fe80::abcd:1234:5678:9"} {
		ip := netip.MustParseAddr(a)
		name, err := dns.ReverseAddr(a)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := reverseAddr(name)
		if !ok || got != ip {
			t.Errorf("reverseAddr(%s) = %v %v, want %v", name, got, ok, ip)
		}
	}
}

// FuzzCluster feeds random messages to the cluster plugin's lookup: it must
// never panic, and every reply it builds must pack.
func FuzzCluster(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"api.ocp4.example.com.", dns.TypeA}, {"x.apps.ocp4.example.com.", dns.TypeAAAA},
		{"master-0.", dns.TypeANY}, {"10.126.168.192.in-addr.arpa.", dns.TypePTR},
		{"ocp4.example.com.", dns.TypeSOA}, {"nope.ocp4.example.com.", dns.TypeTXT},
	} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	cfg := testConfig()
	z := newZoneData(cfg, 30)
	state := cluster.NewState(cfg)
	state.UpsertMember(cluster.Member{Name: "Odd.Name", Source: cluster.SourceMDNS, IPs: []netip.Addr{netip.MustParseAddr("::ffff:10.0.0.1")}})
	snap := state.Snapshot()
	f.Fuzz(func(t *testing.T, data []byte) {
		r := new(dns.Msg)
		if err := r.Unpack(data); err != nil {
			return
		}
		for _, q := range r.Question {
			res := z.lookup(q, snap)
			if res.result == resultFallthrough {
				continue
			}
			if _, err := reply(r, res).Pack(); err != nil {
				t.Fatalf("reply to %v does not pack: %v", q, err)
			}
		}
	})
}

// FuzzAnnouncement feeds random mDNS packets to the browser's parser.
func FuzzAnnouncement(f *testing.F) {
	cfg := testConfig()
	d, err := NewMDNS(cfg, cluster.NewState(cfg), MDNSOptions{Node: "master-0", Role: cluster.RoleMaster, TTL: 5 * time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	d.self.Store(&host.View{Name: "master-0", Role: cluster.RoleMaster,
		Prefixes: []netip.Prefix{netip.MustParsePrefix("192.168.126.10/24"), netip.MustParsePrefix("fd00::10/64")}})
	m := new(dns.Msg)
	m.Response = true
	m.Answer = d.records(5)
	b, err := m.Pack()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		m := new(dns.Msg)
		if m.Unpack(data) != nil {
			return
		}
		for _, a := range parseAnnouncement(m, "ocp4.example.com") {
			if a.member.Name == "" || a.member.Source != cluster.SourceMDNS {
				t.Fatalf("bad member %+v", a.member)
			}
		}
	})
}

func TestParseAnnouncement(t *testing.T) {
	cfg := testConfig()
	d, err := NewMDNS(cfg, cluster.NewState(cfg), MDNSOptions{Node: "master-0", Role: cluster.RoleMaster, TTL: 5 * time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	d.self.Store(&host.View{Name: "master-0", Role: cluster.RoleMaster,
		Prefixes: []netip.Prefix{netip.MustParsePrefix("192.168.126.10/24"), netip.MustParsePrefix("fd00::10/64")}})
	m := &dns.Msg{Answer: d.records(5)}
	got := parseAnnouncement(m, "OCP4.example.com")
	if len(got) != 1 || got[0].member.Name != "master-0" || got[0].member.Role != cluster.RoleMaster ||
		!slices.Equal(got[0].member.IPs, d.self.Load().Addrs()) || got[0].ttl != 5*time.Second {
		t.Fatalf("parsed %+v", got)
	}
	if got := parseAnnouncement(m, "other.example.com"); len(got) != 0 {
		t.Fatalf("another cluster's node parsed: %+v", got)
	}
	// Goodbye: TTL 0.
	if got := parseAnnouncement(&dns.Msg{Answer: d.records(0)}, "ocp4.example.com"); len(got) != 1 || got[0].ttl != 0 {
		t.Fatalf("goodbye parsed as %+v", got)
	}
}
