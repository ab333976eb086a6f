package dnsserver

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"appliance/internal/cluster"
	"appliance/internal/host"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// staticViews is a ViewSource that never changes: a claimant that says
// whatever the test wants it to say.
type staticViews struct{ v *host.View }

func (s staticViews) View() *host.View { return s.v }

func (s staticViews) Subscribe(ctx context.Context) <-chan *host.View {
	ch := make(chan *host.View, 1)
	ch <- s.v
	context.AfterFunc(ctx, func() { close(ch) })
	return ch
}

// startClaimant runs a bare MDNS in node n that announces name with addrs,
// whatever n's real addresses are.
func startClaimant(t *testing.T, n *netlab.Node, name string, addrs ...string) {
	t.Helper()
	var index int
	if err := n.Do(func() error {
		ifi, err := net.InterfaceByName(n.Iface)
		if err == nil {
			index = ifi.Index
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	v := &host.View{Name: name, Role: cluster.RoleMaster, Interface: n.Iface, Index: index, Up: true}
	for _, a := range addrs {
		v.Prefixes = append(v.Prefixes, netip.PrefixFrom(netip.MustParseAddr(a), 24))
	}
	cfg := mdnsConfig("ocp4", nil)
	d, err := NewMDNS(cfg, cluster.NewState(cfg), MDNSOptions{Host: staticViews{v}, TTL: 3 * time.Second, NetNS: nsPath(n)},
		testLogger(t).With("claimant", name))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("claimant %s: %v", name, err)
		}
	})
}

// dig asks node at's DNS server from inside node from and returns the
// short answer lines.
func dig(t *testing.T, from, at *netlab.Node, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := from.Run(ctx, "dig", append([]string{"@" + at.IPv4.Addr().String(), "+short", "+tries=2", "+time=2"}, args...)...)
	if err != nil {
		t.Fatalf("dig %v at %s: %v", args, at.Name, err)
	}
	return strings.Fields(out)
}

func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

func (m *mdnsNode) mdns() *MDNS { return m.srv.mdns }

// TestMDNSNodeWithVIP: a node holding the API VIP on its interface announces
// only its own address, so a peer answers its name with that address alone
// and gives the VIP no PTR to the node.
func TestMDNSNodeWithVIP(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "mdnsvip"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const vip = "192.168.126.5"
	// As VRRP would hold it: a secondary address of the node's subnet.
	if _, err := lab.Nodes[0].Run(ctx, "ip", "addr", "add", vip+"/24", "dev", lab.Nodes[0].Iface); err != nil {
		t.Fatal(err)
	}
	n0 := startMDNSNode(t, lab.Nodes[0], "ocp4", "master-0", 3*time.Second)
	n1 := startMDNSNode(t, lab.Nodes[1], "ocp4", "master-1", 3*time.Second)
	waitMembers(t, n1, []string{"master-0"}, 10*time.Second)

	own := lab.Nodes[0].IPv4.Addr()
	if st := n0.mdns().Status(); !slices.Equal(st.Addrs, []netip.Addr{own}) {
		t.Fatalf("master-0 publishes %v, want only %v", st.Addrs, own)
	}
	if m, _ := n1.state.Snapshot().Member("master-0"); !slices.Equal(m.IPs, []netip.Addr{own}) {
		t.Fatalf("master-1 learned master-0 as %+v, want only %v", m, own)
	}
	if got := dig(t, lab.Nodes[1], lab.Nodes[1], "master-0.ocp4.example.com", "A"); !slices.Equal(got, []string{own.String()}) {
		t.Fatalf("master-0.ocp4.example.com at master-1: %v, want %v", got, own)
	}
	if got := dig(t, lab.Nodes[1], lab.Nodes[1], "-x", vip); !slices.Equal(got, []string{"api.ocp4.example.com."}) {
		t.Fatalf("PTR of the VIP at master-1: %v, want only api.ocp4.example.com.", got)
	}
	// And over mDNS itself: master-0.local is the node address only.
	if got := mdnsQuery(t, lab.Nodes[1], "master-0.local.", dns.TypeA); !slices.Equal(got, []string{own.String()}) {
		t.Fatalf("mDNS master-0.local: %v, want %v", got, own)
	}
}

// TestMDNSRefusesClaims: hosts announcing a configured node's name with
// their own address, a configured node's address under another name, a VIP
// and an address outside the machine networks change no DNS answer and no
// member, and each refusal is counted and shown with the announcer's
// address.
func TestMDNSRefusesClaims(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "mdnsclaim"})
	a0, a1, a2 := lab.Nodes[0].IPv4.Addr(), lab.Nodes[1].IPv4.Addr(), lab.Nodes[2].IPv4.Addr()
	cfg := mdnsConfig("ocp4", []cluster.Node{
		{Name: "master-0", Role: cluster.RoleMaster, IPs: []netip.Addr{a0}},
		{Name: "master-1", Role: cluster.RoleMaster, IPs: []netip.Addr{a1}},
	})
	nodes := []*mdnsNode{
		startMDNS(t, lab.Nodes[0], cfg, MDNSOptions{TTL: 3 * time.Second}),
		startMDNS(t, lab.Nodes[1], cfg, MDNSOptions{TTL: 3 * time.Second}),
	}
	claimant := lab.Nodes[2]
	startClaimant(t, claimant, "master-0", a2.String())
	startClaimant(t, claimant, "intruder", a0.String())
	startClaimant(t, claimant, "vipper", "192.168.126.5")
	startClaimant(t, claimant, "outsider", "10.99.0.1")

	for _, n := range nodes {
		waitUntil(t, n.node.Name+" refuses every claim", 15*time.Second, func() bool {
			for _, r := range refuseReasons {
				if testutil.ToFloat64(n.mdns().m.refused(r)) < 1 {
					return false
				}
			}
			return true
		})
	}
	for _, n := range nodes {
		if got := memberNames(n.state); !slices.Equal(got, []string{"master-0", "master-1"}) {
			t.Fatalf("%s: members %v", n.node.Name, got)
		}
		if m, _ := n.state.Snapshot().Member("master-0"); !slices.Equal(m.IPs, []netip.Addr{a0}) || m.Source != cluster.SourceConfig {
			t.Fatalf("%s: master-0 is %+v", n.node.Name, m)
		}
		if got := dig(t, n.node, n.node, "master-0.ocp4.example.com", "A"); !slices.Equal(got, []string{a0.String()}) {
			t.Fatalf("%s: master-0.ocp4.example.com: %v, want %v", n.node.Name, got, a0)
		}
		// Not the cluster's: it goes to the (unreachable) upstream.
		if got := dig(t, n.node, n.node, "-x", a2.String()); slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "master-0") }) {
			t.Fatalf("%s: PTR of the claimant's address: %v", n.node.Name, got)
		}
		for _, name := range []string{"intruder", "vipper", "outsider"} {
			if got := dig(t, n.node, n.node, name+".ocp4.example.com", "A"); len(got) != 0 {
				t.Fatalf("%s: %s answered %v", n.node.Name, name, got)
			}
		}
		st := n.srv.Status()
		reasons := map[string]bool{}
		for _, r := range st.MDNS.RefusedClaims {
			// Heard over IPv4 from its address, over IPv6 from its
			// link-local one.
			if r.From != a2 && !r.From.IsLinkLocalUnicast() {
				t.Fatalf("%s: refused claim from %v, want %v: %+v", n.node.Name, r.From, a2, r)
			}
			reasons[r.Reason] = true
		}
		if len(reasons) != len(refuseReasons) {
			t.Fatalf("%s: /status shows refusals %v", n.node.Name, st.MDNS.RefusedClaims)
		}
		t.Logf("%s: %d kinds of refused claims", n.node.Name, len(st.MDNS.RefusedClaims))
	}
}
