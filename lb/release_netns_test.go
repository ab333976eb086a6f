package lb

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// TestNetnsPreemptedHolderEndsItsSessions moves the API VIP away from a
// node whose LB lives on (preempted, as when its own apiserver fails
// /readyz and a peer takes over) while a client keeps a connection open
// through it, as a watch does. The new holder passes that connection's
// packets back for the handback window only; the old holder must end it
// cleanly (EOF) within that window, never leave it to the new holder's
// reset once the window is over.
//
// The soak found it: three watch-like streams through the API VIP were
// reset 12 s (DrainTimeout + 2 s) after their holder's apiserver went
// unready and the VIP moved away.
func TestNetnsPreemptedHolderEndsItsSessions(t *testing.T) {
	netlabtest.RequireRoot(t)
	lab := netlabtest.New(t, netlab.Options{Nodes: 4, Name: "lbpre"})
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
	const drain = 3 * time.Second
	start := func(n *netlab.Node) *cluster.State {
		listen, dial := inNode(n)
		o := DefaultOptions()
		o.MCS.Disabled = true
		o.NetNS = "/run/netns/" + n.NS
		o.Listen, o.Dial = listen, dial
		o.Health = HealthOptions{Interval: 100 * time.Millisecond, FastInterval: 30 * time.Millisecond, Timeout: 500 * time.Millisecond, Fall: 2, Rise: 1}
		o.DrainTimeout = drain
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
			case <-time.After(15 * time.Second):
				t.Error("LB did not stop")
			}
		})
		return st
	}
	set := func(st *cluster.State, state cluster.VIPState, master, pred netip.Addr) {
		st.SetVIP(cluster.VIPStatus{Name: "api-0", VIP: vip, Kind: cluster.VIPAPI, LocalState: state,
			Master: master, Predecessor: pred, Since: time.Now()})
	}
	addVIPs(t, n0, vips, true)
	st0, st1 := start(n0), start(n1)
	set(st0, cluster.VIPStateMaster, netip.Addr{}, netip.Addr{})
	set(st1, cluster.VIPStateBackup, n0.IPv4.Addr(), netip.Addr{})
	waitFor(t, 10*time.Second, func() bool {
		out, err := n1.Run(context.Background(), "nft", "list", "table", "ip", HandbackTable)
		return err == nil && strings.Contains(out, "dup to "+n0.IPv4.Addr().String())
	})
	waitRedirected(t, n0, vip)

	kc := dialKept(t, client, ca, vip)
	defer kc.close()
	if got := kc.peer(); !strings.Contains(got, n0.IPv4.Addr().String()) {
		t.Fatalf("first request through the VIP: %q, want the master by n0's LB", got)
	}

	// The preemption, in VRRP's order: n1 takes the VIP and tells the
	// client, n0 releases it and follows n1 as a backup, its LB still up.
	set(st1, cluster.VIPStateMaster, netip.Addr{}, n0.IPv4.Addr())
	addVIPs(t, n1, vips, true)
	time.Sleep(50 * time.Millisecond)
	if _, err := client.Run(context.Background(), "ip", "neigh", "replace", vip.String(), "lladdr", n1.MAC.String(),
		"dev", client.Iface, "nud", "reachable"); err != nil {
		t.Fatal(err)
	}
	addVIPs(t, n0, vips, false)
	set(st0, cluster.VIPStateBackup, n1.IPv4.Addr(), netip.Addr{})
	moved := time.Now()

	// A request every 100 ms on the kept connection until it ends, or
	// until well past the handback window (DrainTimeout + 2 s).
	answered := 0
	var end string
	var endErr error
	for time.Since(moved) < handbackWindow(drain)+4*time.Second {
		time.Sleep(100 * time.Millisecond)
		got := kc.peer()
		if strings.HasPrefix(got, "master ") {
			answered++
			continue
		}
		end = got
		// peer() flattens the error: ask the socket how it ended.
		_ = kc.c.SetReadDeadline(time.Now().Add(time.Second))
		_, endErr = kc.c.Read(make([]byte, 1))
		break
	}
	after := time.Since(moved)
	t.Logf("kept connection: %d requests answered after the move; ended %s after it: %q (then read: %v)", answered, after.Round(time.Millisecond), end, endErr)
	switch {
	case end == "":
		t.Fatalf("the kept connection was still served %s after the move: n0 kept a session only the handback reaches", after.Round(time.Millisecond))
	case strings.Contains(end, "reset") || errors.Is(endErr, syscall.ECONNRESET):
		t.Errorf("the kept connection was reset %s after the move (%q); want a clean end (EOF) from n0 before the handback window (%s) ends",
			after.Round(time.Millisecond), end, handbackWindow(drain))
	case !strings.Contains(end, "EOF") && !errors.Is(endErr, io.EOF):
		t.Errorf("the kept connection ended %s after the move with %q (then read: %v); want a clean end (EOF)", after.Round(time.Millisecond), end, endErr)
	}
	if answered < 5 {
		t.Errorf("only %d requests answered on the kept connection after the move; the handback should carry it until n0 ends it", answered)
	}
	if after < drain/2 {
		t.Errorf("the kept connection ended %s after the move; n0 should serve it for about DrainTimeout (%s) first", after.Round(time.Millisecond), drain)
	}
}
