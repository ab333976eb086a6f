package preflight

import (
	"errors"
	"net/netip"
	"testing"

	"appliance/internal/cluster"
	"appliance/internal/nodeip"
)

func TestDecideNodeIP(t *testing.T) {
	cfg := testConfig(t, "")
	dual, err := cluster.Parse([]byte(`
cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDRs: [192.168.126.0/24, "fd00:126::/64"]
  apiVIPs: [192.168.126.5, "fd00:126::5"]
nodes:
  - {name: master-0, role: master, ips: [192.168.126.10, "fd00:126::10"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	addr := func(s string) nodeip.Addr { return nodeip.Addr{Prefix: netip.MustParsePrefix(s)} }
	tentative := addr("fd00:126::10/64")
	tentative.Unbindable = true
	eth0 := nodeip.Link{Index: 2, Name: "eth0", Addrs: []nodeip.Addr{addr("192.168.126.10/24")}}
	ens4 := nodeip.Link{Index: 3, Name: "ens4", Addrs: []nodeip.Addr{addr("10.0.0.5/24")}}
	dfltEns4 := nodeip.Route{LinkIndex: 3, Gw: a("10.0.0.1"), Priority: 100}
	twoNICs := nodeip.State{Links: []nodeip.Link{eth0, ens4}, Routes: []nodeip.Route{dfltEns4}}
	hints := []netip.Addr{a("192.168.126.0")}
	const file = "/etc/default/nodeip-configuration"

	obs := func(st nodeip.State, source, v string, hints []netip.Addr, prefer6 bool) NodeIPObservation {
		return NodeIPObservation{Node: "master-0", Source: source, Var: v, Hints: hints, Choice: nodeip.Choose(st, hints, prefer6)}
	}
	for _, tc := range []struct {
		name  string
		cfg   bool // dual-stack config
		o     NodeIPObservation
		st    Status
		words []string
	}{
		{"the config's hints, no file yet: the machine-network address",
			false, obs(twoNICs, hintsFromConfig, "", hints, false), StatusPass,
			[]string{"192.168.126.10 on eth0", "hint 192.168.126.0", "network.nodeIPHint", "appliance ignition"}},
		{"the file's hint, but no address in its network: the default route's NIC",
			false, obs(nodeip.State{Links: []nodeip.Link{ens4}, Routes: []nodeip.Route{dfltEns4}}, file, nodeip.HintVar, hints, false), StatusFail,
			[]string{"10.0.0.5 (ens4)", "outside the machine network 192.168.126.0/24", "node master-0 out of its members",
				"no interface has an address in the network of 192.168.126.0", "give this node an address in 192.168.126.0/24"}},
		{"a file without hint: the default route's NIC, the fix is the hint",
			false, obs(twoNICs, file, "", nil, false), StatusFail,
			[]string{"10.0.0.5 (ens4)", file + " sets no hint", `NODEIP_HINT="192.168.126.0"`}},
		{"a hint outside the machine network",
			false, obs(twoNICs, file, nodeip.KubeletHintVar, []netip.Addr{a("10.0.0.0")}, false), StatusFail,
			[]string{"10.0.0.5 (ens4)", "hint 10.0.0.0", "outside the machine network", `NODEIP_HINT="192.168.126.0"`}},
		{"a wide address holds the hint but lies outside",
			false, obs(nodeip.State{Links: []nodeip.Link{{Index: 2, Name: "eth0", Addrs: []nodeip.Addr{addr("192.168.0.9/16")}}}}, file, nodeip.HintVar, hints, false), StatusFail,
			[]string{"192.168.0.9 (eth0)", "give that interface an address in 192.168.126.0/24"}},
		{"nothing at all: the kubelet never starts",
			false, obs(nodeip.State{Links: []nodeip.Link{{Index: 3, Name: "ens4", Addrs: []nodeip.Addr{addr("10.0.0.5/24")}}}}, file, nodeip.HintVar, hints, false), StatusFail,
			[]string{"no address for the kubelet", "never starts", "192.168.126.0/24"}},
		{"a default route on the machine network, no hint: fine",
			false, obs(nodeip.State{Links: []nodeip.Link{eth0, ens4}, Routes: []nodeip.Route{{LinkIndex: 2, Gw: a("192.168.126.1")}}}, file, "", nil, false), StatusPass,
			[]string{"192.168.126.10 on eth0", "the default route's interface"}},
		{"two interfaces in the machine network",
			false, obs(nodeip.State{Links: []nodeip.Link{eth0, {Index: 4, Name: "eth1", Addrs: []nodeip.Addr{addr("192.168.126.11/24")}}}}, file, nodeip.HintVar, hints, false), StatusWarn,
			[]string{"192.168.126.10 (eth0)", "eth1 also route", "another on the next boot"}},
		{"dual-stack: both families",
			true, obs(nodeip.State{Links: []nodeip.Link{{Index: 2, Name: "eth0", Addrs: []nodeip.Addr{addr("192.168.126.10/24"), addr("fd00:126::10/64")}}}}, file, nodeip.HintVar, []netip.Addr{a("192.168.126.0"), a("fd00:126::")}, false), StatusPass,
			[]string{"192.168.126.10, fd00:126::10 on eth0"}},
		{"dual-stack: the IPv6 address is outside",
			true, obs(nodeip.State{Links: []nodeip.Link{{Index: 2, Name: "eth0", Addrs: []nodeip.Addr{addr("192.168.126.10/24"), addr("2001:db8::10/64"), addr("fd00:126::10/64")}}}}, file, nodeip.HintVar, []netip.Addr{a("192.168.126.0")}, false), StatusFail,
			[]string{"2001:db8::10 (eth0)", "outside the machine network 192.168.126.0/24, fd00:126::/64"}},
		{"dual-stack: one family only",
			true, obs(nodeip.State{Links: []nodeip.Link{eth0}}, file, nodeip.HintVar, []netip.Addr{a("192.168.126.0"), a("fd00:126::")}, false), StatusWarn,
			[]string{"192.168.126.10 (eth0) only", "dual-stack"}},
		{"an IPv6 pick still tentative",
			true, obs(nodeip.State{Links: []nodeip.Link{{Index: 2, Name: "eth0", Addrs: []nodeip.Addr{addr("192.168.126.10/24"), tentative}}}}, file, nodeip.HintVar, []netip.Addr{a("fd00:126::")}, true), StatusWarn,
			[]string{"fd00:126::10 (eth0)", "cannot be bound", "waits"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.cfg {
				c = dual
			}
			r := DecideNodeIP(c, tc.o)
			expect(t, r, IDNodeIP, tc.st, tc.words...)
			if r.Details == nil {
				t.Error("no details")
			}
		})
	}

	o := obs(twoNICs, file, nodeip.HintVar, hints, false)
	o.Current = a("10.0.0.5")
	expect(t, DecideNodeIP(cfg, o), IDNodeIP, StatusWarn, "this boot the kubelet got 10.0.0.5", "next boot it gets 192.168.126.10")
	o = obs(twoNICs, file, "", nil, false)
	o.HintErr = errors.New(file + `: nodeip: NODEIP_HINT="eth0": "eth0" is not an IP address`)
	expect(t, DecideNodeIP(cfg, o), IDNodeIP, StatusFail, `"eth0" is not an IP address`, "never starts", `NODEIP_HINT="192.168.126.0"`)
	o = obs(twoNICs, file, "", nil, false)
	o.Err = errors.New("netlink: permission denied")
	expect(t, DecideNodeIP(cfg, o), IDNodeIP, StatusWarn, "not checked", "permission denied")

	// Off a node, nothing to predict; a mistyped --node fails.
	expect(t, nodeIPCheck(cfg, nil, errors.New("no local address is a node's"), Options{}), IDNodeIP, StatusSkipped, "not one of them")
	expect(t, nodeIPCheck(cfg, nil, errors.New(`no node "master-9"`), Options{Node: "master-9"}), IDNodeIP, StatusFail, "master-9")
}

// TestWithoutVIPs: the VIPs the appliance holds now are not there when
// nodeip-configuration runs at boot.
func TestWithoutVIPs(t *testing.T) {
	cfg := testConfig(t, "")
	st := nodeip.State{Links: []nodeip.Link{{Index: 2, Name: "eth0", Addrs: []nodeip.Addr{
		{Prefix: netip.MustParsePrefix("192.168.126.5/24")}, {Prefix: netip.MustParsePrefix("192.168.126.10/24")},
	}}}}
	c := nodeip.Choose(withoutVIPs(st, cfg), []netip.Addr{a("192.168.126.0")}, false)
	if c.Picks[0].Addr != a("192.168.126.10") {
		t.Errorf("%+v: the API VIP was taken", c)
	}
}
