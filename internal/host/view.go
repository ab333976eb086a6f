package host

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"appliance/internal/cluster"
)

// Link is one interface as the kernel reports it: the input of Identify.
type Link struct {
	Name  string
	Index int
	Up    bool // operationally up (or unknown, as for veth and dummy links)
	MAC   net.HardwareAddr
	Addrs []netip.Prefix
}

// View is one immutable version of this node as it is now. Readers share it
// and must not modify it.
type View struct {
	Version uint64 // increases with every published change

	Name       string       // this node's name
	Role       cluster.Role // "" when the node is not in the config
	Configured bool         // the node is one of the config's nodes

	// Interface holds the node's own addresses; "" when no interface does
	// (Problem says why). Pinned reports that it comes from the config or
	// the command line rather than from where the addresses are.
	Interface string
	Pinned    bool
	Index     int // 0 when the interface does not exist
	Up        bool
	MAC       net.HardwareAddr
	// Prefixes are the node's own addresses on Interface inside the machine
	// networks, with their prefix lengths: IPv4 first, then IPv6, each in
	// address order. VIPs and excluded addresses never appear.
	Prefixes []netip.Prefix
	// Problem is non-empty while the view is not usable as it stands (no
	// interface, or one without an address), naming the cause and the fix.
	Problem string
}

// Addrs returns the node's own addresses (Prefixes without lengths).
func (v *View) Addrs() []netip.Addr {
	out := make([]netip.Addr, len(v.Prefixes))
	for i, p := range v.Prefixes {
		out[i] = p.Addr()
	}
	return out
}

// Addr returns the node's first own address of a family (IPv6 when v6).
func (v *View) Addr(v6 bool) (netip.Addr, bool) {
	for _, p := range v.Prefixes {
		if p.Addr().Is6() == v6 {
			return p.Addr(), true
		}
	}
	return netip.Addr{}, false
}

// Usable reports whether the view names an interface that is up and holds
// at least one own address.
func (v *View) Usable() bool { return v.Problem == "" }

// sameAs reports whether two views describe the same node state, ignoring
// Version.
func (v *View) sameAs(o *View) bool {
	if v == nil || o == nil {
		return v == o
	}
	return v.Name == o.Name && v.Role == o.Role && v.Configured == o.Configured &&
		v.Interface == o.Interface && v.Pinned == o.Pinned && v.Index == o.Index && v.Up == o.Up &&
		bytes.Equal(v.MAC, o.MAC) && slices.Equal(v.Prefixes, o.Prefixes) && v.Problem == o.Problem
}

// Options say how to find this node.
type Options struct {
	// Node is the node's name (--node); "" finds it by local address, then
	// by host name.
	Node string
	// Role is the role of a node that is not in the config (a config whose
	// nodes are discovered); ignored for configured nodes.
	Role cluster.Role
	// Interface pins the interface (overrides network.interface); "" with
	// no network.interface follows the node's addresses wherever they are.
	Interface string
	// Exclude reports addresses the appliance itself added besides the
	// cluster's VIPs; they are never the node's own. May be nil.
	Exclude func(netip.Addr) bool
}

// Identify decides the view from the config, the options, the host name and
// the links as listed now. prev is the interface chosen before ("" at start):
// while the node's addresses are briefly on two interfaces (an address moving
// onto a bridge), the view stays where it was. The only error is an identity
// that cannot be decided; an interface problem is reported in View.Problem.
func Identify(cfg *cluster.Config, opts Options, hostname string, links []Link, prev string) (View, error) {
	v, err := identity(cfg, opts, hostname, links)
	if err != nil {
		return View{}, err
	}
	own := ownFilter(cfg, opts)
	pinned := opts.Interface
	if pinned == "" {
		pinned = cfg.Network.Interface
	}
	var chosen *Link
	if pinned != "" {
		v.Interface, v.Pinned = pinned, true
		for i := range links {
			if links[i].Name == pinned {
				chosen = &links[i]
			}
		}
		if chosen == nil {
			v.Problem = fmt.Sprintf("interface %s (pinned by %s) does not exist", pinned, pinSource(opts))
			return v, nil
		}
	} else {
		var holders []*Link
		for i := range links {
			if len(ownPrefixes(links[i].Addrs, own)) > 0 {
				holders = append(holders, &links[i])
			}
		}
		switch {
		case len(holders) == 0:
			v.Problem = fmt.Sprintf("no interface has an address in network.machineCIDRs %s; give the node one, or set network.interface",
				joinPrefixes(cfg.Network.MachineCIDRs))
			return v, nil
		case len(holders) == 1:
			chosen = holders[0]
		default:
			for _, l := range holders {
				if l.Name == prev {
					chosen = l
				}
			}
			if chosen == nil {
				names := make([]string, len(holders))
				for i, l := range holders {
					names[i] = l.Name
				}
				v.Problem = fmt.Sprintf("interfaces %s all have addresses in network.machineCIDRs; set network.interface to one of them",
					strings.Join(names, ", "))
				return v, nil
			}
		}
		v.Interface = chosen.Name
	}
	v.Index, v.Up, v.MAC = chosen.Index, chosen.Up, slices.Clone(chosen.MAC)
	v.Prefixes = ownPrefixes(chosen.Addrs, own)
	switch {
	case !v.Up:
		v.Problem = fmt.Sprintf("interface %s is down", v.Interface)
	case len(v.Prefixes) == 0:
		v.Problem = fmt.Sprintf("interface %s has no address in network.machineCIDRs %s", v.Interface,
			joinPrefixes(cfg.Network.MachineCIDRs))
	}
	return v, nil
}

func pinSource(opts Options) string {
	if opts.Interface != "" {
		return "--interface"
	}
	return "network.interface"
}

// identity finds the node: by name when given, else by a local address,
// else by the short host name. A config without nodes accepts any name.
func identity(cfg *cluster.Config, opts Options, hostname string, links []Link) (View, error) {
	short, _, _ := strings.Cut(hostname, ".")
	found := func(n cluster.Node) (View, error) {
		return View{Name: n.Name, Role: n.Role, Configured: true}, nil
	}
	if opts.Node != "" {
		if n, ok := cfg.NodeByName(opts.Node); ok {
			return found(n)
		}
		// A node the config does not list (one that joins on day 2, known
		// to the others through the Kubernetes API or mDNS) says its role.
		if len(cfg.Nodes) == 0 || opts.Role != "" {
			return View{Name: opts.Node, Role: opts.Role}, nil
		}
		return View{}, fmt.Errorf("host: --node %q is not in nodes (known: %s); for a node that joins later, add --role", opts.Node, nodeNames(cfg))
	}
	var tried []string
	for _, l := range links {
		for _, p := range l.Addrs {
			a := p.Addr()
			if a.IsLoopback() || a.IsLinkLocalUnicast() {
				continue
			}
			if n, ok := cfg.NodeByAddr(a); ok {
				return found(n)
			}
			tried = append(tried, a.String())
		}
	}
	if n, ok := cfg.NodeByName(short); ok {
		return found(n)
	}
	if len(cfg.Nodes) == 0 {
		if short == "" {
			return View{}, errors.New("host: the config lists no nodes and the host name is empty; pass --node NAME")
		}
		return View{Name: short, Role: opts.Role}, nil
	}
	if len(tried) == 0 {
		tried = []string{"none"}
	}
	return View{}, fmt.Errorf("host: this machine matches no configured node: host name %q, local addresses %s; pass --node NAME or add the node to nodes (known: %s)",
		hostname, strings.Join(tried, ", "), nodeNames(cfg))
}

func nodeNames(cfg *cluster.Config) string {
	if len(cfg.Nodes) == 0 {
		return "none configured"
	}
	names := make([]string, len(cfg.Nodes))
	for i, n := range cfg.Nodes {
		names[i] = n.Name
	}
	return strings.Join(names, ", ")
}

// ownFilter says which addresses are the node's own: inside a machine
// network, and neither a VIP of the cluster nor excluded.
func ownFilter(cfg *cluster.Config, opts Options) func(netip.Addr) bool {
	return func(a netip.Addr) bool {
		if _, ok := cfg.Network.PrefixFor(a); !ok {
			return false
		}
		if slices.Contains(cfg.Network.APIVIPs, a) || slices.Contains(cfg.Network.IngressVIPs, a) {
			return false
		}
		return opts.Exclude == nil || !opts.Exclude(a)
	}
}

// ownPrefixes keeps the prefixes own accepts, IPv4 first, each family in
// address order.
func ownPrefixes(ps []netip.Prefix, own func(netip.Addr) bool) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if own(p.Addr()) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if a.Addr().Is4() != b.Addr().Is4() {
			if a.Addr().Is4() {
				return -1
			}
			return 1
		}
		return a.Addr().Compare(b.Addr())
	})
	return out
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}
