package dnsserver

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// TestMDNSFollowsAddressToBridge moves the node's address at runtime onto a
// new bridge whose port is the old interface (as OVN-Kubernetes does with
// br-ex): mDNS re-binds there within a loose bound, and a peer started
// afterwards learns the node (its query is heard on the bridge) and is
// learned by it. Moved back, with the bridge deleted, mDNS follows again.
func TestMDNSFollowsAddressToBridge(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "mdnsbr"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Long: announcements every 20 s, so only the re-bind's own traffic
	// is in time for the bounds below.
	const ttl = 60 * time.Second
	n0 := startMDNSNode(t, lab.Nodes[0], "ocp4", "master-0", ttl)
	n1 := startMDNSNode(t, lab.Nodes[1], "ocp4", "master-1", ttl)
	waitMembers(t, n1, []string{"master-0"}, 10*time.Second)
	waitMembers(t, n0, []string{"master-1"}, 10*time.Second)

	node := lab.Nodes[0]
	addr := node.IPv4.String()
	for _, args := range [][]string{
		{"link", "add", "br-ex", "type", "bridge", "mcast_snooping", "0"},
		{"link", "set", "br-ex", "address", node.MAC.String()},
		{"link", "set", node.Iface, "master", "br-ex"},
		{"link", "set", "br-ex", "up"},
	} {
		if _, err := node.Run(ctx, "ip", args...); err != nil {
			t.Fatal(err)
		}
	}
	moved := time.Now()
	for _, args := range [][]string{
		{"addr", "del", addr, "dev", node.Iface},
		{"addr", "add", addr, "dev", "br-ex"},
	} {
		if _, err := node.Run(ctx, "ip", args...); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "mDNS re-bound on br-ex", 3*time.Second, func() bool {
		st := n0.mdns().Status()
		return st.Interface == "br-ex" && slices.Contains(st.Sockets, "ipv4")
	})
	t.Logf("mDNS on br-ex %v after the address began to move", time.Since(moved).Round(time.Millisecond))
	if got := testutil.ToFloat64(n0.mdns().m.mdnsRebinds); got < 1 {
		t.Fatalf("rebinds counted: %v", got)
	}

	// A peer that starts now only learns master-0 if master-0 hears its
	// query on br-ex (the announcements after the move went out before).
	n2 := startMDNSNode(t, lab.Nodes[2], "ocp4", "master-2", ttl)
	waitMembers(t, n2, []string{"master-0", "master-1"}, 5*time.Second)
	if m, _ := n2.state.Snapshot().Member("master-0"); !slices.Equal(m.IPs, []netip.Addr{node.IPv4.Addr()}) {
		t.Fatalf("master-2 learned master-0 as %+v", m)
	}
	waitMembers(t, n0, []string{"master-1", "master-2"}, 5*time.Second)
	t.Logf("peer started after the move learned and was learned within %v", time.Since(moved).Round(time.Millisecond))

	// And back: the address returns to eth0 and the bridge goes away.
	for _, args := range [][]string{
		{"addr", "del", addr, "dev", "br-ex"},
		{"link", "set", node.Iface, "nomaster"},
		{"addr", "add", addr, "dev", node.Iface},
		{"link", "del", "br-ex"},
	} {
		if _, err := node.Run(ctx, "ip", args...); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "mDNS re-bound on eth0", 3*time.Second, func() bool {
		st := n0.mdns().Status()
		return st.Interface == node.Iface && slices.Contains(st.Sockets, "ipv4")
	})
	// master-0 hears a query on eth0 again and answers it.
	if got := mdnsQuery(t, lab.Nodes[1], "master-0.local.", dns.TypeA); !slices.Equal(got, []string{node.IPv4.Addr().String()}) {
		t.Fatalf("mDNS master-0.local after moving back: %v", got)
	}
	if got := testutil.ToFloat64(n0.mdns().m.mdnsRebinds); got < 2 {
		t.Fatalf("rebinds counted: %v, want at least 2", got)
	}
}

// TestMDNSReaderReopens closes a reader's socket from under it: the reader
// counts the failure, opens a new socket and mDNS keeps working.
func TestMDNSReaderReopens(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "mdnsfault"})
	const ttl = 60 * time.Second
	n0 := startMDNSNode(t, lab.Nodes[0], "ocp4", "master-0", ttl)
	n1 := startMDNSNode(t, lab.Nodes[1], "ocp4", "master-1", ttl)
	waitMembers(t, n0, []string{"master-1"}, 10*time.Second)
	waitMembers(t, n1, []string{"master-0"}, 10*time.Second)

	d := n0.mdns()
	var old mconn
	waitUntil(t, "an IPv4 socket", 3*time.Second, func() bool { old = d.conn(fam4); return old != nil })
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	failures := d.m.mdnsSocketErrors.WithLabelValues("ipv4", "read")
	took := waitUntil(t, "the IPv4 socket re-opened", 5*time.Second, func() bool {
		c := d.conn(fam4)
		return testutil.ToFloat64(failures) == 1 && c != nil && c != old
	})
	t.Logf("socket re-opened after %v", took.Round(time.Millisecond))

	// Still hears and answers: a peer started now learns master-0 through
	// its query, and master-0 learns it.
	n2 := startMDNSNode(t, lab.Nodes[2], "ocp4", "master-2", ttl)
	waitMembers(t, n2, []string{"master-0", "master-1"}, 5*time.Second)
	waitMembers(t, n0, []string{"master-1", "master-2"}, 5*time.Second)
	if got := testutil.ToFloat64(failures); got != 1 {
		t.Fatalf("read failures counted: %v, want 1", got)
	}
}
