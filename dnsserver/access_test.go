package dnsserver

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"appliance/internal/cluster"
)

func TestClientNets(t *testing.T) {
	pfx := netip.MustParsePrefix
	machine := []netip.Prefix{pfx("192.168.126.0/24"), pfx("fd00:126::/64")}
	// The pod networks as Parse gives them: OpenShift's defaults, or the
	// config's own.
	pods := []netip.Prefix{cluster.DefaultClusterNetworkV4, cluster.DefaultClusterNetworkV6}
	configs := map[string]*cluster.Config{
		"machine": {Network: cluster.Network{MachineCIDRs: machine}},
		"pods":    {Network: cluster.Network{MachineCIDRs: machine, ClusterNetworks: pods}},
		"pods132": {Network: cluster.Network{MachineCIDRs: machine, ClusterNetworks: []netip.Prefix{pfx("10.132.0.0/14")}}},
		"allow": {Network: cluster.Network{MachineCIDRs: machine, ClusterNetworks: pods},
			DNS: cluster.DNS{AllowFrom: []netip.Prefix{pfx("172.30.9.0/24"), pfx("2001:db8:9::/64")}}},
		"none": {},
	}
	all := map[string]bool{"machine": true, "pods": true, "pods132": true, "allow": true, "none": true}
	nodeNets := map[string]bool{"machine": true, "pods": true, "pods132": true, "allow": true}
	podNets := map[string]bool{"pods": true, "allow": true}
	for _, c := range []struct {
		client string
		want   map[string]bool // config → allowed
	}{
		{"127.0.0.1", all},
		{"127.8.9.10", all},
		{"::1", all},
		{"::ffff:127.0.0.1", all},
		{"192.168.126.11", nodeNets},
		{"192.168.126.5", nodeNets},
		// An IPv4 client on a dual-stack socket.
		{"::ffff:192.168.126.11", nodeNets},
		{"fd00:126::11", nodeNets},
		{"fd00:126:0:1::11", nil},
		{"192.168.127.11", nil},
		// Pods behind ovn-k8s-mp0: the default pod networks, both ends of
		// them, and mapped.
		{"10.128.0.5", podNets},
		{"10.128.0.0", podNets},
		{"10.131.255.255", podNets},
		{"::ffff:10.129.2.7", podNets},
		{"fd01::7", podNets},
		{"fd01:0:0:ffff::1", podNets},
		{"10.127.255.255", nil},
		{"fd01:0:1::7", nil},
		// A config's own pod network replaces the default.
		{"10.132.0.5", map[string]bool{"pods132": true}},
		{"::ffff:10.135.1.1", map[string]bool{"pods132": true}},
		// dns.allowFrom.
		{"172.30.9.7", map[string]bool{"allow": true}},
		{"::ffff:172.30.9.7", map[string]bool{"allow": true}},
		{"2001:db8:9::7", map[string]bool{"allow": true}},
		{"172.30.10.7", nil},
		// Strangers.
		{"10.200.0.5", nil},
		{"8.8.8.8", nil},
		{"2001:db8::1", nil},
		// Link-local is not the machine network, zone or not.
		{"fe80::1%eth0", nil},
		{"169.254.1.1", nil},
		{"0.0.0.0", nil},
		{"::", nil},
	} {
		for name, cfg := range configs {
			got := newClientNets(cfg).allows(netip.MustParseAddr(c.client))
			if got != c.want[name] {
				t.Errorf("client %s, config %s: allowed %v, want %v", c.client, name, got, c.want[name])
			}
		}
	}
	// A client whose address cannot be told is refused.
	if newClientNets(configs["allow"]).allows(netip.Addr{}) {
		t.Error("the zero address is allowed")
	}
	// A zoned link-local client is allowed once its network is.
	cfg := &cluster.Config{DNS: cluster.DNS{AllowFrom: []netip.Prefix{pfx("fe80::/10")}}}
	if !newClientNets(cfg).allows(netip.MustParseAddr("fe80::1%eth0")) {
		t.Errorf("%s refused with allowFrom fe80::/10", "fe80::1%eth0")
	}

	// Each network says where it comes from, in this order.
	want := clientNets{
		{pfx("127.0.0.0/8"), ClientSourceLoopback}, {pfx("::1/128"), ClientSourceLoopback},
		{pfx("192.168.126.0/24"), ClientSourceMachine}, {pfx("fd00:126::/64"), ClientSourceMachine},
		{pfx("10.128.0.0/14"), ClientSourceCluster}, {pfx("fd01::/48"), ClientSourceCluster},
		{pfx("172.30.9.0/24"), ClientSourceAllow}, {pfx("2001:db8:9::/64"), ClientSourceAllow},
	}
	if got := newClientNets(configs["allow"]); !slices.Equal(got, want) {
		t.Errorf("client networks\n%v\nwant\n%v", got, want)
	}
}

// TestClientNetJSON: /status lists each network with its source, and a
// bare prefix (an older appliance's /status) still reads.
func TestClientNetJSON(t *testing.T) {
	b, err := json.Marshal([]ClientNet{{netip.MustParsePrefix("10.128.0.0/14"), ClientSourceCluster}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"prefix":"10.128.0.0/14","source":"network.clusterNetwork"}]`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var got []ClientNet
	if err := json.Unmarshal([]byte(`["127.0.0.0/8",{"prefix":"10.128.0.0/14","source":"network.clusterNetwork"}]`), &got); err != nil {
		t.Fatal(err)
	}
	want := []ClientNet{{Prefix: netip.MustParsePrefix("127.0.0.0/8")}, {netip.MustParsePrefix("10.128.0.0/14"), ClientSourceCluster}}
	if !slices.Equal(got, want) {
		t.Errorf("read %v, want %v", got, want)
	}
	if err := json.Unmarshal([]byte(`["10.128.0.0"]`), &got); err == nil {
		t.Error("a prefix without length read without error")
	}
}

// fakeWriter is a ResponseWriter with a chosen client address that keeps
// what is written.
type fakeWriter struct {
	dns.ResponseWriter // nil: only the methods below are used
	remote             net.Addr
	written            []*dns.Msg
}

func (w *fakeWriter) RemoteAddr() net.Addr { return w.remote }
func (w *fakeWriter) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(192, 168, 126, 10), Port: 53}
}
func (w *fakeWriter) WriteMsg(m *dns.Msg) error {
	w.written = append(w.written, m)
	return nil
}

// nextRecorder is the plugin after access: it records what reached it.
type nextRecorder struct {
	w dns.ResponseWriter
	r *dns.Msg
}

func (n *nextRecorder) Name() string { return "next" }
func (n *nextRecorder) ServeDNS(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	n.w, n.r = w, r
	return dns.RcodeSuccess, nil
}

func TestRemoteAddr(t *testing.T) {
	for _, c := range []struct {
		addr net.Addr
		want netip.Addr
	}{
		{&net.UDPAddr{IP: net.IPv4(192, 168, 126, 11), Port: 40000}, netip.MustParseAddr("::ffff:192.168.126.11")},
		{&net.UDPAddr{IP: net.ParseIP("192.168.126.11").To4(), Port: 40000}, netip.MustParseAddr("192.168.126.11")},
		{&net.TCPAddr{IP: net.ParseIP("fd00:126::11"), Port: 40000}, netip.MustParseAddr("fd00:126::11")},
		{&net.IPAddr{IP: net.ParseIP("10.0.0.1")}, netip.Addr{}}, // "10.0.0.1" has no port
		{nil, netip.Addr{}},
	} {
		if got := remoteAddr(&fakeWriter{remote: c.addr}); got != c.want {
			t.Errorf("remoteAddr(%v) = %v, want %v", c.addr, got, c.want)
		}
	}
}

// TestAccessHandler: an allowed client's query reaches the next plugin as
// it came (same writer, same message: the answer is the one it would get
// without the plugin); another client gets REFUSED with the question, an
// Extended DNS Error when it speaks EDNS, and the counter goes up.
func TestAccessHandler(t *testing.T) {
	cfg := &cluster.Config{Network: cluster.Network{MachineCIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.126.0/24")}}}
	m := newMetrics()
	next := &nextRecorder{}
	h := &accessHandler{next: next, nets: newClientNets(cfg), m: m}

	q := new(dns.Msg)
	q.SetQuestion("api.ocp4.example.com.", dns.TypeA)
	w := &fakeWriter{remote: &net.UDPAddr{IP: net.IPv4(192, 168, 126, 11), Port: 40000}}
	if rc, err := h.ServeDNS(context.Background(), w, q); rc != dns.RcodeSuccess || err != nil {
		t.Fatalf("allowed: %d, %v", rc, err)
	}
	if next.w != dns.ResponseWriter(w) || next.r != q || len(w.written) != 0 {
		t.Fatalf("allowed query did not reach the next plugin untouched: %+v, written %v", next, w.written)
	}

	for _, edns := range []bool{false, true} {
		next.w, next.r = nil, nil
		q := new(dns.Msg)
		q.SetQuestion("www.example.org.", dns.TypeA)
		if edns {
			q.SetEdns0(4096, true)
		}
		w := &fakeWriter{remote: &net.TCPAddr{IP: net.ParseIP("10.99.0.2"), Port: 40000}}
		if rc, err := h.ServeDNS(context.Background(), w, q); rc != dns.RcodeSuccess || err != nil {
			t.Fatalf("refused: %d, %v (the plugin writes the reply itself)", rc, err)
		}
		if next.r != nil {
			t.Fatal("a refused query reached the next plugin")
		}
		if len(w.written) != 1 {
			t.Fatalf("%d replies written", len(w.written))
		}
		r := w.written[0]
		if r.Rcode != dns.RcodeRefused || r.Id != q.Id || !r.Response || len(r.Question) != 1 || r.Question[0] != q.Question[0] ||
			len(r.Answer)+len(r.Ns) != 0 || r.RecursionAvailable {
			t.Fatalf("reply:\n%v", r)
		}
		opt := r.IsEdns0()
		if (opt != nil) != edns {
			t.Fatalf("EDNS in reply %v, in query %v", opt != nil, edns)
		}
		if opt != nil {
			if len(opt.Option) != 1 || opt.Option[0].(*dns.EDNS0_EDE).InfoCode != dns.ExtendedErrorCodeProhibited {
				t.Fatalf("EDNS options %v, want EDE Prohibited", opt.Option)
			}
			if _, err := r.Pack(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := testutil.ToFloat64(m.refusedClients); got != 2 {
		t.Fatalf("appliance_dns_refused_queries_total = %v, want 2", got)
	}
}

func BenchmarkAccess(b *testing.B) {
	cfg := &cluster.Config{
		Network: cluster.Network{MachineCIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.126.0/24"), netip.MustParsePrefix("fd00:126::/64")},
			ClusterNetworks: []netip.Prefix{cluster.DefaultClusterNetworkV4}},
	}
	q := new(dns.Msg)
	q.SetQuestion("api.ocp4.example.com.", dns.TypeA)
	for _, c := range []struct {
		name string
		addr net.Addr
	}{
		{"allowed-loopback", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}},
		{"allowed-machine", &net.UDPAddr{IP: net.IPv4(192, 168, 126, 11), Port: 40000}},
		{"allowed-pod", &net.UDPAddr{IP: net.IPv4(10, 129, 0, 7), Port: 40000}},
		{"refused", &net.UDPAddr{IP: net.IPv4(10, 99, 0, 2), Port: 40000}},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := &accessHandler{next: &nextRecorder{}, nets: newClientNets(cfg), m: newMetrics()}
			w := &fakeWriter{remote: c.addr}
			b.ReportAllocs()
			for b.Loop() {
				w.written = w.written[:0]
				_, _ = h.ServeDNS(context.Background(), w, q)
			}
		})
	}
}

// digAt runs dig against addr (host:port) from the test's own namespace
// and returns its status and answer records as text.
func digAt(t *testing.T, addr string, args ...string) (string, []string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "dig", append([]string{"@" + host, "-p", port, "+tries=1", "+time=3"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("dig %v: %v\n%s", args, err, out)
	}
	rcode, answer, _ := parseDigOutput(t, string(out))
	var got []string
	for _, rr := range answer {
		got = append(got, rrText(rr))
	}
	return rcode, got
}

// TestLoopbackAllowed: with machine networks that do not hold loopback and
// no dns.allowFrom, dig on loopback still gets cluster names and forwarded
// ones, over UDP and TCP, and nothing is refused.
func TestLoopbackAllowed(t *testing.T) {
	if _, err := exec.LookPath("dig"); err != nil {
		t.Fatalf("dig not installed (make test installs it): %v", err)
	}
	up := startUpstream(t, "192.0.2.53")
	cfg := testConfig()
	cfg.Network.MachineCIDRs = []netip.Prefix{netip.MustParsePrefix("192.168.126.0/24"), netip.MustParsePrefix("fd00::/64")}
	cfg.Network.UpstreamDNS = []netip.AddrPort{up.addr}
	servers, addrs := map[string]*Server{}, map[string]string{}
	servers["127.0.0.1"], addrs["127.0.0.1"] = startServer(t, cfg, cluster.NewState(cfg), Options{})
	// IPv6 loopback too, where the machine has it.
	if port, err := freeV6LoopbackPort(); err == nil {
		servers["::1"], addrs["::1"] = startServer(t, cfg, cluster.NewState(cfg), Options{Listen: net.JoinHostPort("::1", port)})
	} else {
		t.Logf("no IPv6 loopback: %v", err)
	}
	for from, addr := range addrs {
		for _, proto := range []string{"+notcp", "+tcp"} {
			if rcode, got := digAt(t, addr, proto, "api.ocp4.example.com", "A"); rcode != "NOERROR" || !slices.Equal(got, []string{"A 192.168.126.5"}) {
				t.Errorf("%s %s api: %s %q", from, proto, rcode, got)
			}
			if rcode, got := digAt(t, addr, proto, "www.example.org", "A"); rcode != "NOERROR" || !slices.Equal(got, []string{"A 192.0.2.53"}) {
				t.Errorf("%s %s forwarded: %s %q", from, proto, rcode, got)
			}
		}
	}
	if up.queries.Load() == 0 {
		t.Error("nothing reached the upstream")
	}
	for from, s := range servers {
		if n := testutil.ToFloat64(s.metrics.refusedClients); n != 0 {
			t.Errorf("%s: %v queries refused", from, n)
		}
	}
}

// freeV6LoopbackPort is a port of ::1 free for UDP and TCP.
func freeV6LoopbackPort() (string, error) {
	for range 20 {
		ln, err := net.Listen("tcp", "[::1]:0")
		if err != nil {
			return "", err
		}
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		_ = ln.Close()
		if err == nil {
			_ = pc.Close()
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			return port, nil
		}
	}
	return "", errors.New("no port of ::1 free for both UDP and TCP")
}
