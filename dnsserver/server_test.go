package dnsserver

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"appliance/internal/cluster"
	"appliance/internal/netlab/netlabtest"
)

func testConfig() *cluster.Config {
	return &cluster.Config{
		Cluster: cluster.Cluster{Name: "ocp4", BaseDomain: "example.com"},
		Network: cluster.Network{
			APIVIPs:     []netip.Addr{netip.MustParseAddr("192.168.126.5"), netip.MustParseAddr("fd00::5")},
			IngressVIPs: []netip.Addr{netip.MustParseAddr("192.168.126.6")},
		},
		Nodes: []cluster.Node{
			{Name: "master-0", Role: cluster.RoleMaster, IPs: []netip.Addr{netip.MustParseAddr("192.168.126.10"), netip.MustParseAddr("fd00::10")}},
			{Name: "worker-0", Role: cluster.RoleWorker, IPs: []netip.Addr{netip.MustParseAddr("192.168.126.20")}},
		},
	}
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// fakeUpstream is a resolver on loopback that answers every A question with
// its own address, so a test can tell which upstream answered.
type fakeUpstream struct {
	addr    netip.AddrPort
	answer  net.IP
	queries atomic.Int64
}

func startUpstream(t *testing.T, answer string) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{answer: net.ParseIP(answer)}
	u.addr = serveDNS(t, dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		u.queries.Add(1)
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		switch {
		case strings.HasPrefix(q.Name, "nx."):
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: u.answer}}
		}
		_ = w.WriteMsg(m)
	}))
	return u
}

// serveDNS serves h over UDP and TCP on one free loopback port until the
// test ends, as a real upstream does: CoreDNS's forward asks over TCP when
// the query came over TCP, and so do its cache's prefetches.
func serveDNS(t testing.TB, h dns.Handler) netip.AddrPort {
	t.Helper()
	var pc net.PacketConn
	var ln net.Listener
	for range 20 {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
	}
	if ln == nil {
		t.Fatal("no free port")
	}
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return netip.MustParseAddrPort(pc.LocalAddr().String())
}

// startServer runs a Server on a free loopback port until the test ends.
func startServer(t *testing.T, cfg *cluster.Config, state *cluster.State, opts Options) (*Server, string) {
	t.Helper()
	if opts.Listen == "" {
		opts.Listen = netlabtest.FreeLoopbackAddr(t)
	}
	s, err := New(cfg, state, opts, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// ended is closed once Run returned runErr: the check below and the
	// cleanup both read it.
	ended := make(chan struct{})
	var runErr error
	go func() { runErr = s.Run(ctx); close(ended) }()
	t.Cleanup(func() {
		cancel()
		<-ended
		if runErr != nil && !t.Failed() {
			t.Errorf("Run: %v", runErr)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if udp, _ := s.Addr(); udp != nil {
			return s, udp.String()
		}
		select {
		case <-ended:
			t.Fatalf("Run ended early: %v", runErr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("server did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func query(t *testing.T, addr, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Timeout: 3 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("query %s %s: %v", name, dns.TypeToString[qtype], err)
	}
	return r
}

func TestMembersAnsweredAtOnce(t *testing.T) {
	up := startUpstream(t, "192.0.2.53")
	cfg := testConfig()
	cfg.Network.UpstreamDNS = []netip.AddrPort{up.addr}
	state := cluster.NewState(cfg)
	_, addr := startServer(t, cfg, state, Options{})

	if r := query(t, addr, "master-1.ocp4.example.com", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Fatalf("before upsert: %v", r)
	}
	state.UpsertMember(cluster.Member{Name: "master-1", Role: cluster.RoleMaster, Source: cluster.SourceMDNS,
		IPs: []netip.Addr{netip.MustParseAddr("192.168.126.11")}})
	for _, name := range []string{"master-1.ocp4.example.com", "master-1"} {
		r := query(t, addr, name, dns.TypeA)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.168.126.11" {
			t.Fatalf("%s after upsert: %v", name, r)
		}
	}
	state.RemoveMember("master-1", cluster.SourceMDNS)
	if r := query(t, addr, "master-1.ocp4.example.com", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Fatalf("after remove: %v", r)
	}
	if up.queries.Load() != 0 {
		t.Fatalf("cluster names reached the upstream %d times", up.queries.Load())
	}
}

func TestForward(t *testing.T) {
	up := startUpstream(t, "192.0.2.53")
	cfg := testConfig()
	cfg.Network.UpstreamDNS = []netip.AddrPort{up.addr}
	_, addr := startServer(t, cfg, cluster.NewState(cfg), Options{})
	r := query(t, addr, "www.example.org", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.53" {
		t.Fatalf("forwarded answer: %v", r)
	}
	if r := query(t, addr, "nx.example.org", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Fatalf("forwarded NXDOMAIN: %v", r)
	}
	// A short name that is no member is not ours: it goes upstream.
	if r := query(t, addr, "localhost-ish", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("unknown single label: %v", r)
	}
	if got := up.queries.Load(); got != 3 {
		t.Fatalf("upstream saw %d queries, want 3", got)
	}
}

// TestUpstreamChangeLosesNoQuery streams queries over UDP and TCP while the
// upstreams switch back and forth; every query must be answered.
func TestUpstreamChangeLosesNoQuery(t *testing.T) {
	a := startUpstream(t, "192.0.2.1")
	b := startUpstream(t, "192.0.2.2")
	cfg := testConfig()
	cfg.Network.UpstreamDNS = []netip.AddrPort{a.addr}
	s, addr := startServer(t, cfg, cluster.NewState(cfg), Options{CacheTTL: -1})

	var sent, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &dns.Client{Timeout: 2 * time.Second}
			if w%2 == 1 {
				c.Net = "tcp"
			}
			names := []string{"api.ocp4.example.com.", "www.example.org."}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m := new(dns.Msg)
				m.SetQuestion(names[i%2], dns.TypeA)
				sent.Add(1)
				r, _, err := c.Exchange(m, addr)
				if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
					failed.Add(1)
					t.Logf("query %s over %s: %v %v", names[i%2], c.Net, err, r)
				}
			}
		}()
	}
	var switches time.Duration
	for i := range 6 {
		time.Sleep(100 * time.Millisecond)
		ups := []netip.AddrPort{b.addr}
		if i%2 == 1 {
			ups = []netip.AddrPort{a.addr}
		}
		start := time.Now()
		if err := s.SetUpstreams(ups); err != nil {
			t.Fatal(err)
		}
		switches += time.Since(start)
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d queries during 6 upstream switches (mean switch %v), %d failed", sent.Load(), switches/6, failed.Load())
	if failed.Load() != 0 || sent.Load() < 20 {
		t.Fatalf("%d of %d queries failed", failed.Load(), sent.Load())
	}
	if got := s.Upstreams(); !slices.Equal(got, []netip.AddrPort{a.addr}) {
		t.Fatalf("upstreams now %v", got)
	}
	if r := query(t, addr, "x.example.org", dns.TypeA); r.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
		t.Fatalf("answer after the last switch: %v", r)
	}
}

// TestResolvConfReread rewrites resolv.conf and waits for the new upstreams.
func TestResolvConfReread(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "resolv.conf")
	write := func(s string) {
		if err := os.WriteFile(path+".tmp", []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write("search example.com\nnameserver 127.0.0.53\nnameserver 192.0.2.10\nnameserver 198.51.100.7\n")
	cfg := testConfig()
	own := func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("198.51.100.7")}, nil }
	s, addr := startServer(t, cfg, cluster.NewState(cfg), Options{ResolvConf: path, ResolvPoll: 50 * time.Millisecond, LocalAddrs: own})
	if got, want := s.Upstreams(), []netip.AddrPort{netip.MustParseAddrPort("192.0.2.10:53")}; !slices.Equal(got, want) {
		t.Fatalf("upstreams %v, want %v", got, want)
	}
	write("nameserver 192.0.2.11\nnameserver 2001:db8::53\n")
	want := []netip.AddrPort{netip.MustParseAddrPort("192.0.2.11:53"), netip.MustParseAddrPort("[2001:db8::53]:53")}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Equal(s.Upstreams(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("upstreams %v, want %v", s.Upstreams(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Only our own address left: an error is logged and the old upstreams stay.
	write("nameserver 198.51.100.7\n")
	time.Sleep(300 * time.Millisecond)
	if !slices.Equal(s.Upstreams(), want) {
		t.Fatalf("upstreams changed to %v", s.Upstreams())
	}
	if r := query(t, addr, "api.ocp4.example.com", dns.TypeA); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("after reloads: %v", r)
	}
}

func TestNoUpstreamError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(path, []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	s, err := New(cfg, cluster.NewState(cfg), Options{Listen: "127.0.0.1:0", ResolvConf: path}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(context.Background())
	want := "dns: no upstream resolver left after removing this node's own addresses from " + path + " (nameserver 127.0.0.1); set network.upstreamDNS"
	if err == nil || err.Error() != want {
		t.Fatalf("Run: %v\nwant %s", err, want)
	}
}

// TestStopReleasesListeners runs two servers one after the other on the same
// address: the first must have closed its sockets when Run returned.
func TestStopReleasesListeners(t *testing.T) {
	up := startUpstream(t, "192.0.2.53")
	cfg := testConfig()
	cfg.Network.UpstreamDNS = []netip.AddrPort{up.addr}
	addr := netlabtest.FreeLoopbackAddr(t)
	for i := range 2 {
		s, err := New(cfg, cluster.NewState(cfg), Options{Listen: addr}, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		if r := query(t, addr, "api.ocp4.example.com", dns.TypeA); len(r.Answer) != 1 {
			t.Fatalf("server %d: %v", i, r)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
