package dnsserver

import (
	"net/netip"
	"testing"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/host"
)

func TestJudgeClaim(t *testing.T) {
	ip := netip.MustParseAddr
	cfg := &cluster.Config{
		Cluster: cluster.Cluster{Name: "ocp4", BaseDomain: "example.com"},
		Network: cluster.Network{
			MachineCIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.126.0/24"), netip.MustParsePrefix("fd00::/64")},
			APIVIPs:      []netip.Addr{ip("192.168.126.5"), ip("fd00::5")},
			IngressVIPs:  []netip.Addr{ip("192.168.126.6")},
		},
		Nodes: []cluster.Node{
			{Name: "master-0", Role: cluster.RoleMaster, IPs: []netip.Addr{ip("192.168.126.10"), ip("fd00::10")}},
			{Name: "master-1", Role: cluster.RoleMaster}, // listed without addresses
		},
	}
	state := cluster.NewState(cfg)
	state.UpsertMember(cluster.Member{Name: "worker-0", Role: cluster.RoleWorker, Source: cluster.SourceKubernetes, IPs: []netip.Addr{ip("192.168.126.20")}})
	state.UpsertMember(cluster.Member{Name: "worker-9", Role: cluster.RoleWorker, Source: cluster.SourceMDNS, IPs: []netip.Addr{ip("192.168.126.29")}})
	snap := state.Snapshot()
	self := &host.View{Name: "worker-5", Prefixes: []netip.Prefix{netip.MustParsePrefix("192.168.126.25/24")}}

	for _, c := range []struct {
		name   string
		claim  string
		ips    []string
		want   claimOutcome
		reason string
	}{
		{"new node", "worker-1", []string{"192.168.126.21"}, claimNew, ""},
		{"new node, both families", "worker-1", []string{"192.168.126.21", "fd00::21"}, claimNew, ""},
		{"new node, no address in the packet", "worker-1", nil, claimNew, ""},
		{"configured node as configured", "master-0", []string{"192.168.126.10", "fd00::10"}, claimKnown, ""},
		{"configured node, one of its addresses", "master-0", []string{"192.168.126.10"}, claimKnown, ""},
		{"configured node, no address in the packet", "master-0", nil, claimKnown, ""},
		{"configured name, another address", "master-0", []string{"192.168.126.99"}, claimRefused, refuseName},
		{"configured name, its address and another", "master-0", []string{"192.168.126.10", "192.168.126.99"}, claimRefused, refuseName},
		{"configured name in other case", "MASTER-0", []string{"192.168.126.99"}, claimRefused, refuseName},
		{"configured address, another name", "intruder", []string{"192.168.126.10"}, claimRefused, refuseAddress},
		{"configured IPv6 address, another name", "intruder", []string{"fd00::10"}, claimRefused, refuseAddress},
		{"configured node without addresses takes them", "master-1", []string{"192.168.126.11"}, claimNew, ""},
		{"configured node without addresses, another's address", "master-1", []string{"192.168.126.10"}, claimRefused, refuseAddress},
		{"kubernetes node as known", "worker-0", []string{"192.168.126.20"}, claimKnown, ""},
		{"kubernetes name, another address", "worker-0", []string{"192.168.126.99"}, claimRefused, refuseName},
		{"kubernetes address, another name", "intruder", []string{"192.168.126.20"}, claimRefused, refuseAddress},
		{"mdns member re-announced elsewhere", "worker-9", []string{"192.168.126.30"}, claimNew, ""},
		{"this node's own records echoed", "worker-5", []string{"192.168.126.25"}, claimKnown, ""},
		{"this node's name, another address", "worker-5", []string{"192.168.126.99"}, claimRefused, refuseName},
		{"this node's address, another name", "intruder", []string{"192.168.126.25"}, claimRefused, refuseAddress},
		{"outside the machine networks", "worker-1", []string{"10.0.0.1"}, claimRefused, refuseOutside},
		{"link-local", "worker-1", []string{"fe80::1"}, claimRefused, refuseOutside},
		{"one address outside", "worker-1", []string{"192.168.126.21", "10.0.0.1"}, claimRefused, refuseOutside},
		{"API VIP", "worker-1", []string{"192.168.126.5"}, claimRefused, refuseVIP},
		{"API VIP among a configured node's addresses", "master-0", []string{"192.168.126.10", "192.168.126.5"}, claimRefused, refuseVIP},
		{"IPv6 API VIP", "worker-1", []string{"fd00::5"}, claimRefused, refuseVIP},
		{"ingress VIP", "worker-1", []string{"192.168.126.6"}, claimRefused, refuseVIP},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := cluster.Member{Name: c.claim, Source: cluster.SourceMDNS}
			for _, s := range c.ips {
				m.IPs = append(m.IPs, ip(s))
			}
			v := judgeClaim(m, snap, cfg, self)
			if v.Outcome != c.want || v.Reason != c.reason {
				t.Fatalf("judgeClaim(%s %v) = %+v, want outcome %d reason %q", c.claim, c.ips, v, c.want, c.reason)
			}
			if (v.Outcome == claimRefused) != (v.Detail != "") {
				t.Fatalf("detail %q for outcome %d", v.Detail, v.Outcome)
			}
		})
	}
	// Without a view yet (nil) and without a snapshot, the config alone
	// still decides.
	if v := judgeClaim(cluster.Member{Name: "master-0", IPs: []netip.Addr{ip("192.168.126.99")}}, nil, cfg, nil); v.Reason != refuseName {
		t.Fatalf("without snapshot and view: %+v", v)
	}
}

func TestRecordRefused(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	from := netip.MustParseAddr("192.168.126.99")
	c := RefusedClaim{From: from, Node: "master-0", Reason: refuseName}
	list, log := recordRefused(nil, c, t0)
	if !log || len(list) != 1 || list[0].Count != 1 {
		t.Fatalf("first: %v %+v", log, list)
	}
	// The same claim again: counted on the same entry, logged only once a
	// minute even when it keeps coming.
	for i := 1; i <= 5; i++ {
		list, log = recordRefused(list, c, t0.Add(time.Duration(i)*20*time.Second))
		if want := i == 3; log != want {
			t.Fatalf("repeat %d: log %v, want %v", i, log, want)
		}
	}
	if len(list) != 1 || list[0].Count != 6 || !list[0].First.Equal(t0) || !list[0].Last.Equal(t0.Add(100*time.Second)) {
		t.Fatalf("after repeats: %+v", list)
	}
	// Bounded: the oldest kinds go first, the newest is last.
	for i := range 2 * maxRefused {
		list, _ = recordRefused(list, RefusedClaim{From: from, Node: "n" + string(rune('a'+i)), Reason: refuseAddress}, t0.Add(time.Hour))
	}
	if len(list) != maxRefused || list[len(list)-1].Node != "n"+string(rune('a'+2*maxRefused-1)) {
		t.Fatalf("bounded list: %d entries, last %+v", len(list), list[len(list)-1])
	}
}
