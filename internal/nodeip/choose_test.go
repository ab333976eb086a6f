package nodeip

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func a(s string) Addr { return Addr{Prefix: netip.MustParsePrefix(s)} }

func ips(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func dflt(link int, gw string, prio int) Route {
	return Route{LinkIndex: link, Gw: netip.MustParseAddr(gw), Priority: prio}
}

func route(link int, dst string, proto int) Route {
	return Route{LinkIndex: link, Dst: netip.MustParsePrefix(dst), Protocol: proto}
}

const protoKernel = 2

// Link indexes: lo 1, eth0 2 (the machine network), ens4 3 (another
// network, usually with the default route).
func lo() Link { return Link{1, "lo", []Addr{a("127.0.0.1/8"), a("::1/128")}} }

func TestChoose(t *testing.T) {
	deprecated := a("fd00:126::10/64")
	deprecated.Deprecated = true
	deprecated4 := a("192.168.126.10/24")
	deprecated4.Deprecated = true
	eip := a("192.168.126.50/24")
	eip.Label = "eth0:eip1"
	tentative := a("fd00:126::10/64")
	tentative.Unbindable = true
	tentative4 := a("192.168.126.10/24")
	tentative4.Unbindable = true

	hint4, hint6 := ips("192.168.126.0"), ips("fd00:126::")
	dual := ips("192.168.126.0", "fd00:126::")
	for _, tc := range []struct {
		name       string
		links      []Link
		routes     []Route
		hints      []netip.Addr
		preferIPv6 bool
		want       []string // address@link
		rule       Rule
		tied       []string
		unbindable bool
	}{
		// IPv4
		{name: "v4: the hint's network over the default route's NIC",
			links:  []Link{lo(), {2, "eth0", []Addr{a("192.168.126.10/24")}}, {3, "ens4", []Addr{a("10.0.0.5/24")}}},
			routes: []Route{dflt(3, "10.0.0.1", 100), route(2, "192.168.126.0/24", protoKernel)},
			hints:  hint4, want: []string{"192.168.126.10@eth0"}, rule: RuleHint},
		{name: "v4: no hint, the default route's NIC",
			links:  []Link{lo(), {2, "eth0", []Addr{a("192.168.126.10/24")}}, {3, "ens4", []Addr{a("10.0.0.5/24")}}},
			routes: []Route{dflt(3, "10.0.0.1", 100)},
			want:   []string{"10.0.0.5@ens4"}, rule: RuleDefaultRoute},
		{name: "v4: no address in the hint's network, the default route's NIC",
			links:  []Link{lo(), {2, "eth0", []Addr{a("192.168.127.10/24")}}, {3, "ens4", []Addr{a("10.0.0.5/24")}}},
			routes: []Route{dflt(3, "10.0.0.1", 100)},
			hints:  hint4, want: []string{"10.0.0.5@ens4"}, rule: RuleDefaultRoute},
		{name: "v4: an address equal to the hint is skipped, the next one on the link is taken",
			links:  []Link{{2, "eth0", []Addr{a("192.168.126.10/24"), a("192.168.126.11/24")}}, {3, "ens4", []Addr{a("10.0.0.5/24")}}},
			routes: []Route{dflt(3, "10.0.0.1", 100)},
			hints:  ips("192.168.126.10"), want: []string{"192.168.126.11@eth0"}, rule: RuleHint},
		{name: "v4: the only address equals the hint, so the default route decides",
			links:  []Link{{2, "eth0", []Addr{a("192.168.126.10/24")}}, {3, "ens4", []Addr{a("10.0.0.5/24")}}},
			routes: []Route{dflt(3, "10.0.0.1", 100)},
			hints:  ips("192.168.126.10"), want: []string{"10.0.0.5@ens4"}, rule: RuleDefaultRoute},
		{name: "v4: an egress IP (eip label) is never taken",
			links: []Link{{2, "eth0", []Addr{eip, a("192.168.126.10/24")}}},
			hints: hint4, want: []string{"192.168.126.10@eth0"}, rule: RuleHint},
		{name: "v4: a deprecated IPv4 address still counts (runtimecfg filters IPv6 only)",
			links: []Link{{2, "eth0", []Addr{deprecated4}}},
			hints: hint4, want: []string{"192.168.126.10@eth0"}, rule: RuleHint},
		{name: "v4: link-local addresses never count",
			links:  []Link{{2, "eth0", []Addr{a("169.254.3.4/16")}}},
			routes: []Route{dflt(2, "169.254.0.1", 0)},
			hints:  ips("169.254.0.0"), rule: RuleNone},
		{name: "v4: a tentative IPv4 first pick is not tested for binding",
			links: []Link{{2, "eth0", []Addr{tentative4}}},
			hints: hint4, want: []string{"192.168.126.10@eth0"}, rule: RuleHint},

		// IPv6
		{name: "v6: the hint's network",
			links:  []Link{lo(), {2, "eth0", []Addr{a("fd00:126::10/64"), a("fe80::1/64")}}, {3, "ens4", []Addr{a("2001:db8::5/64")}}},
			routes: []Route{dflt(3, "fe80::ff", 1024)},
			hints:  hint6, preferIPv6: true, want: []string{"fd00:126::10@eth0"}, rule: RuleHint},
		{name: "v6: a /128 counts through a router-advertised route on its link",
			links:  []Link{{2, "eth0", []Addr{a("fd00:126::10/128")}}, {3, "ens4", []Addr{a("2001:db8::5/64")}}},
			routes: []Route{route(2, "fd00:126::/64", ProtoRA), dflt(3, "fe80::ff", 1024)},
			hints:  hint6, preferIPv6: true, want: []string{"fd00:126::10@eth0"}, rule: RuleHint},
		{name: "v6: a /128 with a kernel route only does not count",
			links:  []Link{{2, "eth0", []Addr{a("fd00:126::10/128")}}, {3, "ens4", []Addr{a("2001:db8::5/64")}}},
			routes: []Route{route(2, "fd00:126::/64", protoKernel), dflt(3, "fe80::ff", 1024)},
			hints:  hint6, preferIPv6: true, want: []string{"2001:db8::5@ens4"}, rule: RuleDefaultRoute},
		{name: "v6: a /128 with the RA route on another link does not count",
			links:  []Link{{2, "eth0", []Addr{a("fd00:126::10/128")}}, {3, "ens4", []Addr{a("2001:db8::5/64")}}},
			routes: []Route{route(3, "fd00:126::/64", ProtoRA), dflt(3, "fe80::ff", 1024)},
			hints:  hint6, preferIPv6: true, want: []string{"2001:db8::5@ens4"}, rule: RuleDefaultRoute},
		{name: "v6: a router-advertised default route is not a network for a /128",
			links:  []Link{{2, "eth0", []Addr{a("fd00:126::10/128")}}},
			routes: []Route{{LinkIndex: 2, Dst: netip.MustParsePrefix("::/0"), Protocol: ProtoRA, Gw: netip.MustParseAddr("fe80::1"), Priority: 1024}},
			hints:  hint6, preferIPv6: true, want: []string{"fd00:126::10@eth0"}, rule: RuleDefaultRoute},
		{name: "v6: a deprecated address is skipped",
			links: []Link{{2, "eth0", []Addr{deprecated, a("fd00:126::11/64")}}},
			hints: hint6, preferIPv6: true, want: []string{"fd00:126::11@eth0"}, rule: RuleHint},
		{name: "v6: a tentative first pick makes runtimecfg wait",
			links: []Link{{2, "eth0", []Addr{tentative}}},
			hints: hint6, preferIPv6: true, want: []string{"fd00:126::10@eth0"}, rule: RuleHint, unbindable: true},
		{name: "v6: OVN's fd69::2 is left out of the default-route rule",
			links:      []Link{{4, "br-ex", []Addr{a("fd69::2/112"), a("2001:db8::5/64")}}},
			routes:     []Route{dflt(4, "2001:db8::1", 48)},
			preferIPv6: true, want: []string{"2001:db8::5@br-ex"}, rule: RuleDefaultRoute},
		{name: "v6: but not out of the routing rule",
			links:      []Link{{4, "br-ex", []Addr{a("fd69::2/112")}}},
			hints:      ips("fd69::"),
			preferIPv6: true, want: []string{"fd69::2@br-ex"}, rule: RuleHint},

		// Dual-stack
		{name: "dual: both families of the hint's link, IPv4 first",
			links:  []Link{lo(), {2, "eth0", []Addr{a("192.168.126.10/24"), a("fd00:126::10/64")}}, {3, "ens4", []Addr{a("10.0.0.5/24"), a("2001:db8::5/64")}}},
			routes: []Route{dflt(3, "10.0.0.1", 100), dflt(3, "fe80::1", 100)},
			hints:  dual, want: []string{"192.168.126.10@eth0", "fd00:126::10@eth0"}, rule: RuleHint},
		{name: "dual: --prefer-ipv6 puts IPv6 first",
			links: []Link{{2, "eth0", []Addr{a("192.168.126.10/24"), a("fd00:126::10/64")}}},
			hints: dual, preferIPv6: true, want: []string{"fd00:126::10@eth0", "192.168.126.10@eth0"}, rule: RuleHint},
		{name: "dual: the other family is the link's first valid address of that family, whatever its network",
			links: []Link{{2, "eth0", []Addr{a("192.168.126.10/24"), a("fe80::10/64"), a("2001:db8:ff::10/64"), a("fd00:126::10/64")}}},
			hints: hint4, want: []string{"192.168.126.10@eth0", "2001:db8:ff::10@eth0"}, rule: RuleHint},
		{name: "dual: the other family may be an address equal to a hint",
			links: []Link{{2, "eth0", []Addr{a("192.168.126.10/24"), a("fd00:126::10/64")}}},
			hints: ips("192.168.126.0", "fd00:126::10"), want: []string{"192.168.126.10@eth0", "fd00:126::10@eth0"}, rule: RuleHint},
		{name: "dual: no hint, each family's default route",
			links:  []Link{{2, "eth0", []Addr{a("192.168.126.10/24"), a("fd00:126::10/64")}}, {3, "ens4", []Addr{a("10.0.0.5/24"), a("2001:db8::5/64")}}},
			routes: []Route{dflt(3, "10.0.0.1", 100), dflt(3, "fe80::1", 100)},
			want:   []string{"10.0.0.5@ens4", "2001:db8::5@ens4"}, rule: RuleDefaultRoute},
		{name: "dual: no hint, --prefer-ipv6",
			links:      []Link{{3, "ens4", []Addr{a("10.0.0.5/24"), a("2001:db8::5/64")}}},
			routes:     []Route{dflt(3, "10.0.0.1", 100), dflt(3, "fe80::1", 100)},
			preferIPv6: true, want: []string{"2001:db8::5@ens4", "10.0.0.5@ens4"}, rule: RuleDefaultRoute},
		{name: "dual: an IPv6 address counts on a link whose only default route is IPv4, with that route's metric",
			links:      []Link{{2, "eth0", []Addr{a("fd00:126::10/64")}}, {3, "ens4", []Addr{a("10.0.0.5/24"), a("2001:db8::5/64")}}},
			routes:     []Route{dflt(2, "fd00:126::1", 50), dflt(3, "10.0.0.1", 20)},
			preferIPv6: true, want: []string{"2001:db8::5@ens4", "10.0.0.5@ens4"}, rule: RuleDefaultRoute},

		// The default-route rule's sort order
		{name: "sort: the lower metric wins over the lower index",
			links:  []Link{{2, "eth0", []Addr{a("192.168.126.10/24")}}, {3, "ens4", []Addr{a("10.0.0.5/24")}}},
			routes: []Route{dflt(2, "192.168.126.1", 200), dflt(3, "10.0.0.1", 100)},
			want:   []string{"10.0.0.5@ens4"}, rule: RuleDefaultRoute},
		{name: "sort: equal metrics, the lower index",
			links:  []Link{{3, "ens4", []Addr{a("10.0.0.5/24")}}, {2, "eth0", []Addr{a("192.168.126.10/24")}}},
			routes: []Route{dflt(3, "10.0.0.1", 100), dflt(2, "192.168.126.1", 100)},
			want:   []string{"192.168.126.10@eth0"}, rule: RuleDefaultRoute},
		{name: "sort: only a link's first default route counts",
			links:  []Link{{2, "eth0", []Addr{a("192.168.126.10/24")}}, {3, "ens4", []Addr{a("10.0.0.5/24")}}},
			routes: []Route{dflt(2, "192.168.126.1", 200), dflt(2, "192.168.126.1", 10), dflt(3, "10.0.0.1", 100)},
			want:   []string{"10.0.0.5@ens4"}, rule: RuleDefaultRoute},
		{name: "sort: the gateway's network first",
			links:  []Link{{2, "eth0", []Addr{a("10.1.0.5/24"), a("10.0.0.5/24")}}},
			routes: []Route{dflt(2, "10.0.0.1", 100)},
			want:   []string{"10.0.0.5@eth0"}, rule: RuleDefaultRoute},
		{name: "sort: public before private",
			links:  []Link{{2, "eth0", []Addr{a("10.0.0.5/24"), a("198.51.100.5/24")}}},
			routes: []Route{dflt(2, "203.0.113.1", 100)},
			want:   []string{"198.51.100.5@eth0"}, rule: RuleDefaultRoute},
		{name: "sort: real IPv6 before IPv4-mapped",
			links:      []Link{{2, "eth0", []Addr{a("::ffff:10.0.0.5/128"), a("fd00::5/64")}}},
			routes:     []Route{dflt(2, "fe80::1", 100)},
			preferIPv6: true, want: []string{"fd00::5@eth0"}, rule: RuleDefaultRoute},
		{name: "sort: then the lower address",
			links:  []Link{{2, "eth0", []Addr{a("10.0.0.9/24"), a("10.0.0.5/24")}}},
			routes: []Route{dflt(2, "10.0.0.1", 100)},
			want:   []string{"10.0.0.5@eth0"}, rule: RuleDefaultRoute},

		// Several links, or none
		{name: "two links route to the hint: the lowest index, the other named",
			links: []Link{{5, "eth1", []Addr{a("192.168.126.11/24")}}, {2, "eth0", []Addr{a("192.168.126.10/24")}}},
			hints: hint4, want: []string{"192.168.126.10@eth0"}, rule: RuleHint, tied: []string{"eth1"}},
		{name: "nothing routes to a hint and there is no default route",
			links: []Link{lo(), {2, "eth0", []Addr{a("192.168.127.10/24")}}},
			hints: hint4, rule: RuleNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Choose(State{Links: tc.links, Routes: tc.routes}, tc.hints, tc.preferIPv6)
			var got []string
			for _, p := range c.Picks {
				got = append(got, p.Addr.String()+"@"+p.Link)
			}
			if !slices.Equal(got, tc.want) || c.Rule != tc.rule {
				t.Errorf("got %v by %q, want %v by %q", got, c.Rule, tc.want, tc.rule)
			}
			if !slices.Equal(c.Tied, tc.tied) {
				t.Errorf("tied %v, want %v", c.Tied, tc.tied)
			}
			if c.Unbindable != tc.unbindable {
				t.Errorf("unbindable %v, want %v", c.Unbindable, tc.unbindable)
			}
			if tc.rule == RuleHint && !slices.Contains(tc.hints, c.Hint) {
				t.Errorf("hint %v is none of %v", c.Hint, tc.hints)
			}
		})
	}
}

func TestKubelet(t *testing.T) {
	c := Choice{Picks: []Pick{{netip.MustParseAddr("192.168.126.10"), "eth0"}, {netip.MustParseAddr("fd00:126::10"), "eth0"}}}
	if got := c.Kubelet(false); !slices.Equal(got, ips("192.168.126.10")) {
		t.Errorf("single-stack: %v (KUBELET_NODE_IP)", got)
	}
	if got := c.Kubelet(true); !slices.Equal(got, ips("192.168.126.10", "fd00:126::10")) {
		t.Errorf("dual-stack: %v (KUBELET_NODE_IPS)", got)
	}
	if got := (Choice{}).Kubelet(true); len(got) != 0 {
		t.Errorf("none: %v", got)
	}
}

func TestHintFile(t *testing.T) {
	for _, hints := range [][]netip.Addr{ips("192.168.126.0"), ips("fd00:126::"), ips("192.168.126.0", "fd00:126::")} {
		b := HintFile(hints)
		h, err := ParseHintFile(b)
		if err != nil || h.Var != HintVar || !slices.Equal(h.Addrs, hints) {
			t.Errorf("%v: read back %+v %v\n%s", hints, h, err, b)
		}
		if strings.Contains(string(b), KubeletHintVar) {
			t.Errorf("%s is set too:\n%s", KubeletHintVar, b)
		}
	}
	for _, tc := range []struct {
		in, v string
		want  []netip.Addr
	}{
		{"NODEIP_HINT=192.168.126.0\n", HintVar, ips("192.168.126.0")},
		{"# c\n; c\nNODEIP_HINT='10.0.0.0 fd00::'\n", HintVar, ips("10.0.0.0", "fd00::")},
		{"KUBELET_NODEIP_HINT=10.0.0.1\n", KubeletHintVar, ips("10.0.0.1")},
		{"NODEIP_HINT=\nKUBELET_NODEIP_HINT=10.0.0.1\n", KubeletHintVar, ips("10.0.0.1")},
		{"NODEIP_HINT=10.0.0.2\nKUBELET_NODEIP_HINT=10.0.0.1\n", HintVar, ips("10.0.0.2")},
		{"OTHER=1\n", "", nil},
		{"", "", nil},
	} {
		h, err := ParseHintFile([]byte(tc.in))
		if err != nil || h.Var != tc.v || !slices.Equal(h.Addrs, tc.want) {
			t.Errorf("%q: %+v %v, want %s %v", tc.in, h, err, tc.v, tc.want)
		}
	}
	if _, err := ParseHintFile([]byte("NODEIP_HINT=eth0\n")); err == nil || !strings.Contains(err.Error(), `"eth0" is not an IP address`) {
		t.Errorf("a name as hint: %v", err)
	}
}

// FuzzParseHintFile: any bytes parse without panic, and what parses is
// written back to the same hints.
func FuzzParseHintFile(f *testing.F) {
	f.Add([]byte("NODEIP_HINT=\"192.168.126.0 fd00:126::\"\n"))
	f.Add([]byte("KUBELET_NODEIP_HINT='10.0.0.1'\n# c\n"))
	f.Add([]byte("NODEIP_HINT=\"\nx=\"y"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHintFile(b)
		if err != nil || len(h.Addrs) == 0 {
			return
		}
		again, err := ParseHintFile(HintFile(h.Addrs))
		if err != nil || !slices.Equal(again.Addrs, h.Addrs) {
			t.Errorf("%q: %v, written back %v (%v)", b, h.Addrs, again.Addrs, err)
		}
	})
}
