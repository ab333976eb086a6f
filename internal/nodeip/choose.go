package nodeip

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
)

// Addr is one address of a link, as the kernel lists it.
type Addr struct {
	// Prefix is the address with its prefix length (NetworkManager gives a
	// DHCPv6 address as a /128).
	Prefix netip.Prefix
	// Label is the address's IFA_LABEL; OVN-Kubernetes labels its egress
	// IPs with "eip" in it.
	Label string
	// Deprecated is true once the preferred lifetime is over (0).
	Deprecated bool
	// Unbindable is true while duplicate address detection runs (tentative,
	// not optimistic) or after it failed: a socket cannot bind the address.
	Unbindable bool
}

// Link is one network interface and its addresses, in the kernel's order
// (IPv4 first, then IPv6, the newest IPv6 address first).
type Link struct {
	Index int
	Name  string
	Addrs []Addr
}

// ProtoRA is RTPROT_RA: a route learnt from an IPv6 router advertisement.
const ProtoRA = 9

// Route is one route of the main table.
type Route struct {
	LinkIndex int
	// Dst is the destination; a default route has the zero Prefix or a /0.
	Dst      netip.Prefix
	Gw       netip.Addr
	Priority int
	// Protocol is who added the route (RTPROT_*), e.g. ProtoRA.
	Protocol int
}

// IsDefault reports whether r is a default route.
func (r Route) IsDefault() bool { return !r.Dst.IsValid() || r.Dst.Bits() == 0 }

// State is what runtimecfg reads from a node: every link with its
// addresses, and the main table's routes in the kernel's order (IPv4 first).
type State struct {
	Links  []Link
	Routes []Route
}

// Rule says how an address was chosen.
type Rule string

// The rules, in the order runtimecfg tries them.
const (
	// RuleHint: the address's network holds a hint (for a /128 IPv6
	// address: the network of a router-advertised route on its link).
	RuleHint Rule = "hint"
	// RuleDefaultRoute: no address routes to a hint; the addresses of the
	// links with a default route, in runtimecfg's sort order.
	RuleDefaultRoute Rule = "default route"
	// RuleNone: nothing qualifies; runtimecfg retries and the kubelet waits.
	RuleNone Rule = "none"
)

// Pick is one chosen address and the link it is on.
type Pick struct {
	Addr netip.Addr
	Link string
}

// Choice is what `runtimecfg node-ip set` gives the kubelet.
type Choice struct {
	// Picks are at most one address per family, the first being
	// KUBELET_NODE_IP and both KUBELET_NODE_IPS.
	Picks []Pick
	Rule  Rule
	// Hint is the hint the first pick routes to (RuleHint).
	Hint netip.Addr
	// Tied names the other links that route to a hint too (RuleHint).
	// runtimecfg walks links in Go map order, so it may take any of them,
	// and another one on the next boot; Choose takes the lowest index.
	Tied []string
	// Unbindable is true when the first pick is an IPv6 address that cannot
	// be bound yet (or ever): runtimecfg retries until it can, and the
	// kubelet waits.
	Unbindable bool
}

// Addrs are the picked addresses, in order.
func (c Choice) Addrs() []netip.Addr {
	out := make([]netip.Addr, len(c.Picks))
	for i, p := range c.Picks {
		out[i] = p.Addr
	}
	return out
}

// Kubelet is what the kubelet is started with: MCO's kubelet.service passes
// --node-ip=KUBELET_NODE_IPS on dual-stack clusters, else KUBELET_NODE_IP.
func (c Choice) Kubelet(dualStack bool) []netip.Addr {
	a := c.Addrs()
	if !dualStack && len(a) > 1 {
		a = a[:1]
	}
	return a
}

// Choose mirrors runtimecfg's getSuitableIPs (cmd/runtimecfg/node-ip.go,
// pkg/utils/addresses_linux.go) on one snapshot: the routing rule when
// there are hints, then the default-route rule. preferIPv6 is MCO's
// --prefer-ipv6 (IPv6 or IPv6-primary dual-stack clusters). On-prem
// platforms pass their VIPs as hints too.
func Choose(s State, hints []netip.Addr, preferIPv6 bool) Choice {
	c, ok := byHint(s, hints, preferIPv6)
	if !ok {
		c = byDefaultRoute(s, preferIPv6)
	}
	if len(c.Picks) == 0 {
		return Choice{Rule: RuleNone}
	}
	// runtimecfg binds a TCP socket to an IPv6 first pick and retries
	// until that works.
	if first := c.Picks[0]; first.Addr.Is6() {
		for _, l := range s.Links {
			if l.Name != first.Link {
				continue
			}
			for _, a := range l.Addrs {
				c.Unbindable = c.Unbindable || (a.Prefix.Addr() == first.Addr && a.Unbindable)
			}
		}
	}
	return c
}

// validNode is runtimecfg's ValidNodeAddress: no link-local address, no
// deprecated IPv6 address, no egress IP.
func validNode(a Addr) bool {
	ip := a.Prefix.Addr()
	switch {
	case ip.IsLinkLocalUnicast():
		return false
	case ip.Is6() && a.Deprecated:
		return false
	case strings.Contains(a.Label, "eip"):
		return false
	}
	return true
}

// ovnMasquerade is OVN-Kubernetes' IPv6 masquerade address on br-ex.
var ovnMasquerade = netip.MustParseAddr("fd69::2")

// validOVNNode is ValidOVNNodeAddress, which the default-route rule uses:
// runtimecfg's --network-type defaults to OVNKubernetes, OpenShift's only
// network type.
func validOVNNode(a Addr) bool {
	return a.Prefix.Addr() != ovnMasquerade && validNode(a)
}

// byIndex is s's links in index order: runtimecfg's map order is random,
// so a fixed one stands in for it.
func byIndex(s State) []Link {
	return slices.SortedFunc(slices.Values(s.Links), func(a, b Link) int { return cmp.Compare(a.Index, b.Index) })
}

func keep(addrs []Addr, ok func(Addr) bool) []Addr {
	var out []Addr
	for _, a := range addrs {
		if ok(a) {
			out = append(out, a)
		}
	}
	return out
}

// byHint is AddressesRouting: on the first link with an address whose
// network holds a hint (an address equal to a hint is skipped; a /128 IPv6
// address counts with the prefix of each router-advertised route on its
// link), that address plus the link's first address of the other family
// (whichever it is), the preferred family first.
func byHint(s State, hints []netip.Addr, preferIPv6 bool) (Choice, bool) {
	if len(hints) == 0 {
		return Choice{}, false
	}
	var c Choice
	found := false
	for _, l := range byIndex(s) {
		addrs := keep(l.Addrs, validNode)
		m, hint, ok := hintMatch(s, l.Index, addrs, hints)
		if !ok {
			continue
		}
		if found {
			c.Tied = append(c.Tied, l.Name)
			continue
		}
		found = true
		c = Choice{Rule: RuleHint, Hint: hint, Picks: []Pick{{m, l.Name}}}
		for _, a := range addrs {
			if a.Prefix.Addr().Is6() != m.Is6() {
				c.Picks = append(c.Picks, Pick{a.Prefix.Addr(), l.Name})
				break
			}
		}
		if len(c.Picks) == 2 && c.Picks[1].Addr.Is6() == preferIPv6 {
			c.Picks[0], c.Picks[1] = c.Picks[1], c.Picks[0]
		}
	}
	return c, found
}

// hintMatch is the first address of a link that routes to a hint.
func hintMatch(s State, link int, addrs []Addr, hints []netip.Addr) (netip.Addr, netip.Addr, bool) {
	for _, a := range addrs {
		ip := a.Prefix.Addr()
		if slices.Contains(hints, ip) {
			continue
		}
		if ip.Is6() && a.Prefix.Bits() == 128 {
			for _, r := range s.Routes {
				if r.LinkIndex != link || r.IsDefault() || !r.Dst.Addr().Is6() || r.Protocol != ProtoRA {
					continue
				}
				net := netip.PrefixFrom(ip, r.Dst.Bits())
				for _, h := range hints {
					if net.Contains(h) {
						return ip, h, true
					}
				}
			}
			continue
		}
		for _, h := range hints {
			if a.Prefix.Contains(h) {
				return ip, h, true
			}
		}
	}
	return netip.Addr{}, netip.Addr{}, false
}

// candidate is an address on a link with a default route.
type candidate struct {
	ip        netip.Addr
	link      int
	name      string
	priority  int  // of the link's first default route
	gwOnLink  bool // that route's gateway is inside the address's network
	ipv6      bool
	v4Printed bool // IPv4, or IPv4-mapped IPv6 (runtimecfg: "." in its text)
}

// byDefaultRoute is AddressesDefault: every address of every link with a
// default route, sorted by the link's first default route's metric, the
// link index, the preferred family, the gateway inside the address's
// network, public before private, real IPv6 before IPv4-mapped, the
// address; then the first of each family.
func byDefaultRoute(s State, preferIPv6 bool) Choice {
	first := map[int]Route{}
	for _, r := range s.Routes {
		if _, seen := first[r.LinkIndex]; r.IsDefault() && !seen {
			first[r.LinkIndex] = r
		}
	}
	var cands []candidate
	for _, l := range byIndex(s) {
		r, ok := first[l.Index]
		if !ok {
			continue
		}
		for _, a := range keep(l.Addrs, validOVNNode) {
			ip := a.Prefix.Addr()
			cands = append(cands, candidate{
				ip: ip, link: l.Index, name: l.Name, priority: r.Priority,
				gwOnLink: r.Gw.IsValid() && a.Prefix.Contains(r.Gw),
				ipv6:     ip.Is6(), v4Printed: ip.Is4() || ip.Is4In6(),
			})
		}
	}
	slices.SortStableFunc(cands, func(x, y candidate) int {
		switch {
		case x.priority != y.priority:
			return cmp.Compare(x.priority, y.priority)
		case x.link != y.link:
			return cmp.Compare(x.link, y.link)
		case x.ipv6 != y.ipv6:
			return first2(x.ipv6 == preferIPv6)
		case x.gwOnLink != y.gwOnLink:
			return first2(x.gwOnLink)
		case x.ip.IsPrivate() != y.ip.IsPrivate():
			return first2(!x.ip.IsPrivate())
		case x.v4Printed != y.v4Printed:
			return first2(!x.v4Printed)
		}
		return x.ip.Compare(y.ip)
	})
	c := Choice{Rule: RuleDefaultRoute}
	var have4, have6 bool
	for _, x := range cands {
		if (x.ipv6 && have6) || (!x.ipv6 && have4) {
			continue
		}
		c.Picks = append(c.Picks, Pick{x.ip, x.name})
		have4, have6 = have4 || !x.ipv6, have6 || x.ipv6
	}
	return c
}

// first2 orders two unequal candidates: -1 when x goes first.
func first2(xFirst bool) int {
	if xFirst {
		return -1
	}
	return 1
}
