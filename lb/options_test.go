package lb

import (
	"strings"
	"testing"

	"appliance/internal/cluster"
)

// TestFromCluster: the config's lb section, parsed as a user writes it,
// reaches the options; what the caller's base turned off stays off, and
// the rest of base is kept.
func TestFromCluster(t *testing.T) {
	const head = "cluster: {name: ocp4, baseDomain: example.com}\n" +
		"network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}\n"
	custom := DefaultOptions()
	custom.API.Listen, custom.NetNS, custom.Balance = ":19445", "/run/netns/x", LeastConnections
	noMCS := DefaultOptions()
	noMCS.MCS.Disabled = true
	noRedirect := DefaultOptions()
	noRedirect.Redirect = false
	cases := []struct {
		name    string
		lb      string // the lb section; "" for none
		base    Options
		balance string
		mcs     bool // the MCS pool is balanced
		redir   bool
		listen  string // API.Listen
	}{
		{"defaults", "", DefaultOptions(), RoundRobin, true, true, ":9445"},
		{"leastconn", "lb: {balance: leastconn}", DefaultOptions(), LeastConnections, true, true, ":9445"},
		{"the file decides the balance", "lb: {balance: roundrobin}", custom, RoundRobin, true, true, ":19445"},
		{"no mcs", "lb: {mcs: false}", DefaultOptions(), RoundRobin, false, true, ":9445"},
		{"no redirect", "lb: {redirect: false}", DefaultOptions(), RoundRobin, true, false, ":9445"},
		{"base without mcs", "lb: {mcs: true}", noMCS, RoundRobin, false, true, ":9445"},
		{"base without redirect", "lb: {redirect: true}", noRedirect, RoundRobin, true, false, ":9445"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := cluster.Parse([]byte(head + c.lb))
			if err != nil {
				t.Fatal(err)
			}
			o, err := FromCluster(cfg, c.base)
			if err != nil {
				t.Fatal(err)
			}
			if o.Balance != c.balance || o.MCS.Disabled == c.mcs || o.Redirect != c.redir || o.API.Listen != c.listen {
				t.Errorf("balance %q mcs %v redirect %v api %q; want %q %v %v %q",
					o.Balance, !o.MCS.Disabled, o.Redirect, o.API.Listen, c.balance, c.mcs, c.redir, c.listen)
			}
			if o.NetNS != c.base.NetNS || o.DrainTimeout != c.base.DrainTimeout || o.MCS.Listen != c.base.MCS.Listen {
				t.Errorf("base fields changed: netns %q drain %v mcs %q", o.NetNS, o.DrainTimeout, o.MCS.Listen)
			}
		})
	}
}

// TestFromClusterHandBuilt: a config built without Parse can hold what Parse
// refuses; FromCluster names the field rather than let New fail later.
func TestFromClusterHandBuilt(t *testing.T) {
	if _, err := FromCluster(nil, DefaultOptions()); err == nil {
		t.Error("nil config: no error")
	}
	cfg := &cluster.Config{LB: cluster.LB{Balance: "random", MCS: true, Redirect: true}}
	_, err := FromCluster(cfg, DefaultOptions())
	if err == nil || !strings.Contains(err.Error(), "lb.balance") {
		t.Errorf("balance random: %v, want an error naming lb.balance", err)
	}
	// A config built by hand with no lb section balances nothing but the
	// API and installs no redirect, as before FromCluster.
	o, err := FromCluster(&cluster.Config{}, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if !o.MCS.Disabled || o.Redirect || o.Balance != "" {
		t.Errorf("zero lb section: mcs disabled %v redirect %v balance %q", o.MCS.Disabled, o.Redirect, o.Balance)
	}
}
