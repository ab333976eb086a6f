package dnsserver

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"appliance/internal/cluster"
	"appliance/internal/netlab/netlabtest"
)

// orderedUpstream is a resolver on a fixed loopback address that answers
// every A question with its own mark, and can be stopped and started again
// on the same address, as a site's resolver goes down and comes back.
type orderedUpstream struct {
	t       *testing.T
	addr    netip.AddrPort
	mark    string
	queries atomic.Int64
	servers []*dns.Server
}

func newOrderedUpstream(t *testing.T, mark string) *orderedUpstream {
	t.Helper()
	u := &orderedUpstream{t: t, mark: mark, addr: netip.MustParseAddrPort(netlabtest.FreeLoopbackAddr(t))}
	u.start()
	t.Cleanup(u.stop)
	return u
}

// ServeDNS implements dns.Handler.
func (u *orderedUpstream) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	u.queries.Add(1)
	m := new(dns.Msg)
	m.SetReply(r)
	if q := r.Question[0]; q.Qtype == dns.TypeA {
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
			A: net.ParseIP(u.mark)}}
	}
	_ = w.WriteMsg(m)
}

// stop closes both listeners: the forwarder's next query is refused by the
// kernel (ICMP port unreachable, TCP RST).
func (u *orderedUpstream) stop() {
	for _, s := range u.servers {
		_ = s.Shutdown()
	}
	u.servers = nil
}

// start listens on the upstream's address again.
func (u *orderedUpstream) start() {
	u.t.Helper()
	pc, err := net.ListenPacket("udp", u.addr.String())
	if err != nil {
		u.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", u.addr.String())
	if err != nil {
		pc.Close()
		u.t.Fatal(err)
	}
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: u}, {Listener: ln, Handler: u}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started
		u.servers = append(u.servers, srv)
	}
}

// answeredBy asks addr for name over UDP and returns the A record's
// address, "" for anything else.
func answeredBy(t *testing.T, addr, name string) string {
	t.Helper()
	r := query(t, addr, name, dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		return dns.RcodeToString[r.Rcode]
	}
	a, ok := r.Answer[0].(*dns.A)
	if !ok {
		return ""
	}
	return a.A.String()
}

// TestForwardSequential: two upstreams give different answers for the same
// name. While the first is up, every answer is the first's and the second
// is never asked; once it stops, the second answers; once it is back (its
// health check recovers), the first again. The order is the config's:
// upstreams listed the other way round are answered by the other one.
func TestForwardSequential(t *testing.T) {
	first := newOrderedUpstream(t, "192.0.2.1")
	second := newOrderedUpstream(t, "192.0.2.2")
	cfg := testConfig()
	cfg.Network.UpstreamDNS = []netip.AddrPort{first.addr, second.addr}
	// No cache: every query reaches the forwarder.
	s, addr := startServer(t, cfg, cluster.NewState(cfg), Options{CacheTTL: -1})
	if got := s.Upstreams(); !slices.Equal(got, cfg.Network.UpstreamDNS) {
		t.Fatalf("upstreams %v, want %v", got, cfg.Network.UpstreamDNS)
	}

	const n = 50
	askAll := func(phase, want string) {
		t.Helper()
		for i := range n {
			if got := answeredBy(t, addr, "www.example.org"); got != want {
				t.Fatalf("%s: query %d answered %s, want %s (the %s upstream)", phase, i, got, want, phase)
			}
		}
	}
	askAll("first", "192.0.2.1")
	if q := second.queries.Load(); q != 0 {
		t.Fatalf("the second upstream was asked %d times while the first answered", q)
	}

	first.stop()
	askAll("second", "192.0.2.2")
	// Each failure starts the health check (every 0.5 s while it fails);
	// after more than 2 failed checks the first is down and skipped.
	firstProxy := s.fwd.Load().List()[0]
	start := time.Now()
	for firstProxy.Fails() <= 2 {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the stopped first upstream is not down after 10 s (%d failed health checks)", firstProxy.Fails())
		}
		if got := answeredBy(t, addr, "www.example.org"); got != "192.0.2.2" {
			t.Fatalf("first stopped: answered %s, want 192.0.2.2", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("first upstream down after %v", time.Since(start).Round(time.Millisecond))
	askAll("second", "192.0.2.2")

	first.start()
	// Recovery: the health check asks every 0.5 s until the first answers;
	// then it is tried first again.
	start = time.Now()
	for answeredBy(t, addr, "www.example.org") != "192.0.2.1" {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the first upstream is back but was not asked again within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("first upstream used again %v after it came back", time.Since(start).Round(time.Millisecond))
	if f := firstProxy.Fails(); f != 0 {
		t.Errorf("the first upstream answers again with %d failures counted", f)
	}
	before := second.queries.Load()
	askAll("first", "192.0.2.1")
	if q := second.queries.Load() - before; q != 0 {
		t.Fatalf("the second upstream was asked %d times after the first came back", q)
	}

	// The same upstreams the other way round: the second's answers.
	cfg2 := testConfig()
	cfg2.Network.UpstreamDNS = []netip.AddrPort{second.addr, first.addr}
	_, addr2 := startServer(t, cfg2, cluster.NewState(cfg2), Options{CacheTTL: -1})
	for i := range n {
		if got := answeredBy(t, addr2, "www.example.org"); got != "192.0.2.2" {
			t.Fatalf("reversed order: query %d answered %s, want 192.0.2.2", i, got)
		}
	}

	// SetUpstreams keeps the order it is given too.
	if err := s.SetUpstreams([]netip.AddrPort{second.addr, first.addr}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got := answeredBy(t, addr, "www.example.org"); got != "192.0.2.2" {
			t.Fatalf("after SetUpstreams: query %d answered %s, want 192.0.2.2", i, got)
		}
	}
}

// forwarderOrder is the order in which s's forwarder tries its upstreams.
func forwarderOrder(s *Server) []string {
	var out []string
	for _, p := range s.fwd.Load().List() {
		out = append(out, p.Addr())
	}
	return out
}

// TestForwarderOrder: the forwarder tries the upstreams in the order given,
// every time (the stock default, random, shuffles two upstreams on half the
// queries), whether they come from network.upstreamDNS or resolv.conf.
func TestForwarderOrder(t *testing.T) {
	ups := []netip.AddrPort{
		netip.MustParseAddrPort("192.0.2.30:53"), netip.MustParseAddrPort("192.0.2.10:5353"),
		netip.MustParseAddrPort("[2001:db8::53]:53"), netip.MustParseAddrPort("192.0.2.20:53"),
	}
	want := []string{"192.0.2.30:53", "192.0.2.10:5353", "[2001:db8::53]:53", "192.0.2.20:53"}
	f, err := newForwarder(ups)
	if err != nil {
		t.Fatal(err)
	}
	defer f.OnShutdown()
	for range 100 {
		var got []string
		for _, p := range f.List() {
			got = append(got, p.Addr())
		}
		if !slices.Equal(got, want) {
			t.Fatalf("forwarder order %v, want %v", got, want)
		}
	}

	cfg := testConfig()
	cfg.Network.UpstreamDNS = ups
	s, _ := startServer(t, cfg, cluster.NewState(cfg), Options{})
	if got := forwarderOrder(s); !slices.Equal(got, want) {
		t.Errorf("network.upstreamDNS: forwarder order %v, want %v", got, want)
	}

	// resolv.conf: its order, minus loopback and the node's own address.
	path := filepath.Join(t.TempDir(), "resolv.conf")
	conf := "nameserver 192.0.2.30\nnameserver 127.0.0.53\nnameserver 198.51.100.7\nnameserver 2001:db8::53\nnameserver 192.0.2.10\n"
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	own := func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("198.51.100.7")}, nil }
	cfg = testConfig()
	s, _ = startServer(t, cfg, cluster.NewState(cfg), Options{ResolvConf: path, LocalAddrs: own})
	wantConf := []string{"192.0.2.30:53", "[2001:db8::53]:53", "192.0.2.10:53"}
	if got := forwarderOrder(s); !slices.Equal(got, wantConf) {
		t.Errorf("resolv.conf: forwarder order %v, want %v", got, wantConf)
	}
	if got := s.Status().Upstreams; len(got) != len(wantConf) || got[0].String() != wantConf[0] || got[2].String() != wantConf[2] {
		t.Errorf("resolv.conf: status upstreams %v, want %v", got, wantConf)
	}
}

// TestForwarderLimits: what the forward plugin cannot take is an error
// naming it, and the current forwarder stays.
func TestForwarderLimits(t *testing.T) {
	var many []netip.AddrPort
	for i := range maxUpstreams + 1 {
		many = append(many, netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}), 53))
	}
	if _, err := newForwarder(many); err == nil || err.Error() != "dns: 16 upstream resolvers; CoreDNS's forward takes at most 15" {
		t.Errorf("16 upstreams: %v", err)
	}
	f, err := newForwarder(many[:maxUpstreams])
	if err != nil {
		t.Fatalf("15 upstreams: %v", err)
	}
	_ = f.OnShutdown()
	if _, err := newForwarder(nil); err == nil {
		t.Error("no upstream: no error")
	}
	if _, err := newForwarder([]netip.AddrPort{netip.MustParseAddrPort("[fe80::1%eth0]:53")}); err == nil {
		t.Error("zoned upstream: no error")
	}

	cfg := testConfig()
	cfg.Network.UpstreamDNS = many
	if _, err := New(cfg, cluster.NewState(cfg), Options{}, testLogger(t)); err == nil ||
		err.Error() != "dns: network.upstreamDNS lists 16 resolvers; CoreDNS's forward takes at most 15, keep the first 15" {
		t.Errorf("New with 16 upstreams: %v", err)
	}

	cfg.Network.UpstreamDNS = many[:1]
	s, _ := startServer(t, cfg, cluster.NewState(cfg), Options{})
	if err := s.SetUpstreams(many); err == nil {
		t.Error("SetUpstreams with 16: no error")
	}
	if got := forwarderOrder(s); !slices.Equal(got, []string{"192.0.2.1:53"}) {
		t.Errorf("after a refused change the forwarder asks %v", got)
	}
}

// TestForwardedMetric: appliance_dns_forwarded_total counts what reached
// the upstreams by outcome, from 0: answered while one replies, failed
// (SERVFAIL to the client) once none does.
func TestForwardedMetric(t *testing.T) {
	up := newOrderedUpstream(t, "192.0.2.1")
	cfg := testConfig()
	cfg.Network.UpstreamDNS = []netip.AddrPort{up.addr}
	s, addr := startServer(t, cfg, cluster.NewState(cfg), Options{CacheTTL: -1})
	count := func(r string) float64 { return testutil.ToFloat64(s.metrics.forwarded[r]) }
	// The forwarder writes the reply before the handler counts it: the
	// client may read its answer a moment before the counter moves.
	settled := func(answered, failed float64) (float64, float64) {
		deadline := time.Now().Add(2 * time.Second)
		for (count(forwardAnswered) != answered || count(forwardFailed) != failed) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		return count(forwardAnswered), count(forwardFailed)
	}
	for _, r := range []string{forwardAnswered, forwardFailed, forwardRejected} {
		if got := testutil.ToFloat64(s.metrics.forwardedVec.WithLabelValues(r)); got != 0 {
			t.Errorf("forwarded{result=%s} = %v before any query", r, got)
		}
	}
	for range 3 {
		if got := answeredBy(t, addr, "www.example.org"); got != "192.0.2.1" {
			t.Fatalf("answered %s", got)
		}
	}
	// A cluster name never reaches the upstreams.
	query(t, addr, "api.ocp4.example.com", dns.TypeA)
	if a, f := settled(3, 0); a != 3 || f != 0 {
		t.Errorf("upstream up: answered %v, failed %v; want 3, 0", a, f)
	}
	up.stop()
	for range 2 {
		if got := answeredBy(t, addr, "www.example.org"); got != "SERVFAIL" {
			t.Fatalf("the only upstream stopped: %s, want SERVFAIL", got)
		}
	}
	if a, f := settled(3, 2); a != 3 || f != 2 {
		t.Errorf("upstream down: answered %v, failed %v; want 3, 2", a, f)
	}
	// Back up, so the forwarder's health check ends before the test does.
	up.start()
	p := s.fwd.Load().List()[0]
	for start := time.Now(); p.Fails() != 0; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the upstream is back but its health check has not passed within 10 s")
		}
	}
}
