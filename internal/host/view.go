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

	Name       string       // this node's name; "" for a machine that is no node (Options.AnyMachine)
	Role       cluster.Role // "" when neither nodes nor --role give one
	Configured bool         // the node is one of the config's nodes
	// By says what identified the node ("--node", "address 192.168.126.10",
	// "host name", "host name and --role"), for the log and /status.
	By string
	// Warning is set when --role disagreed with the node's configured role
	// (which wins); it is logged once, when the node is identified.
	Warning string

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

// Identity returns who the view says this node is.
func (v *View) Identity() Identity {
	return Identity{Name: v.Name, Role: v.Role, Configured: v.Configured, By: v.By, Warning: v.Warning}
}

func (v *View) setIdentity(id Identity) {
	v.Name, v.Role, v.Configured, v.By, v.Warning = id.Name, id.Role, id.Configured, id.By, id.Warning
}

// sameAs reports whether two views describe the same node state, ignoring
// Version.
func (v *View) sameAs(o *View) bool {
	if v == nil || o == nil {
		return v == o
	}
	return v.Identity() == o.Identity() &&
		v.Interface == o.Interface && v.Pinned == o.Pinned && v.Index == o.Index && v.Up == o.Up &&
		bytes.Equal(v.MAC, o.MAC) && slices.Equal(v.Prefixes, o.Prefixes) && v.Problem == o.Problem
}

// Options say how to find this node. Commands fill them from the same flags
// (--node, --role, --interface).
type Options struct {
	// Node is the node's name (--node); "" finds it (see Who).
	Node string
	// Role is the role of a node that is not in nodes (--role): one that
	// joins on day 2, as the static pod passes it. A configured node keeps
	// its configured role.
	Role cluster.Role
	// Interface pins the interface (--interface, overrides
	// network.interface); "" with no network.interface follows the node's
	// addresses wherever they are.
	Interface string
	// Exclude reports addresses the appliance itself added besides the
	// cluster's VIPs; they are never the node's own. May be nil.
	Exclude func(netip.Addr) bool
	// AnyMachine accepts a machine that is no node (a standalone LB or DHCP
	// server): when nothing identifies a node the view names none instead
	// of failing. A wrong --node or --role still fails.
	AnyMachine bool
}

// Check reports a --role that is no role.
func (o Options) Check() error {
	switch o.Role {
	case "", cluster.RoleBootstrap, cluster.RoleMaster, cluster.RoleWorker:
		return nil
	}
	return fmt.Errorf("host: --role %q is not bootstrap, master or worker", o.Role)
}

// Identity is who this machine is in the cluster: Who's answer.
type Identity struct {
	Name       string
	Role       cluster.Role // "" only in a config without nodes and without --role
	Configured bool         // one of the config's nodes; else a node that joins on day 2
	By         string       // what identified it (see View.By)
	Warning    string       // --role disagreed with the configured role (see View.Warning)
}

// ErrNoNode is wrapped by Who's error when nothing identifies this machine
// as a node (as opposed to a --node or --role that is wrong).
var ErrNoNode = errors.New("this machine matches no configured node")

// Identify decides the view from the config, the options, the host name and
// the links as listed now: Who, then Locate. prev is the interface chosen
// before ("" at start). The only error is an identity that cannot be
// decided; an interface problem is reported in View.Problem.
func Identify(cfg *cluster.Config, opts Options, hostname string, links []Link, prev string) (View, error) {
	id, err := Who(cfg, opts, hostname, links)
	if err != nil {
		if !opts.AnyMachine || !errors.Is(err, ErrNoNode) {
			return View{}, err
		}
		id = Identity{}
	}
	v := Locate(cfg, opts, links, prev)
	v.setIdentity(id)
	return v, nil
}

// Locate finds where this machine's own addresses are: the interface
// (pinned by --interface or network.interface, else the one holding
// addresses in the machine networks) and those addresses, never a VIP. prev
// is the interface chosen before ("" at start): while the addresses are
// briefly on two interfaces (an address moving onto a bridge), the view
// stays where it was. Only the place fields of the view are set; Problem
// says why it is not usable.
func Locate(cfg *cluster.Config, opts Options, links []Link, prev string) View {
	var v View
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
			return v
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
			v.Problem = fmt.Sprintf("no interface has an address in network.machineCIDRs %s; give the node one, or set network.interface (or --interface)",
				joinPrefixes(cfg.Network.MachineCIDRs))
			return v
		case len(holders) == 1:
			chosen = holders[0]
		default:
			var up []*Link
			for _, l := range holders {
				if l.Name == prev {
					chosen = l
				}
				if l.Up {
					up = append(up, l)
				}
			}
			if chosen == nil && len(up) == 1 {
				// A down link keeping a stale address is not where the
				// node is.
				chosen = up[0]
			}
			if chosen == nil {
				names := make([]string, len(holders))
				for i, l := range holders {
					names[i] = l.Name
				}
				v.Problem = fmt.Sprintf("interfaces %s all have addresses in network.machineCIDRs; set network.interface (or --interface) to one of them",
					strings.Join(names, ", "))
				return v
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
	return v
}

func pinSource(opts Options) string {
	if opts.Interface != "" {
		return "--interface"
	}
	return "network.interface"
}

// Who decides which node this machine is, in this order:
//
//  1. --node: the configured node of that name; a name not in nodes is a
//     node that joins on day 2 when --role gives its role, else an error;
//  2. the configured node owning one of the local addresses (never a VIP,
//     loopback, link-local or excluded address);
//  3. the configured node named like the short host name;
//  4. with --role (as the static pod passes it), the short host name: a
//     node that joins on day 2;
//  5. else an error naming the host name, the local addresses, the known
//     nodes and the fix (wrapping ErrNoNode).
//
// A configured node keeps its configured role; a --role that disagrees is
// reported in Identity.Warning. A config without nodes (members are
// discovered) takes the short host name, with or without --role.
func Who(cfg *cluster.Config, opts Options, hostname string, links []Link) (Identity, error) {
	if err := opts.Check(); err != nil {
		return Identity{}, err
	}
	configured := func(n cluster.Node, by string) Identity {
		id := Identity{Name: n.Name, Role: n.Role, Configured: true, By: by}
		if opts.Role != "" && opts.Role != n.Role {
			id.Warning = fmt.Sprintf("--role %s disagrees with node %s's role %s in nodes; the configured role %s wins",
				opts.Role, n.Name, n.Role, n.Role)
		}
		return id
	}
	discovered := len(cfg.Nodes) == 0
	if opts.Node != "" {
		if n, ok := cfg.NodeByName(opts.Node); ok {
			return configured(n, "--node"), nil
		}
		if opts.Role != "" || discovered {
			return Identity{Name: opts.Node, Role: opts.Role, By: "--node"}, nil
		}
		return Identity{}, fmt.Errorf("host: --node %q is not in nodes (known: %s); correct the name, or add --role bootstrap|master|worker for a node that joins later",
			opts.Node, nodeNames(cfg))
	}
	local := localAddrs(cfg, opts, links)
	for _, a := range local {
		if n, ok := cfg.NodeByAddr(a); ok {
			return configured(n, "address "+a.String()), nil
		}
	}
	short := shortName(hostname)
	if n, ok := cfg.NodeByName(short); ok && short != "" {
		return configured(n, "host name"), nil
	}
	if short != "" && (opts.Role != "" || discovered) {
		by := "host name"
		if opts.Role != "" {
			by = "host name and --role"
		}
		return Identity{Name: short, Role: opts.Role, By: by}, nil
	}
	if short == "" {
		return Identity{}, fmt.Errorf("host: %w: the host name is empty or not set yet (%q) and no local address is a node's (known: %s); pass --node NAME, or let the machine get its name first",
			ErrNoNode, hostname, nodeNames(cfg))
	}
	addrs := make([]string, len(local))
	for i, a := range local {
		addrs[i] = a.String()
	}
	if len(addrs) == 0 {
		addrs = []string{"none"}
	}
	return Identity{}, fmt.Errorf("host: %w: host name %q, local addresses %s, known nodes %s; pass --node NAME, add the node to nodes, or pass --role bootstrap|master|worker for a node that joins later",
		ErrNoNode, hostname, strings.Join(addrs, ", "), nodeNames(cfg))
}

// shortName is the host name's first label, lower-cased as node names are:
// worker-7.ocp4.example.com and WORKER-7 are both worker-7.
func shortName(hostname string) string {
	short, _, _ := strings.Cut(strings.TrimSpace(hostname), ".")
	short = strings.ToLower(short)
	if short == "localhost" {
		// A machine whose host name is not set yet (DHCP or
		// NetworkManager have not named it): never a node's name, or a
		// day-2 node would be answered as localhost.<domain>.
		return ""
	}
	return short
}

// localAddrs lists the addresses that may identify a configured node: none
// loopback, link-local, multicast, a VIP of the cluster or excluded; each
// once, in link order.
func localAddrs(cfg *cluster.Config, opts Options, links []Link) []netip.Addr {
	var out []netip.Addr
	for _, l := range links {
		for _, p := range l.Addrs {
			a := p.Addr().Unmap()
			switch {
			case a.IsLoopback(), a.IsLinkLocalUnicast(), a.IsMulticast(), a.IsUnspecified(),
				isVIP(cfg, a), opts.Exclude != nil && opts.Exclude(a), slices.Contains(out, a):
				continue
			}
			out = append(out, a)
		}
	}
	return out
}

func isVIP(cfg *cluster.Config, a netip.Addr) bool {
	return slices.Contains(cfg.Network.APIVIPs, a) || slices.Contains(cfg.Network.IngressVIPs, a)
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
		if _, ok := cfg.Network.PrefixFor(a); !ok || isVIP(cfg, a) {
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
