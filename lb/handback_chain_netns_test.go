package lb

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// TestNetnsHandbackTwoMoves moves the API VIPs twice in quick succession
// while a client keeps connections open that earlier holders accepted:
// each must go on being answered by the LB that accepted it, and no
// packet may circle between the nodes.
//
// It is what TestLab once lost a call to, seen in a capture of the lab's
// bridge: master-2 held the VIP for a moment at start-up and accepted a
// worker's watch; the bootstrap preempted it; at the teardown master-0
// took over with the bootstrap as its predecessor. The watch's next packet
// reached master-0, which knew nothing of it and passed it to the
// bootstrap; the bootstrap, now a backup following master-0, knew nothing
// of it either and passed it straight back. nf_dup decrements the TTL but
// nobody checks it (it wraps from 0 to 255), so every such packet went
// round between the two for as long as both rules stood: ~200 000 frames a
// second on the bridge, which starved VRRP (the VIP moved again) and the
// client's calls (one timed out, one was reset).
//
// "chain" is that ordering (b, then a, then c); "split brain" is the one
// of the teardown itself: a's priority drops, b and c both take over, c
// wins the tie-break, and b's connections must reach b although c's only
// predecessor is a.
func TestNetnsHandbackTwoMoves(t *testing.T) {
	netlabtest.RequireRoot(t)
	t.Run("chain", func(t *testing.T) { runHandbackTwoMoves(t, "lbhc", false) })
	t.Run("split brain", func(t *testing.T) { runHandbackTwoMoves(t, "lbhs", true) })
}

func runHandbackTwoMoves(t *testing.T, name string, splitBrain bool) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 5, Name: name, IPv6: netip.MustParsePrefix("fd00:12a::/64")})
	a, b, c, m, client := lab.Nodes[0], lab.Nodes[1], lab.Nodes[2], lab.Nodes[3], lab.Nodes[4]
	lbs := []*netlab.Node{a, b, c}
	vips := []netip.Addr{netip.MustParseAddr("192.168.126.250"), netip.MustParseAddr("fd00:12a::250")}
	ca := newTestCA(t, m.IPv4.Addr(), vips[0], vips[1])
	listenM, _ := inNode(m)
	master, err := startFake(t, ca, "master", ":6443", listenM)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &cluster.Config{
		Network: cluster.Network{APIVIPs: vips},
		Nodes:   []cluster.Node{{Name: master.name, Role: cluster.RoleMaster, IPs: []netip.Addr{m.IPv4.Addr(), m.IPv6.Addr()}}},
	}
	// VRRP speaks from the IPv4 address and, for IPv6, from the link-local.
	speaker := map[*netlab.Node][]netip.Addr{}
	for _, n := range lbs {
		speaker[n] = []netip.Addr{n.IPv4.Addr(), linkLocal(t, n)}
	}
	states := map[*netlab.Node]*cluster.State{}
	for _, n := range lbs {
		states[n], _ = startNodeLB(t, n, cfg, 5*time.Second, true)
	}
	// holder is a router heard holding the VIPs at, alive or not.
	type holder struct {
		n     *netlab.Node
		at    time.Time
		alive bool
	}
	// set publishes n's view of both VIPs, as vrrp and app/node would.
	set := func(n *netlab.Node, state cluster.VIPState, followed, pred *netlab.Node, holders ...holder) {
		for i, v := range vips {
			st := cluster.VIPStatus{Name: fmt.Sprintf("api-%d", i), VIP: v, Kind: cluster.VIPAPI, LocalState: state, Since: time.Now()}
			if followed != nil {
				st.Master = speaker[followed][i]
			}
			if pred != nil {
				st.Predecessor = speaker[pred][i]
			}
			for _, h := range holders {
				st.Holders = append(st.Holders, cluster.VIPHolder{Addr: speaker[h.n][i], Last: h.at, Alive: h.alive})
			}
			states[n].SetVIP(st)
		}
	}
	// point tells the client who holds the VIPs, as a gratuitous ARP / an
	// unsolicited NA would.
	point := func(n *netlab.Node) {
		for _, v := range vips {
			if _, err := client.Run(context.Background(), "ip", "neigh", "replace", v.String(), "lladdr", n.MAC.String(),
				"dev", client.Iface, "nud", "reachable"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// dialAll opens one kept connection per family through n's LB.
	dialAll := func(n *netlab.Node) []*keptConn {
		var out []*keptConn
		waitRedirected(t, n, vips...)
		for i, v := range vips {
			kc := dialKept(t, client, ca, v)
			t.Cleanup(kc.close)
			want := peerOf(n, i)
			if got := kc.peer(); !strings.Contains(got, want) {
				t.Fatalf("first request through %s: %q, want %q (n=%s)", v, got, want, n.Name)
			}
			out = append(out, kc)
		}
		return out
	}
	holds := func(n *netlab.Node) bool {
		out, _ := n.Run(context.Background(), "ip", "-4", "addr", "show", "dev", n.Iface)
		return strings.Contains(out, vips[0].String()+"/")
	}
	release := func(n *netlab.Node) {
		if holds(n) {
			addVIPs(t, n, vips, false)
		}
	}
	take := func(n *netlab.Node) {
		addVIPs(t, n, vips, true)
		time.Sleep(50 * time.Millisecond) // the handback follows the state change: already there in a real takeover
	}
	kept := map[*netlab.Node][]*keptConn{}
	t0 := time.Now()
	if !splitBrain {
		// b holds the VIPs; a and c follow it.
		set(b, cluster.VIPStateMaster, nil, nil)
		set(a, cluster.VIPStateBackup, b, nil, holder{b, time.Now(), true})
		set(c, cluster.VIPStateBackup, b, nil, holder{b, time.Now(), true})
		take(b)
		point(b)
		kept[b] = dialAll(b)
		// a preempts b.
		tb := time.Now()
		set(a, cluster.VIPStateMaster, nil, b, holder{b, tb, true})
		take(a)
		point(a)
		release(b)
		set(b, cluster.VIPStateBackup, a, nil, holder{a, time.Now(), true})
		set(c, cluster.VIPStateBackup, a, nil, holder{b, tb, true}, holder{a, time.Now(), true})
		kept[a] = dialAll(a)
		// c takes over from a, alive.
		ta := time.Now()
		set(c, cluster.VIPStateMaster, nil, a, holder{b, tb, true}, holder{a, ta, true})
		take(c)
		point(c)
		release(a)
		set(a, cluster.VIPStateBackup, c, nil, holder{b, tb, true}, holder{c, time.Now(), true})
		set(b, cluster.VIPStateBackup, c, nil, holder{a, ta, true}, holder{c, time.Now(), true})
	} else {
		// a holds the VIPs; b and c follow it.
		set(a, cluster.VIPStateMaster, nil, nil)
		set(b, cluster.VIPStateBackup, a, nil, holder{a, time.Now(), true})
		set(c, cluster.VIPStateBackup, a, nil, holder{a, time.Now(), true})
		take(a)
		point(a)
		kept[a] = dialAll(a)
		// a's priority drops: b and c preempt it at once, each with a as
		// its predecessor; the client hears b last and connects through it.
		ta := time.Now()
		set(c, cluster.VIPStateMaster, nil, a, holder{a, ta, true})
		take(c)
		set(b, cluster.VIPStateMaster, nil, a, holder{a, ta, true})
		take(b)
		point(b)
		release(a)
		set(a, cluster.VIPStateBackup, c, nil, holder{b, time.Now(), true}, holder{c, time.Now(), true})
		kept[b] = dialAll(b)
		// b hears c, which wins the tie-break; c heard b claim the VIPs
		// after its own takeover.
		tb := time.Now()
		release(b)
		set(b, cluster.VIPStateBackup, c, nil, holder{a, ta, true}, holder{c, time.Now(), true})
		set(c, cluster.VIPStateMaster, nil, a, holder{a, ta, true}, holder{b, tb, true})
		point(c)
	}
	t.Logf("moves done %s after the first", time.Since(t0).Round(time.Millisecond))
	// Every kept connection keeps being answered by the LB that took it,
	// through c, within the handback's window.
	for round := range 5 {
		for n, kcs := range kept {
			for i, kc := range kcs {
				want := peerOf(n, i)
				if got := kc.peer(); !strings.Contains(got, want) {
					t.Errorf("round %d: kept connection accepted by %s through %s: %q, want an answer through %s's LB", round, n.Name, vips[i], got, n.Name)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	// New connections go to c.
	for i, v := range vips {
		kc := dialKept(t, client, ca, v)
		if got := kc.peer(); !strings.Contains(got, peerOf(c, i)) {
			t.Errorf("new connection through %s: %q, want c's LB", v, got)
		}
		kc.close()
	}
	// No packet went round: every handback rule on every node counted a
	// handful of packets, not the tens of thousands of a loop.
	total := 0
	for _, n := range lbs {
		for _, fam := range []string{"ip", "ip6"} {
			out, _ := n.Run(context.Background(), "nft", "list", "table", fam, HandbackTable)
			for _, m := range counterRE.FindAllStringSubmatch(out, -1) {
				v, _ := strconv.Atoi(m[1])
				total += v
			}
			t.Logf("%s %s:\n%s", n.Name, fam, out)
		}
	}
	if total > 500 {
		t.Errorf("the handback rules counted %d packets for a few requests: packets went round between the nodes", total)
	}
}

// peerOf is how the fake master names a connection from n's LB of the
// family of vips[i]: "master 192.168.126.12:" or "master [fd00::12]:".
func peerOf(n *netlab.Node, i int) string {
	return "master " + netip.AddrPortFrom(n.Addrs()[i], 0).String()[:len(netip.AddrPortFrom(n.Addrs()[i], 0).String())-1]
}

var counterRE = regexp.MustCompile(`counter packets (\d+) bytes \d+`)
