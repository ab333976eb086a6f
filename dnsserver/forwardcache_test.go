package dnsserver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"appliance/internal/cluster"
)

// authUpstream is a small authoritative server for example.org on loopback
// with fixed answers: addresses, MX, TXT (one too long for 512 bytes), a
// CNAME chain, NODATA and NXDOMAIN with an SOA, SERVFAIL, and an NSID
// option in every EDNS reply.
type authUpstream struct {
	addr    netip.AddrPort
	queries atomic.Int64
}

func startAuthUpstream(t testing.TB) *authUpstream {
	t.Helper()
	u := &authUpstream{}
	u.addr = serveDNS(t, dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		u.queries.Add(1)
		_ = w.WriteMsg(authAnswer(r))
	}))
	return u
}

// authAnswer is the upstream's reply to r; owner names echo the question's
// spelling, as most servers do.
func authAnswer(r *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.RecursionAvailable = true
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	hdr := func(owner string, t uint16, ttl uint32) dns.RR_Header {
		return dns.RR_Header{Name: owner, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
	}
	soa := &dns.SOA{Hdr: hdr("example.org.", dns.TypeSOA, 3600), Ns: "ns.example.org.", Mbox: "hostmaster.example.org.",
		Serial: 2026112401, Refresh: 7200, Retry: 3600, Expire: 1209600, Minttl: 300}
	addrs := func(owner string, qt uint16) []dns.RR {
		switch qt {
		case dns.TypeA:
			return []dns.RR{&dns.A{Hdr: hdr(owner, dns.TypeA, 300), A: net.IPv4(192, 0, 2, 1)},
				&dns.A{Hdr: hdr(owner, dns.TypeA, 600), A: net.IPv4(192, 0, 2, 2)}}
		case dns.TypeAAAA:
			return []dns.RR{&dns.AAAA{Hdr: hdr(owner, dns.TypeAAAA, 300), AAAA: net.ParseIP("2001:db8::1")}}
		}
		return nil
	}
	switch {
	case name == "www.example.org." || name == "quay.io." || name == "registry.redhat.io." || name == "registry.access.redhat.com." ||
		name == "api.openshift.com." || name == "mirror.openshift.com.":
		m.Answer = addrs(q.Name, q.Qtype)
		switch q.Qtype {
		case dns.TypeMX:
			m.Answer = []dns.RR{&dns.MX{Hdr: hdr(q.Name, dns.TypeMX, 900), Preference: 10, Mx: "mail.example.org."}}
		case dns.TypeTXT:
			m.Answer = []dns.RR{&dns.TXT{Hdr: hdr(q.Name, dns.TypeTXT, 120), Txt: []string{"v=spf1 -all", "hello"}}}
		}
		if len(m.Answer) == 0 {
			m.Ns = []dns.RR{soa}
		}
	case name == "v4only.example.org.":
		if q.Qtype == dns.TypeA {
			m.Answer = addrs(q.Name, q.Qtype)[:1]
		} else {
			m.Ns = []dns.RR{soa} // NODATA
		}
	case name == "alias.example.org.":
		m.Answer = []dns.RR{&dns.CNAME{Hdr: hdr(q.Name, dns.TypeCNAME, 500), Target: "alias2.example.org."}}
		if q.Qtype != dns.TypeCNAME {
			m.Answer = append(m.Answer, &dns.CNAME{Hdr: hdr("alias2.example.org.", dns.TypeCNAME, 400), Target: "www.example.org."})
			m.Answer = append(m.Answer, addrs("www.example.org.", q.Qtype)...)
			if len(m.Answer) == 2 {
				m.Ns = []dns.RR{soa}
			}
		}
	case name == "big.example.org.":
		for i := range 12 {
			m.Answer = append(m.Answer, &dns.TXT{Hdr: hdr(q.Name, dns.TypeTXT, 300), Txt: []string{strings.Repeat(fmt.Sprint(i), 60)}})
		}
	case name == "fail.example.org.":
		m.Rcode = dns.RcodeServerFailure
	default:
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa}
	}
	if o := r.IsEdns0(); o != nil {
		m.SetEdns0(1232, o.Do())
		m.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_NSID{Code: dns.EDNS0NSID, Nsid: "7570"}}
	}
	return m
}

// fwdQueries is the forwarded query set: spellings, EDNS variants, flags
// and kinds of reply, packed.
func fwdQueries(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	names := []string{"www.example.org", "WWW.Example.ORG", "wWw.eXample.org", "quay.io", "QUAY.IO",
		"v4only.example.org", "alias.example.org", "Alias.Example.Org", "nx.example.org", "NX.example.org",
		"big.example.org", "fail.example.org", "nope.example.org"}
	types := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeMX, dns.TypeTXT, dns.TypeCNAME, dns.TypeANY}
	id := uint16(100)
	for _, n := range names {
		for _, qt := range types {
			for _, v := range []struct {
				label string
				edit  func(m *dns.Msg)
			}{
				{"plain", func(*dns.Msg) {}},
				{"norecurse", func(m *dns.Msg) { m.RecursionDesired = false }},
				{"cd", func(m *dns.Msg) { m.CheckingDisabled = true }},
				{"ad", func(m *dns.Msg) { m.AuthenticatedData = true }},
				{"edns1232", func(m *dns.Msg) { m.SetEdns0(1232, false) }},
				{"edns4096do", func(m *dns.Msg) { m.SetEdns0(4096, true) }},
				{"edns512do", func(m *dns.Msg) { m.SetEdns0(512, true) }},
				{"cookie", func(m *dns.Msg) {
					m.SetEdns0(1232, false)
					m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
				}},
			} {
				m := new(dns.Msg)
				m.SetQuestion(dns.Fqdn(n), qt)
				m.Id = id
				id++
				v.edit(m)
				b, err := m.Pack()
				if err != nil {
					t.Fatal(err)
				}
				out[fmt.Sprintf("%s/%s/%s", n, dns.Type(qt), v.label)] = b
			}
		}
	}
	return out
}

// ttlFields returns b with the TTL of every record but OPT zeroed, and
// those TTLs; compression pointers are followed over.
func ttlFields(t *testing.T, b []byte) ([]byte, []uint32) {
	t.Helper()
	b = bytes.Clone(b)
	if len(b) < 12 {
		return b, nil
	}
	skip := func(i int) int {
		for i < len(b) {
			l := int(b[i])
			switch {
			case l == 0:
				return i + 1
			case l&0xc0 == 0xc0:
				return i + 2
			}
			i += l + 1
		}
		t.Fatalf("cut name in %x", b)
		return 0
	}
	i := skip(12) + 4
	n := int(binary.BigEndian.Uint16(b[6:])) + int(binary.BigEndian.Uint16(b[8:])) + int(binary.BigEndian.Uint16(b[10:]))
	var ttls []uint32
	for range n {
		i = skip(i)
		if binary.BigEndian.Uint16(b[i:]) != dns.TypeOPT {
			ttls = append(ttls, binary.BigEndian.Uint32(b[i+4:]))
			binary.BigEndian.PutUint32(b[i+4:], 0)
		}
		i += 10 + int(binary.BigEndian.Uint16(b[i+8:]))
	}
	return b, ttls
}

// TestForwardCacheSameAnswers sends the forwarded query set to a server
// with the forward cache and one without (the chain's own cache), both
// forwarding to the same upstream, three times: what the cache answers is
// the chain's reply byte for byte but the TTLs, which are never above
// the first reply's and go down with time.
func TestForwardCacheSameAnswers(t *testing.T) {
	up := startAuthUpstream(t)
	cfg := testConfig()
	cfg.Network.UpstreamDNS = []netip.AddrPort{up.addr}
	fastSrv, fastAddr := startServer(t, cfg, cluster.NewState(cfg), Options{})
	slowSrv, slowAddr := startServer(t, cfg, cluster.NewState(cfg), Options{NoFastPath: true})

	qs := fwdQueries(t)
	first := map[string][]uint32{}
	last := map[string][]uint32{}
	for round := range 3 {
		if round == 2 {
			time.Sleep(1100 * time.Millisecond)
		}
		before := counterValue(t, fastSrv.metrics.forwardHits)
		for label, q := range qs {
			fh := counterValue(t, fastSrv.metrics.forwardHits)
			fast := exchangeRaw(t, "udp", fastAddr, q)
			hit := counterValue(t, fastSrv.metrics.forwardHits) > fh
			slow := exchangeRaw(t, "udp", slowAddr, q)
			fm, fttl := ttlFields(t, fast)
			sm, sttl := ttlFields(t, slow)
			if !bytes.Equal(fm, sm) || len(fttl) != len(sttl) {
				var a, b dns.Msg
				_ = a.Unpack(fast)
				_ = b.Unpack(slow)
				t.Errorf("round %d %s (cache hit %v): replies differ\nfast path (%d bytes): %x\n%v\nchain (%d bytes): %x\n%v",
					round, label, hit, len(fast), fast, &a, len(slow), slow, &b)
				continue
			}
			if fast == nil {
				t.Errorf("round %d %s: no reply", round, label)
				continue
			}
			if len(first[label]) == 0 {
				// A first reply without records: truncated on the
				// chain's miss, which compresses its later hits.
				first[label] = fttl
			}
			if len(first[label]) != len(fttl) {
				t.Errorf("round %d %s: %d records, %d in the first reply", round, label, len(fttl), len(first[label]))
				continue
			}
			for i, v := range fttl {
				if v > first[label][i] {
					t.Errorf("round %d %s: TTL %d above the first reply's %d", round, label, v, first[label][i])
				}
				if round == 2 && hit && v >= last[label][i] {
					t.Errorf("%s: TTL %d did not go down from %d in 1.1 s", label, v, last[label][i])
				}
			}
			last[label] = fttl
			if hit {
				if strings.Contains(label, "fail.") || strings.Contains(label, "big.") && !strings.Contains(label, "/edns") ||
					strings.Contains(label, "/ANY/") || strings.Contains(label, "/cookie") {
					t.Errorf("round %d %s: served from the cache", round, label)
				}
			}
		}
		hits := counterValue(t, fastSrv.metrics.forwardHits) - before
		t.Logf("round %d: %d queries, %v from the forward cache", round, len(qs), hits)
		if round > 0 && hits < float64(len(qs))/2 {
			t.Errorf("round %d: only %v of %d queries from the forward cache", round, hits, len(qs))
		}
	}
	if n := fastSrv.fwdCache.len(); n == 0 || n > len(qs) {
		t.Errorf("%d entries cached", n)
	}
	// A hit counts what the chain counts for a forwarded name.
	sameMetrics(t, fastSrv, slowSrv)
}

// TestForwardCacheLosesNothingOnChange: while the cluster view churns and
// the upstreams switch back and forth, every query is answered, and after a
// switch the cache is empty at once.
func TestForwardCacheLosesNothingOnChange(t *testing.T) {
	a := startUpstream(t, "192.0.2.1")
	b := startUpstream(t, "192.0.2.2")
	cfg := testConfig()
	cfg.Network.UpstreamDNS = []netip.AddrPort{a.addr}
	state := cluster.NewState(cfg)
	s, addr := startServer(t, cfg, state, Options{})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			state.UpsertMember(cluster.Member{Name: fmt.Sprintf("churn-%d", i%10), Role: cluster.RoleWorker, Source: cluster.SourceMDNS,
				IPs: []netip.Addr{netip.AddrFrom4([4]byte{192, 168, 126, byte(100 + i%10)})}})
			state.RemoveMember(fmt.Sprintf("churn-%d", (i+5)%10), cluster.SourceMDNS)
			time.Sleep(time.Millisecond)
		}
	}()
	var sent, failed atomic.Int64
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &dns.Client{Timeout: 2 * time.Second}
			names := []string{"www.example.org.", "api.ocp4.example.com.", "Quay.IO.", "registry.example.net."}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m := new(dns.Msg)
				m.SetQuestion(names[i%len(names)], dns.TypeA)
				sent.Add(1)
				r, _, err := c.Exchange(m, addr)
				if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
					failed.Add(1)
					t.Logf("query %s: %v %v", names[i%len(names)], err, r)
				}
			}
		}()
	}
	for i := range 6 {
		time.Sleep(150 * time.Millisecond)
		ups := []netip.AddrPort{b.addr}
		if i%2 == 1 {
			ups = []netip.AddrPort{a.addr}
		}
		if err := s.SetUpstreams(ups); err != nil {
			t.Fatal(err)
		}
		if s.fwdCache.gen.Load() != uint64(i+2) {
			t.Errorf("switch %d: generation %d", i, s.fwdCache.gen.Load())
		}
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	hits := counterValue(t, s.metrics.forwardHits)
	t.Logf("%d queries during 6 upstream switches and member churn, %d failed, %v forward cache hits", sent.Load(), failed.Load(), hits)
	if failed.Load() != 0 || sent.Load() < 20 || hits == 0 {
		t.Fatalf("%d of %d queries failed, %v hits", failed.Load(), sent.Load(), hits)
	}
	if err := s.SetUpstreams([]netip.AddrPort{b.addr}); err != nil {
		t.Fatal(err)
	}
	if n := s.fwdCache.len(); n != 0 {
		t.Errorf("%d entries after an upstream change", n)
	}
}

// TestForwardCacheMemberPTR: a reverse name forwarded (and cached) while no
// member has the address is the cluster's answer as soon as one has it.
func TestForwardCacheMemberPTR(t *testing.T) {
	up := startAuthUpstream(t)
	cfg := testConfig()
	cfg.Network.UpstreamDNS = []netip.AddrPort{up.addr}
	state := cluster.NewState(cfg)
	s, addr := startServer(t, cfg, state, Options{})
	const rev = "77.126.168.192.in-addr.arpa"
	for range 3 {
		if r := query(t, addr, rev, dns.TypePTR); r.Rcode != dns.RcodeNameError {
			t.Fatalf("before: %v", r)
		}
	}
	if counterValue(t, s.metrics.forwardHits) == 0 {
		t.Fatal("the forwarded reverse name was not served from the cache")
	}
	state.UpsertMember(cluster.Member{Name: "late", Role: cluster.RoleWorker, Source: cluster.SourceMDNS,
		IPs: []netip.Addr{netip.MustParseAddr("192.168.126.77")}})
	if r := query(t, addr, rev, dns.TypePTR); len(r.Answer) != 1 {
		t.Fatalf("after the member came: %v", r)
	}
}

// fwdTestReply packs a reply to name/qtype as the chain writes it.
func fwdTestReply(t testing.TB, name string, qtype uint16, ttl uint32, edns bool) ([]byte, []byte) {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	if edns {
		q.SetEdns0(1232, false)
	}
	m := authAnswer(q)
	for _, rrs := range [][]dns.RR{m.Answer, m.Ns} {
		for _, rr := range rrs {
			rr.Header().Ttl = ttl
		}
	}
	if o := m.IsEdns0(); o != nil {
		o.Option = nil
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	qb, _ := q.Pack()
	return qb, b
}

// TestForwardCacheExpiry: a reply is served with its TTLs lowered by the
// whole seconds it was held, rounded up, and not once they reach zero; a
// denial lives at most the SOA's minimum; caps apply.
func TestForwardCacheExpiry(t *testing.T) {
	c := newForwardCache(100, 1<<20, 30)
	qb, rb := fwdTestReply(t, "www.example.org.", dns.TypeA, 10, false)
	fq, key, ok := parseFastQuery(qb, nil)
	if !ok {
		t.Fatal("query not parsed")
	}
	key = append(key, fwdKeyFlags(qb, fq))
	c.fill(&fwdPending{key: string(key), qtype: dns.TypeA, flags: key[len(key)-1]}, rb, 0, nil)
	out := make([]byte, 0, ednsBufSize)
	for _, tc := range []struct {
		age  time.Duration
		want int // TTL, -1 none
	}{{0, 10}, {time.Millisecond, 9}, {time.Second, 9}, {1500 * time.Millisecond, 8}, {9 * time.Second, 1},
		{9*time.Second + 1, -1}, {time.Hour, -1}} {
		r, _ := c.answer(out, qb, fq, key, int64(tc.age))
		if tc.want < 0 {
			if r != nil {
				t.Errorf("age %v: served", tc.age)
			}
			continue
		}
		if r == nil {
			t.Errorf("age %v: not served", tc.age)
			continue
		}
		_, ttls := ttlFields(t, r)
		for _, v := range ttls {
			if v != uint32(tc.want) {
				t.Errorf("age %v: TTL %d, want %d", tc.age, v, tc.want)
			}
		}
	}
	// Caps: the server's CacheTTL; a denial's SOA minimum.
	for _, tc := range []struct {
		name   string
		qtype  uint16
		ttl    uint32
		maxTTL uint32
		life   uint32
	}{
		{"www.example.org.", dns.TypeA, 7200, 0, fwdMaxPositiveTTL},
		{"www.example.org.", dns.TypeA, 7200, 30, 30},
		{"nx.example.org.", dns.TypeA, 7200, 0, 300},
		{"v4only.example.org.", dns.TypeAAAA, 100, 0, 100},
		{"alias.example.org.", dns.TypeA, 50, 0, 50},
	} {
		qb, rb := fwdTestReply(t, tc.name, tc.qtype, tc.ttl, false)
		fq, key, _ := parseFastQuery(qb, nil)
		key = append(key, fwdKeyFlags(qb, fq))
		r, ok := parseFwdReply(rb, key, tc.qtype, key[len(key)-1], tc.maxTTL)
		if !ok || r.life != tc.life {
			t.Errorf("%s %s TTL %d cap %d: life %d (%v), want %d", tc.name, dns.Type(tc.qtype), tc.ttl, tc.maxTTL, r.life, ok, tc.life)
		}
	}
	// Never cached: SERVFAIL, truncated, EDNS options, OPT not matching
	// the query, zero TTL, compressed.
	qb, rb = fwdTestReply(t, "www.example.org.", dns.TypeA, 10, true)
	fq, key, _ = parseFastQuery(qb, nil)
	key = append(key, fwdKeyFlags(qb, fq))
	if _, ok := parseFwdReply(rb, key, dns.TypeA, key[len(key)-1], 0); !ok {
		t.Fatal("an EDNS reply is not cached")
	}
	edit := func(label string, f func(m *dns.Msg)) {
		var m dns.Msg
		if err := m.Unpack(rb); err != nil {
			t.Fatal(err)
		}
		f(&m)
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := parseFwdReply(b, key, dns.TypeA, key[len(key)-1], 0); ok {
			t.Errorf("%s: cached", label)
		}
	}
	edit("servfail", func(m *dns.Msg) { m.Rcode = dns.RcodeServerFailure })
	edit("refused", func(m *dns.Msg) { m.Rcode = dns.RcodeRefused })
	edit("truncated", func(m *dns.Msg) { m.Truncated = true })
	edit("nsid", func(m *dns.Msg) {
		m.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_NSID{Code: dns.EDNS0NSID, Nsid: "7570"}}
	})
	edit("no OPT", func(m *dns.Msg) { m.Extra = nil })
	edit("DO", func(m *dns.Msg) { m.IsEdns0().SetDo() })
	edit("zero TTL", func(m *dns.Msg) { m.Answer[1].Header().Ttl = 0 })
	edit("compressed", func(m *dns.Msg) { m.Compress = true })
	edit("other name", func(m *dns.Msg) { m.Question[0].Name = "www.example.net." })
	edit("other type", func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeAAAA })
	edit("not an answer", func(m *dns.Msg) { m.Answer[0].Header().Name = "x.example.org."; m.Answer = m.Answer[:1] })
	edit("no SOA", func(m *dns.Msg) { m.Rcode = dns.RcodeNameError; m.Answer = nil })
}

// TestForwardCacheBound: the cache never holds more than its bounds, and
// an upstream change empties it.
func TestForwardCacheBound(t *testing.T) {
	const entries, size = 256, 64 << 10
	c := newForwardCache(entries, size, 0)
	for i := range 5000 {
		name := fmt.Sprintf("host-%d.example.org.", i)
		qtype := dns.TypeA
		if i%7 == 0 {
			name, qtype = fmt.Sprintf("big%d.example.org.", i), dns.TypeTXT
		}
		qb, rb := fwdTestReply(t, name, qtype, 60, true)
		var m dns.Msg
		_ = m.Unpack(rb)
		m.Rcode = dns.RcodeSuccess
		m.Ns = nil
		if qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 9)}}
		} else {
			for j := range 5 {
				m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: []string{strings.Repeat(fmt.Sprint(j), 200)}})
			}
		}
		rb, _ = m.Pack()
		fq, key, _ := parseFastQuery(qb, nil)
		key = append(key, fwdKeyFlags(qb, fq))
		c.fill(&fwdPending{key: string(key), qtype: qtype, flags: key[len(key)-1]}, rb, 0, nil)
	}
	total, bytes := 0, 0
	for i := range c.shards {
		s := &c.shards[i]
		if len(s.m) > c.maxEntries || s.bytes > c.maxBytes {
			t.Errorf("shard %d: %d entries, %d bytes", i, len(s.m), s.bytes)
		}
		total += len(s.m)
		bytes += s.bytes
	}
	t.Logf("%d entries, %d bytes", total, bytes)
	if total > entries || bytes > size || total < entries/4 {
		t.Errorf("%d entries (bound %d), %d bytes (bound %d)", total, entries, bytes, size)
	}
	c.flush()
	if c.len() != 0 {
		t.Errorf("%d entries after flush", c.len())
	}
}

// TestForwardCacheHitAllocs: a hit allocates nothing.
func TestForwardCacheHitAllocs(t *testing.T) {
	c := newForwardCache(100, 1<<20, 30)
	qb, rb := fwdTestReply(t, "www.example.org.", dns.TypeA, 60, true)
	fq, key, _ := parseFastQuery(qb, nil)
	key = append(key, fwdKeyFlags(qb, fq))
	c.fill(&fwdPending{key: string(key), qtype: dns.TypeA, flags: key[len(key)-1]}, rb, fwdNow(), nil)
	out := make([]byte, 0, ednsBufSize)
	kb := make([]byte, 0, 260)
	allocs := testing.AllocsPerRun(1000, func() {
		fq, k, ok := parseFastQuery(qb, kb[:0])
		if !ok {
			t.Fatal("not parsed")
		}
		k = append(k, fwdKeyFlags(qb, fq))
		if r, _ := c.answer(out, qb, fq, k, fwdNow()); r == nil {
			t.Fatal("miss")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per hit", allocs)
	}
}

// FuzzForwardReply feeds the forward cache's parse and patch arbitrary
// replies to a query: it never panics, and what it would serve is the
// reply with the query's ID and spelling and TTLs no higher.
func FuzzForwardReply(f *testing.F) {
	for _, name := range []string{"www.example.org.", "WWW.example.ORG.", "alias.example.org.", "nx.example.org.", "v4only.example.org.", "big.example.org."} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeMX, dns.TypeCNAME} {
			for _, edns := range []bool{false, true} {
				q, r := fwdTestReply(f, name, qt, 60, edns)
				f.Add(q, r, uint16(1500))
			}
		}
	}
	out := make([]byte, 0, ednsBufSize)
	f.Fuzz(func(t *testing.T, q, reply []byte, ageMs uint16) {
		fq, key, ok := parseFastQuery(q, nil)
		if !ok {
			return
		}
		flags := fwdKeyFlags(q, fq)
		key = append(key, flags)
		r, ok := parseFwdReply(reply, key, fq.qtype, flags, 30)
		if !ok {
			return
		}
		if r.life == 0 || r.life > 30 || len(r.ttlOff) != len(r.ttls) {
			t.Fatalf("life %d, %d TTL offsets for %d TTLs", r.life, len(r.ttlOff), len(r.ttls))
		}
		got := r.patch(out, q, fq, int64(ageMs)*int64(time.Millisecond))
		if got == nil {
			return
		}
		if len(got) != len(reply) || !bytes.Equal(got[:2], q[:2]) || !bytes.Equal(got[12:fq.nameEnd], q[12:fq.nameEnd]) {
			t.Fatalf("query %x reply %x: served %x", q, reply, got)
		}
		var want, m dns.Msg
		if want.Unpack(reply) != nil {
			return
		}
		if err := m.Unpack(got); err != nil {
			t.Fatalf("reply %x unpacks, served %x does not: %v", reply, got, err)
		}
		rrs := append(append(append([]dns.RR(nil), m.Answer...), m.Ns...), m.Extra...)
		wrrs := append(append(append([]dns.RR(nil), want.Answer...), want.Ns...), want.Extra...)
		for i, rr := range rrs {
			if rr.Header().Rrtype != dns.TypeOPT && rr.Header().Ttl > wrrs[i].Header().Ttl {
				t.Fatalf("TTL %d above the reply's %d: %v", rr.Header().Ttl, wrrs[i].Header().Ttl, rr)
			}
		}
	})
}

// TestForwardCachePrefetch: a name asked all the time stays in the cache
// across its expiry. Hits in the last 20% of the entry's life send the
// query through the chain as well, the chain's cache refreshes its item
// from the upstream in the same window, and the refreshed reply replaces
// the entry before it runs out: after the first query, no query takes the
// chain. Each query is counted once, prefetched or not.
func TestForwardCachePrefetch(t *testing.T) {
	up := startAuthUpstream(t)
	cfg := testConfig()
	cfg.Network.UpstreamDNS = []netip.AddrPort{up.addr}
	// 11 s: the least life whose window is 3 s (ceil(20% of 11)), so the
	// prefetches have two seconds before the entry's last one, slack for
	// a busy machine.
	const life = 11
	s, addr := startServer(t, cfg, cluster.NewState(cfg), Options{CacheTTL: life})

	c := &dns.Client{Timeout: 2 * time.Second}
	// The first query fills the cache; its reply can reach the client
	// before the entry is stored, so the second may miss too. From the
	// tenth on, every query is a hit.
	const warm = 10
	sent, warmHits := 0, 0.0
	var ttls []uint32
	for end := time.Now().Add((life + 1) * time.Second); time.Now().Before(end); {
		m := new(dns.Msg)
		m.SetQuestion("quay.io.", dns.TypeA)
		r, _, err := c.Exchange(m, addr)
		sent++
		if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
			t.Fatalf("query %d: %v %v", sent, err, r)
		}
		ttls = append(ttls, r.Answer[0].Header().Ttl)
		if sent == warm {
			warmHits = counterValue(t, s.metrics.forwardHits)
		}
		time.Sleep(20 * time.Millisecond)
	}
	hits := counterValue(t, s.metrics.forwardHits)
	prefetches := counterValue(t, s.metrics.forwardPrefetches)
	t.Logf("%d queries: %.0f hits, %.0f of them prefetched; upstream asked %d times; TTLs %d … %d",
		sent, hits, prefetches, up.queries.Load(), ttls[0], ttls[len(ttls)-1])
	if misses := float64(sent-warm) - (hits - warmHits); misses > 0 {
		t.Errorf("%.0f of the %d queries after the first %d took the chain; want none", misses, sent-warm, warm)
	}
	if prefetches < 1 || up.queries.Load() < 2 {
		t.Errorf("%.0f prefetches, %d upstream queries: the entry was not refreshed from the upstream", prefetches, up.queries.Load())
	}
	// A prefetch is sent at most every 100 ms while the entry is in its
	// window, and it ends as soon as a refreshed reply replaces the entry.
	if prefetches > 2*10*(life*fwdPrefetchPercent/100+1) {
		t.Errorf("%.0f prefetches: more than one per 100 ms in the window", prefetches)
	}
	if got := counterValue(t, s.metrics.request(false, dns.TypeA)); got != float64(sent) {
		t.Errorf("requests counted %.0f, sent %d", got, sent)
	}
	if !slices.ContainsFunc(ttls[len(ttls)/2:], func(ttl uint32) bool { return ttl > 2 }) {
		t.Errorf("TTLs after the first life %v: never refreshed", ttls[len(ttls)/2:])
	}
}
