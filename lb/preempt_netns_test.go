package lb

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// preemptLab is two LB nodes in front of one fake master, and a client
// with a kept connection (as a watch keeps one) through n0's LB: n0 holds
// the API VIP, n1 follows it, its handback table ready to pass n0's
// connections back once it takes over.
type preemptLab struct {
	n0, n1, client *netlab.Node
	vip            netip.Addr
	st0, st1       *cluster.State
	kc             *keptConn
}

// newPreemptLab builds a preemptLab; drain is the LBs' DrainTimeout (0:
// the default).
func newPreemptLab(t *testing.T, name string, drain time.Duration) *preemptLab {
	t.Helper()
	netlabtest.RequireRoot(t)
	lab := netlabtest.New(t, netlab.Options{Nodes: 4, Name: name})
	p := &preemptLab{n0: lab.Nodes[0], n1: lab.Nodes[1], client: lab.Nodes[3], vip: netip.MustParseAddr("192.168.126.250")}
	m := lab.Nodes[2]
	ca := newTestCA(t, m.IPv4.Addr(), p.vip)
	listenM, _ := inNode(m)
	master, err := startFake(t, ca, "master", ":6443", listenM)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &cluster.Config{
		Network: cluster.Network{APIVIPs: []netip.Addr{p.vip}},
		Nodes:   []cluster.Node{{Name: master.name, Role: cluster.RoleMaster, IPs: []netip.Addr{m.IPv4.Addr()}}},
	}
	addVIPs(t, p.n0, []netip.Addr{p.vip}, true)
	p.st0, _ = startNodeLB(t, p.n0, cfg, drain, false)
	p.st1, _ = startNodeLB(t, p.n1, cfg, drain, false)
	p.set(p.st0, cluster.VIPStateMaster, netip.Addr{}, netip.Addr{})
	p.set(p.st1, cluster.VIPStateBackup, p.n0.IPv4.Addr(), netip.Addr{})
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(p.handback(), "dup to "+p.n0.IPv4.Addr().String()) })
	waitRedirected(t, p.n0, p.vip)

	p.kc = dialKept(t, p.client, ca, p.vip)
	t.Cleanup(p.kc.close)
	if got := p.kc.peer(); !strings.Contains(got, p.n0.IPv4.Addr().String()) {
		t.Fatalf("first request through the VIP: %q, want the master by n0's LB", got)
	}
	return p
}

// set publishes a node's view of the API VIP, as its VRRP instance would.
func (p *preemptLab) set(st *cluster.State, state cluster.VIPState, master, pred netip.Addr) {
	st.SetVIP(cluster.VIPStatus{Name: "api-0", VIP: p.vip, Kind: cluster.VIPAPI, LocalState: state,
		Master: master, Predecessor: pred, Since: time.Now()})
}

// handback is n1's handback table, "" when it has none.
func (p *preemptLab) handback() string {
	out, _ := p.n1.Run(context.Background(), "nft", "list", "table", "ip", HandbackTable)
	return out
}

// preempt moves the VIP to n1 in VRRP's order: n1 takes it and tells the
// client, n0 releases it and follows n1 as a backup, its LB still up.
func (p *preemptLab) preempt(t *testing.T) {
	t.Helper()
	p.set(p.st1, cluster.VIPStateMaster, netip.Addr{}, p.n0.IPv4.Addr())
	addVIPs(t, p.n1, []netip.Addr{p.vip}, true)
	time.Sleep(50 * time.Millisecond)
	if _, err := p.client.Run(context.Background(), "ip", "neigh", "replace", p.vip.String(), "lladdr", p.n1.MAC.String(),
		"dev", p.client.Iface, "nud", "reachable"); err != nil {
		t.Fatal(err)
	}
	addVIPs(t, p.n0, []netip.Addr{p.vip}, false)
	p.set(p.st0, cluster.VIPStateBackup, p.n1.IPv4.Addr(), netip.Addr{})
}
