package dnsserver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"appliance/internal/cluster"
)

// diffQueries is the differential test's query set: every spelling, EDNS
// variant and kind of name the fast path may meet, packed.
func diffQueries(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	add := func(label string, m *dns.Msg) {
		b, err := m.Pack()
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		out[label] = b
	}
	names := []string{
		"api.ocp4.example.com", "API.OCP4.EXAMPLE.COM", "Api-Int.Ocp4.Example.Com", "api-int.ocp4.example.com",
		"console-openshift-console.apps.ocp4.example.com", "OAuth-OpenShift.APPS.ocp4.example.com", "a.b.apps.ocp4.example.com",
		"apps.ocp4.example.com", "ocp4.example.com", "OCP4.example.COM",
		"master-0.ocp4.example.com", "Master-0.OCP4.example.com", "master-0", "MASTER-0", "worker-0", "big.ocp4.example.com", "big",
		"nope.ocp4.example.com", "NoPe.Ocp4.Example.Com", "x.master-0.ocp4.example.com", "a.b.c.ocp4.example.com", "_srv._tcp.ocp4.example.com",
		"10.126.168.192.in-addr.arpa", "10.126.168.192.IN-ADDR.ARPA", "5.126.168.192.in-addr.arpa", "6.126.168.192.in-addr.arpa",
		"0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa",
		"0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.D.F.IP6.ARPA",
		// Not ours: the chain forwards them.
		"www.example.org", "nx.example.org", "99.126.168.192.in-addr.arpa", "nobody",
	}
	types := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypePTR, dns.TypeSOA, dns.TypeNS, dns.TypeMX, dns.TypeTXT,
		dns.TypeHTTPS, dns.TypeANY, dns.TypeDS, 65280}
	id := uint16(1)
	for _, n := range names {
		for _, qt := range types {
			for _, v := range []struct {
				label string
				edit  func(m *dns.Msg)
			}{
				{"plain", func(*dns.Msg) {}},
				{"norecurse", func(m *dns.Msg) { m.RecursionDesired = false }},
				{"cd+ad", func(m *dns.Msg) { m.CheckingDisabled, m.AuthenticatedData = true, true }},
				{"edns1232", func(m *dns.Msg) { m.SetEdns0(1232, false) }},
				{"edns4096do", func(m *dns.Msg) { m.SetEdns0(4096, true) }},
				{"edns512", func(m *dns.Msg) { m.SetEdns0(512, false) }},
				{"edns100", func(m *dns.Msg) { m.SetEdns0(100, false) }},
				{"cookie", func(m *dns.Msg) {
					m.SetEdns0(1232, false)
					m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
				}},
				{"ednsv1", func(m *dns.Msg) { m.SetEdns0(1232, false); m.IsEdns0().SetVersion(1) }},
				{"ednsZ", func(m *dns.Msg) { m.SetEdns0(1232, false); m.IsEdns0().SetZ(0x10) }},
			} {
				m := new(dns.Msg)
				m.SetQuestion(dns.Fqdn(n), qt)
				m.Id = id
				id++
				v.edit(m)
				add(fmt.Sprintf("%s/%s/%s", n, dns.Type(qt), v.label), m)
			}
		}
	}
	for _, c := range []struct {
		label string
		class uint16
	}{{"chaos", dns.ClassCHAOS}, {"class-any", dns.ClassANY}} {
		m := new(dns.Msg)
		m.SetQuestion("api.ocp4.example.com.", dns.TypeA)
		m.Question[0].Qclass = c.class
		add(c.label, m)
	}
	m := new(dns.Msg)
	m.SetQuestion("api.ocp4.example.com.", dns.TypeA)
	m.Opcode = dns.OpcodeStatus
	add("opcode-status", m)
	m = new(dns.Msg)
	m.SetQuestion("api.ocp4.example.com.", dns.TypeA)
	m.Question = append(m.Question, m.Question[0])
	add("two-questions", m)

	// Raw packets the packer would not make.
	base := out["api.ocp4.example.com/A/plain"]
	out["trailing-byte"] = append(bytes.Clone(base), 0)
	out["cut-question"] = bytes.Clone(base[:len(base)-2])
	dotted := bytes.Clone(base)
	dotted[13+1] = '.' // "a.i" as one label
	out["dot-in-label"] = dotted
	star := bytes.Clone(out["console-openshift-console.apps.ocp4.example.com/A/plain"])
	star[13] = '*'
	out["star-label"] = star
	arOnly := bytes.Clone(base)
	binary.BigEndian.PutUint16(arOnly[10:], 1) // an OPT announced, none there
	out["missing-opt"] = arOnly
	long := new(dns.Msg)
	long.SetQuestion(strings.Repeat("abcdefghij.", 40)+"apps.ocp4.example.com.", dns.TypeA)
	if b, err := long.Pack(); err == nil {
		out["over-512"] = b
	}
	return out
}

// diffConfig is testConfig with a node whose addresses do not fit in 512
// bytes, to see truncation.
func diffConfig(up netip.AddrPort) *cluster.Config {
	cfg := testConfig()
	cfg.Network.UpstreamDNS = []netip.AddrPort{up}
	var ips []netip.Addr
	for i := range 40 {
		ips = append(ips, netip.AddrFrom16([16]byte{0xfd, 0, 15: byte(i + 1)}))
	}
	cfg.Nodes = append(cfg.Nodes, cluster.Node{Name: "big", Role: cluster.RoleWorker, IPs: ips})
	return cfg
}

// exchangeRaw sends q and returns the reply's bytes, nil when none came.
func exchangeRaw(t *testing.T, network, addr string, q []byte) []byte {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if network == "tcp" {
		q = append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)
	}
	if _, err := c.Write(q); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	if network == "tcp" {
		if _, err := fullRead(c, buf[:2]); err != nil {
			return nil
		}
		n := int(binary.BigEndian.Uint16(buf))
		if _, err := fullRead(c, buf[:n]); err != nil {
			return nil
		}
		return bytes.Clone(buf[:n])
	}
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return bytes.Clone(buf[:n])
}

func fullRead(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestFastPathSameAnswers sends every query of diffQueries to a server with
// the fast path and to one without (the plain plugin chain) and compares the
// replies byte for byte, then the metrics both counted.
func TestFastPathSameAnswers(t *testing.T) {
	up := startUpstream(t, "192.0.2.53")
	cfg := diffConfig(up.addr)
	fastSrv, fastAddr := startServer(t, cfg, cluster.NewState(cfg), Options{CacheTTL: -1})
	slowSrv, slowAddr := startServer(t, cfg, cluster.NewState(cfg), Options{CacheTTL: -1, NoFastPath: true})

	qs := diffQueries(t)
	fastAnswered := 0
	for label, q := range qs {
		for _, network := range []string{"udp", "tcp"} {
			before := counterValue(t, fastSrv.metrics.fastAnswers)
			fast := exchangeRaw(t, network, fastAddr, q)
			slow := exchangeRaw(t, network, slowAddr, q)
			if !bytes.Equal(fast, slow) {
				var fm, sm dns.Msg
				_ = fm.Unpack(fast)
				_ = sm.Unpack(slow)
				t.Errorf("%s over %s: replies differ\nfast path (%d bytes): %x\n%v\nchain (%d bytes): %x\n%v", label, network, len(fast), fast, &fm, len(slow), slow, &sm)
			}
			if counterValue(t, fastSrv.metrics.fastAnswers) > before {
				fastAnswered++
				if network == "tcp" {
					t.Errorf("%s: the fast path answered over TCP", label)
				}
			}
		}
	}
	if fastAnswered < len(qs)/4 {
		t.Errorf("the fast path answered only %d of %d queries", fastAnswered, len(qs))
	}
	t.Logf("%d queries over UDP and TCP, %d answered by the fast path", len(qs), fastAnswered)

	// The fast path counts what the chain counts.
	sameMetrics(t, fastSrv, slowSrv)
}

// sameMetrics checks that the fast path's server counted what the chain's
// did. The histogram is observed after the write, so it allows a moment.
func sameMetrics(t *testing.T, fastSrv, slowSrv *Server) {
	t.Helper()
	for _, name := range []string{"appliance_dns_requests_total", "appliance_dns_responses_total", "appliance_dns_cluster_queries_total", "appliance_dns_request_duration_seconds"} {
		deadline := time.Now().Add(2 * time.Second)
		for {
			f, s := gatherText(t, fastSrv, name), gatherText(t, slowSrv, name)
			if f == s {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s differs\nfast path:\n%s\nchain:\n%s", name, f, s)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestFastPathFollowsState: a member added to or removed from State is
// answered by the very next query, as the chain answers it.
func TestFastPathFollowsState(t *testing.T) {
	up := startUpstream(t, "192.0.2.53")
	cfg := testConfig()
	cfg.Network.UpstreamDNS = []netip.AddrPort{up.addr}
	state := cluster.NewState(cfg)
	srv, addr := startServer(t, cfg, state, Options{})
	for range 3 {
		if r := query(t, addr, "master-1.ocp4.example.com", dns.TypeA); r.Rcode != dns.RcodeNameError {
			t.Fatalf("before upsert: %v", r)
		}
		state.UpsertMember(cluster.Member{Name: "master-1", Role: cluster.RoleMaster, Source: cluster.SourceMDNS,
			IPs: []netip.Addr{netip.MustParseAddr("192.168.126.11")}})
		if r := query(t, addr, "Master-1.ocp4.example.com", dns.TypeA); len(r.Answer) != 1 || r.Answer[0].Header().Name != "Master-1.ocp4.example.com." {
			t.Fatalf("after upsert: %v", r)
		}
		state.RemoveMember("master-1", cluster.SourceMDNS)
	}
	if counterValue(t, srv.metrics.fastAnswers) != 6 {
		t.Errorf("fast path answered %v of 6", counterValue(t, srv.metrics.fastAnswers))
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// gatherText is the metric family name of s as text, label by label; the
// histogram by its count only (the times differ).
func gatherText(t *testing.T, s *Server, name string) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collectors()...)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				fmt.Fprintf(&b, "%s=%s ", l.GetName(), l.GetValue())
			}
			if h := m.GetHistogram(); h != nil {
				fmt.Fprintf(&b, "count %d\n", h.GetSampleCount())
			} else {
				fmt.Fprintf(&b, "%v\n", m.GetCounter().GetValue())
			}
		}
	}
	return b.String()
}

// TestFastPathWildcard: bound to every address, replies leave from the
// address each query came to (a connected client socket takes no other),
// over IPv4 and IPv6 loopback, from the fast path and from the chain.
func TestFastPathWildcard(t *testing.T) {
	up := startUpstream(t, "192.0.2.53")
	cfg := testConfig()
	cfg.Network.UpstreamDNS = []netip.AddrPort{up.addr}
	srv, addr := startServer(t, cfg, cluster.NewState(cfg), Options{Listen: ":0", CacheTTL: -1})
	_, port, _ := net.SplitHostPort(addr)
	if !srv.fast.pktinfo {
		t.Fatal("a wildcard bind without pktinfo")
	}
	for _, host := range []string{"127.0.0.1", "127.0.0.2", "::1"} {
		for _, name := range []string{"api.ocp4.example.com", "www.example.org"} {
			m := new(dns.Msg)
			m.SetQuestion(name+".", dns.TypeA)
			q, _ := m.Pack()
			r := exchangeRaw(t, "udp", net.JoinHostPort(host, port), q)
			var rm dns.Msg
			if err := rm.Unpack(r); err != nil || len(rm.Answer) != 1 {
				t.Errorf("%s via %s: %v %v", name, host, err, &rm)
			}
		}
	}
	if v := counterValue(t, srv.metrics.fastAnswers); v != 3 {
		t.Errorf("fast path answered %v of 3", v)
	}
}

// TestFastPathLosesNothingOnChange: while members come and go as fast as
// State takes them, every query is answered, and answered right.
func TestFastPathLosesNothingOnChange(t *testing.T) {
	up := startUpstream(t, "192.0.2.53")
	cfg := testConfig()
	cfg.Network.UpstreamDNS = []netip.AddrPort{up.addr}
	state := cluster.NewState(cfg)
	_, addr := startServer(t, cfg, state, Options{})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			state.UpsertMember(cluster.Member{Name: fmt.Sprintf("churn-%d", i%10), Role: cluster.RoleWorker, Source: cluster.SourceMDNS,
				IPs: []netip.Addr{netip.AddrFrom4([4]byte{192, 168, 126, byte(100 + i%10)})}})
			state.RemoveMember(fmt.Sprintf("churn-%d", (i+5)%10), cluster.SourceMDNS)
		}
	}()
	defer func() { close(stop); <-done }()
	c := &dns.Client{Timeout: 2 * time.Second}
	for i := range 600 {
		m := new(dns.Msg)
		m.SetQuestion([]string{"api.ocp4.example.com.", "x.apps.ocp4.example.com.", "master-0.ocp4.example.com."}[i%3], dns.TypeA)
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			t.Fatalf("query %d: %v", i, err)
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("query %d: %v", i, r)
		}
	}
}
