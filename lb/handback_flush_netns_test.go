package lb

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// TestNetnsHandbackAfterNftFlush: `nft flush ruleset` on a node that has
// just taken the API VIP from a live one (nftables.service starting, an
// operator's script) removes its handback table with its redirect. The
// redirect comes back at the flush's nftables event; the handback must
// too, or every packet of a connection the old holder still serves is
// reset until the next periodic check (5 s).
//
// The soak found it: four watch-like streams handed back to the bootstrap
// after the teardown were reset by an nft flush on the new holder.
func TestNetnsHandbackAfterNftFlush(t *testing.T) {
	netlabtest.RequireRoot(t)
	lab := netlabtest.New(t, netlab.Options{Nodes: 4, Name: "lbhbf"})
	n0, n1, m, client := lab.Nodes[0], lab.Nodes[1], lab.Nodes[2], lab.Nodes[3]
	vip := netip.MustParseAddr("192.168.126.250")
	vips := []netip.Addr{vip}
	ca := newTestCA(t, m.IPv4.Addr(), vip)
	listenM, _ := inNode(m)
	master, err := startFake(t, ca, "master", ":6443", listenM)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &cluster.Config{
		Network: cluster.Network{APIVIPs: vips},
		Nodes:   []cluster.Node{{Name: master.name, Role: cluster.RoleMaster, IPs: []netip.Addr{m.IPv4.Addr()}}},
	}
	start := func(n *netlab.Node) *cluster.State {
		listen, dial := inNode(n)
		o := DefaultOptions()
		o.MCS.Disabled = true
		o.NetNS = "/run/netns/" + n.NS
		o.Listen, o.Dial = listen, dial
		o.Health = HealthOptions{Interval: 100 * time.Millisecond, FastInterval: 30 * time.Millisecond, Timeout: 500 * time.Millisecond, Fall: 2, Rise: 1}
		st := cluster.NewState(cfg)
		l, err := New(cfg, st, o, NewMetrics(prometheus.NewRegistry()), testLogger(t).With("node", n.Name))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Error(err)
				}
			case <-time.After(20 * time.Second):
				t.Error("LB did not stop")
			}
		})
		return st
	}
	set := func(st *cluster.State, state cluster.VIPState, master, pred netip.Addr) {
		st.SetVIP(cluster.VIPStatus{Name: "api-0", VIP: vip, Kind: cluster.VIPAPI, LocalState: state,
			Master: master, Predecessor: pred, Since: time.Now()})
	}
	handback := func() string {
		out, _ := n1.Run(context.Background(), "nft", "list", "table", "ip", HandbackTable)
		return out
	}
	addVIPs(t, n0, vips, true)
	st0, st1 := start(n0), start(n1)
	set(st0, cluster.VIPStateMaster, netip.Addr{}, netip.Addr{})
	set(st1, cluster.VIPStateBackup, n0.IPv4.Addr(), netip.Addr{})
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(handback(), "dup to "+n0.IPv4.Addr().String()) })
	waitRedirected(t, n0, vip)

	kc := dialKept(t, client, ca, vip)
	defer kc.close()
	if got := kc.peer(); !strings.Contains(got, n0.IPv4.Addr().String()) {
		t.Fatalf("first request through the VIP: %q, want the master by n0's LB", got)
	}
	// n1 takes the VIP from n0, which lives on as a backup.
	set(st1, cluster.VIPStateMaster, netip.Addr{}, n0.IPv4.Addr())
	addVIPs(t, n1, vips, true)
	time.Sleep(50 * time.Millisecond)
	if _, err := client.Run(context.Background(), "ip", "neigh", "replace", vip.String(), "lladdr", n1.MAC.String(),
		"dev", client.Iface, "nud", "reachable"); err != nil {
		t.Fatal(err)
	}
	addVIPs(t, n0, vips, false)
	set(st0, cluster.VIPStateBackup, n1.IPv4.Addr(), netip.Addr{})
	for range 5 {
		if got := kc.peer(); !strings.HasPrefix(got, "master ") {
			t.Fatalf("kept connection after the move, before the flush: %q", got)
		}
	}

	if _, err := n1.Run(context.Background(), "nft", "flush", "ruleset"); err != nil {
		t.Fatal(err)
	}
	flushed := time.Now()
	answered := 0
	for time.Since(flushed) < 2*time.Second {
		time.Sleep(20 * time.Millisecond)
		got := kc.peer()
		if !strings.HasPrefix(got, "master ") {
			t.Fatalf("kept connection %s after nft flush ruleset on the new holder: %q (%d answered before); its handback table: %q",
				time.Since(flushed).Round(time.Millisecond), got, answered, handback())
		}
		answered++
	}
	t.Logf("kept connection: %d requests answered in the 2 s after the flush", answered)
}
