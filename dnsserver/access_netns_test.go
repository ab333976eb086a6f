package dnsserver

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// digFrom asks at (an address and port) from inside lab node n and returns
// dig's status and answer records as text, and its whole output.
func digFrom(t *testing.T, n *netlab.Node, at netip.AddrPort, args ...string) (string, []string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := n.Run(ctx, "dig", append([]string{"@" + at.Addr().String(), "-p", strconv.Itoa(int(at.Port())), "+tries=1", "+time=3"}, args...)...)
	if err != nil {
		t.Fatalf("dig %v from %s: %v\n%s", args, n.Name, err, out)
	}
	rcode, answer, _ := parseDigOutput(t, out)
	var got []string
	for _, rr := range answer {
		got = append(got, rrText(rr))
	}
	return rcode, got, out
}

// startLabDNS runs a DNS server listening on lab node n's address and port
// until the test ends. Its upstream connections leave from the test's own
// namespace (only the listeners are opened in n).
func startLabDNS(t *testing.T, n *netlab.Node, cfg *cluster.Config, port uint16) *Server {
	t.Helper()
	srv, err := New(cfg, cluster.NewState(cfg), Options{Listen: netip.AddrPortFrom(n.IPv4.Addr(), port).String()}, testLogger(t).With("node", n.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Do(srv.Start); err != nil {
		t.Fatalf("%s: start: %v", n.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: Run: %v", n.Name, err)
		}
	})
	return srv
}

// TestAccessNetns: the DNS node n0 serves its address on the machine
// network. A client on the machine network (n1) gets the cluster's names
// and forwarded ones; a client outside it (n2, moved to 10.99.0.0/24 on the
// same bridge, routed) is REFUSED for both, over UDP and TCP, and nothing
// of its questions reaches the upstream. A second server whose
// dns.allowFrom holds 10.99.0.0/24 answers the outsider.
func TestAccessNetns(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "dnsaccess"})
	dnsNode, inside, outside := lab.Nodes[0], lab.Nodes[1], lab.Nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := func(n *netlab.Node, args ...string) {
		t.Helper()
		if out, err := n.Run(ctx, "ip", args...); err != nil {
			t.Fatalf("%s: ip %v: %v\n%s", n.Name, args, err, out)
		}
	}
	// The outsider: its own subnet on the machine network's segment, one
	// hop away as a routed client would be.
	const outsiderNet, outsiderAddr = "10.99.0.0/24", "10.99.0.2"
	run(outside, "addr", "flush", "dev", outside.Iface)
	run(outside, "addr", "add", outsiderAddr+"/24", "dev", outside.Iface)
	run(outside, "route", "add", netlab.DefaultIPv4.String(), "dev", outside.Iface)
	run(dnsNode, "route", "add", outsiderNet, "dev", dnsNode.Iface)

	up := startUpstream(t, "192.0.2.53") // on the test's loopback: where the forwarder dials from
	cfg := mdnsConfig("ocp4", []cluster.Node{{Name: "master-0", Role: cluster.RoleMaster, IPs: []netip.Addr{dnsNode.IPv4.Addr()}}})
	cfg.Network.UpstreamDNS = []netip.AddrPort{up.addr}
	srv := startLabDNS(t, dnsNode, cfg, 53)
	at := netip.AddrPortFrom(dnsNode.IPv4.Addr(), 53)

	for _, proto := range []string{"+notcp", "+tcp"} {
		if rcode, got, out := digFrom(t, inside, at, proto, "api.ocp4.example.com", "A"); rcode != "NOERROR" || !slices.Equal(got, []string{"A 192.168.126.5"}) {
			t.Errorf("inside %s api: %s %q\n%s", proto, rcode, got, out)
		}
		if rcode, got, out := digFrom(t, inside, at, proto, "inside"+proto[1:]+".example.org", "A"); rcode != "NOERROR" || !slices.Equal(got, []string{"A 192.0.2.53"}) {
			t.Errorf("inside %s forwarded: %s %q\n%s", proto, rcode, got, out)
		}
	}
	forwarded := up.queries.Load()
	if forwarded == 0 {
		t.Fatal("the inside client's forwarded names never reached the upstream")
	}

	asked := 0
	for _, proto := range []string{"+notcp", "+tcp"} {
		for _, q := range [][]string{
			{"api.ocp4.example.com", "A"},
			{"master-0.ocp4.example.com", "A"},
			{"10.126.168.192.in-addr.arpa", "PTR"},
			{"console.apps.ocp4.example.com", "A"},
			{"outside" + proto[1:] + ".example.org", "A"},
		} {
			rcode, got, out := digFrom(t, outside, at, append([]string{proto}, q...)...)
			asked++
			if rcode != "REFUSED" || len(got) != 0 {
				t.Errorf("outside %s %v: %s %q, want REFUSED\n%s", proto, q, rcode, got, out)
			}
			if !strings.Contains(out, "EDE: 18 (Prohibited)") {
				t.Errorf("outside %s %v: no Extended DNS Error 18 (Prohibited)\n%s", proto, q, out)
			}
		}
	}
	// The upstream answers at once, so anything forwarded would be counted
	// by now; wait a moment anyway for a straggler.
	time.Sleep(200 * time.Millisecond)
	if n := up.queries.Load(); n != forwarded {
		t.Errorf("the upstream got %d queries while the outsider asked", n-forwarded)
	}
	if n := testutil.ToFloat64(srv.metrics.refusedClients); n != float64(asked) {
		t.Errorf("appliance_dns_refused_queries_total = %v, want %d", n, asked)
	}

	// dns.allowFrom lets the outsider's network in.
	cfg2 := mdnsConfig("ocp4", nil)
	cfg2.Network.UpstreamDNS = []netip.AddrPort{up.addr}
	cfg2.DNS.AllowFrom = []netip.Prefix{netip.MustParsePrefix(outsiderNet)}
	srv2 := startLabDNS(t, dnsNode, cfg2, 54)
	at2 := netip.AddrPortFrom(dnsNode.IPv4.Addr(), 54)
	if rcode, got, out := digFrom(t, outside, at2, "api.ocp4.example.com", "A"); rcode != "NOERROR" || !slices.Equal(got, []string{"A 192.168.126.5"}) {
		t.Errorf("allowFrom %s: api: %s %q\n%s", outsiderNet, rcode, got, out)
	}
	if rcode, got, out := digFrom(t, outside, at2, "allowed.example.org", "A"); rcode != "NOERROR" || !slices.Equal(got, []string{"A 192.0.2.53"}) {
		t.Errorf("allowFrom %s: forwarded: %s %q\n%s", outsiderNet, rcode, got, out)
	}
	if n := testutil.ToFloat64(srv2.metrics.refusedClients); n != 0 {
		t.Errorf("allowFrom %s: %v queries refused", outsiderNet, n)
	}
}
