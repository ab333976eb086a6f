package nodeip_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"appliance/bootstrap"
	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
	"appliance/internal/nodeip"
)

// TestNetnsHintFile: a node with two NICs, the default routes on the one
// outside the machine network (ens4), as many bare-metal nodes have them.
// With the hint file bootstrap.Files writes, runtimecfg's choice on the
// node's live netlink state is the machine-network address, per family;
// without it, the default route's NIC: the address the appliance would
// drop the node for.
func TestNetnsHintFile(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 1, Name: "nodeip", IPv6: netip.MustParsePrefix("fd00:126::/64")})
	n := lab.Nodes[0]
	for _, args := range [][]string{
		// A veth pair inside the node (this kernel may lack dummy).
		{"link", "add", "ens4", "type", "veth", "peer", "name", "ens4peer"},
		{"link", "set", "ens4peer", "up"},
		{"addr", "add", "10.99.0.5/24", "dev", "ens4"},
		{"-6", "addr", "add", "2001:db8:99::5/64", "dev", "ens4", "nodad"},
		{"link", "set", "ens4", "up"},
		{"route", "add", "default", "via", "10.99.0.1", "dev", "ens4"},
		{"-6", "route", "add", "default", "via", "2001:db8:99::1", "dev", "ens4"},
	} {
		netlabtest.Run(t, n, "ip", args...)
	}
	v4, v6 := n.IPv4.Addr().String(), n.IPv6.Addr().String()

	type family struct {
		name, cidrs, vips string
		preferIPv6        bool
		withHint, without []string
	}
	families := []family{
		{"IPv4", "[192.168.126.0/24]", "[192.168.126.5]", false, []string{v4}, []string{"10.99.0.5"}},
		{"IPv6", `["fd00:126::/64"]`, `["fd00:126::5"]`, true, []string{v6}, []string{"2001:db8:99::5"}},
		{"dual-stack", `[192.168.126.0/24, "fd00:126::/64"]`, `[192.168.126.5, "fd00:126::5"]`, false,
			[]string{v4, v6}, []string{"10.99.0.5", "2001:db8:99::5"}},
		{"dual-stack, IPv6 primary", `["fd00:126::/64", 192.168.126.0/24]`, `["fd00:126::5", 192.168.126.5]`, true,
			[]string{v6, v4}, []string{"2001:db8:99::5", "10.99.0.5"}},
	}
	check := func(t *testing.T, f family) {
		t.Helper()
		cfg, err := cluster.Parse(fmt.Appendf(nil, `
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDRs: %s, apiVIPs: %s}
nodes: [{name: master-0, role: master, ips: [%s]}]
`, f.cidrs, f.vips, strings.Join(f.withHint, ", ")))
		if err != nil {
			t.Fatal(err)
		}
		hints := hintsFromFiles(t, cfg)
		st := read(t, n)
		dual := len(cfg.Network.MachineCIDRs) == 2
		got := nodeip.Choose(st, hints, f.preferIPv6)
		if k := strs(got.Kubelet(dual)); !slices.Equal(k, f.withHint) || got.Rule != nodeip.RuleHint {
			t.Errorf("with %s's hints %v: the kubelet gets %v by %s, want %v", bootstrap.NodeIPHintPath, hints, k, got.Rule, f.withHint)
		}
		for _, a := range got.Kubelet(dual) {
			if _, in := cfg.Network.PrefixFor(a); !in {
				t.Errorf("%s is outside the machine networks %v", a, cfg.Network.MachineCIDRs)
			}
		}
		bug := nodeip.Choose(st, nil, f.preferIPv6)
		if k := strs(bug.Kubelet(dual)); !slices.Equal(k, f.without) || bug.Rule != nodeip.RuleDefaultRoute {
			t.Errorf("without hints: the kubelet gets %v by %s, want the default route's NIC %v", k, bug.Rule, f.without)
		}
	}
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) { check(t, f) })
	}

	// NetworkManager gives a DHCPv6 address as a /128, and the network
	// comes from the router advertisement's route: the hint still finds it.
	netlabtest.Run(t, n, "ip", "-6", "addr", "del", n.IPv6.String(), "dev", n.Iface)
	netlabtest.Run(t, n, "ip", "-6", "addr", "add", v6+"/128", "dev", n.Iface, "nodad")
	netlabtest.Run(t, n, "ip", "-6", "route", "add", "fd00:126::/64", "dev", n.Iface, "proto", "ra")
	t.Run("IPv6 /128 with a router-advertised route", func(t *testing.T) { check(t, families[1]) })
	// Without that route, the /128 routes to nothing and the default route wins.
	netlabtest.Run(t, n, "ip", "-6", "route", "del", "fd00:126::/64", "dev", n.Iface, "proto", "ra")
	netlabtest.Run(t, n, "ip", "-6", "route", "add", "fd00:126::/64", "dev", n.Iface, "proto", "static")
	cfg, err := cluster.Parse([]byte("cluster: {name: ocp4, baseDomain: example.com}\nnetwork: {machineCIDRs: [\"fd00:126::/64\"], apiVIPs: [\"fd00:126::5\"]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := nodeip.Choose(read(t, n), hintsFromFiles(t, cfg), true); got.Rule != nodeip.RuleDefaultRoute || got.Picks[0].Addr.String() != "2001:db8:99::5" {
		t.Errorf("a /128 without a router-advertised route: %+v, want the default route's 2001:db8:99::5", got)
	}
}

// hintsFromFiles reads the hints back from the file bootstrap.Files gives
// a master, as nodeip-configuration's EnvironmentFile= does.
func hintsFromFiles(t *testing.T, cfg *cluster.Config) []netip.Addr {
	t.Helper()
	files, err := bootstrap.Files(cfg, cluster.RoleMaster, bootstrap.Options{
		Image: "registry.example.com/appliance@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		Drain: 10 * time.Second,
		Services: func(cluster.Role) bootstrap.RoleServices {
			return bootstrap.RoleServices{Runs: true, DNS: true}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Path == bootstrap.NodeIPHintPath {
			h, err := nodeip.ParseHintFile(f.Contents)
			if err != nil || h.Var != nodeip.HintVar || len(h.Addrs) == 0 {
				t.Fatalf("%s: %+v %v\n%s", f.Path, h, err, f.Contents)
			}
			return h.Addrs
		}
	}
	t.Fatalf("bootstrap.Files wrote no %s", bootstrap.NodeIPHintPath)
	return nil
}

func read(t *testing.T, n *netlab.Node) nodeip.State {
	t.Helper()
	h, err := n.Handle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	st, err := nodeip.Read(h)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func strs(as []netip.Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}
