package preflight

import (
	"fmt"
	"net/netip"
	"strings"

	"appliance/internal/cluster"
	"appliance/internal/nodeip"
)

// IDNodeIP is the kubelet's node IP check.
const IDNodeIP = "node-ip"

// Paths the node-ip check reads by default.
const (
	DefaultNodeIPConf = nodeip.HintFilePath
	// DefaultNodeIPPrimary is where nodeip-configuration records this
	// boot's pick.
	DefaultNodeIPPrimary = "/run/nodeip-configuration/primary-ip"
)

// hintsFromConfig names the config's hints as a source.
const hintsFromConfig = "network.nodeIPHint"

// NodeIPObservation is what the node-ip check found on a node.
type NodeIPObservation struct {
	Node string
	// Source is where the hints come from: the hint file, or
	// network.nodeIPHint when the node has no such file yet (what
	// `appliance ignition` and `appliance manifests` will write).
	Source string
	// Var is the file's variable the hints were read from.
	Var   string
	Hints []netip.Addr
	// HintErr is a hint file runtimecfg refuses (a word that is no address).
	HintErr error
	// Choice is runtimecfg's choice on this node's links and routes.
	Choice nodeip.Choice
	// Current is this boot's pick, when nodeip-configuration ran.
	Current netip.Addr
	// Err is a failure to look (netlink, reading the file).
	Err error
}

// preferIPv6 is MCO's --prefer-ipv6, given for IPv6 and IPv6-primary
// clusters; the first machine network stands for the first service network,
// whose family OpenShift requires to match.
func preferIPv6(cfg *cluster.Config) bool {
	return len(cfg.Network.MachineCIDRs) > 0 && cfg.Network.MachineCIDRs[0].Addr().Is6()
}

func dualStack(cfg *cluster.Config) bool {
	var v4, v6 bool
	for _, p := range cfg.Network.MachineCIDRs {
		v4, v6 = v4 || p.Addr().Is4(), v6 || p.Addr().Is6()
	}
	return v4 && v6
}

// hintValue is the hint file's value: the hints, space-separated.
func hintValue(as []netip.Addr) string { return strings.ReplaceAll(joinAddrs(as), ", ", " ") }

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// DecideNodeIP says which address the kubelet will get and fails when it
// lies outside the machine network: the appliance takes its members from
// the Nodes' InternalIPs and leaves such a node out. The fix depends on why
// runtimecfg took it.
func DecideNodeIP(cfg *cluster.Config, o NodeIPObservation) Result {
	c := o.Choice
	kubelet := c.Kubelet(dualStack(cfg))
	d := map[string]any{"node": o.Node, "source": o.Source, "hints": o.Hints, "rule": c.Rule, "picks": c.Picks, "kubelet": kubelet}
	if o.Var != "" {
		d["variable"] = o.Var
	}
	if o.Current.IsValid() {
		d["current"] = o.Current
	}
	if len(c.Tied) > 0 {
		d["tied"] = c.Tied
	}
	nets := joinPrefixes(cfg.Network.MachineCIDRs)
	want := fmt.Sprintf("%s=%q", nodeip.HintVar, hintValue(cfg.Network.NodeIPHints))
	from := o.Source
	if o.Source == hintsFromConfig {
		from = fmt.Sprintf("%s, which `appliance ignition` writes to %s (not on this node yet)", hintsFromConfig, DefaultNodeIPConf)
	}
	switch {
	case o.Err != nil:
		return warn(IDNodeIP, "the kubelet's node IP not checked: %v", o.Err).with(d)
	case o.HintErr != nil:
		return fail(IDNodeIP, "%v: nodeip-configuration fails and the kubelet never starts; write %s there (`appliance ignition` does)",
			o.HintErr, want).with(d)
	case c.Rule == nodeip.RuleNone:
		return fail(IDNodeIP, "runtimecfg finds no address for the kubelet: no interface has an address in the network of %s from %s, and none has a default route; nodeip-configuration retries and the kubelet never starts: give this node an address in %s",
			hintText(o.Hints), from, nets).with(d)
	}
	for _, a := range kubelet {
		if _, in := cfg.Network.PrefixFor(a); in {
			continue
		}
		link := ""
		for _, p := range c.Picks {
			if p.Addr == a {
				link = p.Link
			}
		}
		msg := fmt.Sprintf("the kubelet will get %s (%s), outside the machine network %s, and the appliance leaves node %s out of its members: ", a, link, nets, o.Node)
		switch {
		case c.Rule == nodeip.RuleDefaultRoute && len(o.Hints) == 0:
			msg += fmt.Sprintf("%s sets no hint, so runtimecfg takes the default route's interface; write %s there (`appliance ignition` and `appliance manifests` do)", o.Source, want)
		case c.Rule == nodeip.RuleDefaultRoute:
			msg += fmt.Sprintf("no interface has an address in the network of %s from %s, so runtimecfg takes the default route's interface; give this node an address in %s", hintText(o.Hints), from, nets)
		case !inAny(cfg, c.Hint):
			msg += fmt.Sprintf("its network holds the hint %s from %s, which is outside the machine network; set %s (network.nodeIPHint)", c.Hint, from, want)
		default:
			msg += fmt.Sprintf("its network (on %s) holds the hint %s from %s; give that interface an address in %s", link, c.Hint, from, nets)
		}
		return fail(IDNodeIP, "%s", msg).with(d)
	}
	first := c.Picks[0]
	switch {
	case c.Unbindable:
		return warn(IDNodeIP, "the kubelet will get %s (%s), which cannot be bound yet (tentative, or duplicate address detection failed): nodeip-configuration waits until it can, and the kubelet with it",
			first.Addr, first.Link).with(d)
	case len(c.Tied) > 0:
		return warn(IDNodeIP, "the kubelet will get %s (%s), but %s also route to the hint %s: runtimecfg takes any of them, possibly another on the next boot; keep one interface in the machine network (or bond them)",
			first.Addr, first.Link, strings.Join(c.Tied, ", "), c.Hint).with(d)
	case o.Current.IsValid() && o.Current != first.Addr:
		return warn(IDNodeIP, "this boot the kubelet got %s (%s); from the next boot it gets %s (%s)",
			o.Current, DefaultNodeIPPrimary, first.Addr, first.Link).with(d)
	case dualStack(cfg) && len(kubelet) < 2:
		return warn(IDNodeIP, "the kubelet gets %s (%s) only: the cluster is dual-stack but %s has no usable address of the other family",
			first.Addr, first.Link, first.Link).with(d)
	}
	how := "the default route's interface"
	if c.Rule == nodeip.RuleHint {
		how = fmt.Sprintf("its network holds the hint %s from %s", c.Hint, from)
	}
	return pass(IDNodeIP, "the kubelet gets %s on %s, inside the machine network: %s", joinAddrs(kubelet), first.Link, how).with(d)
}

func hintText(hints []netip.Addr) string {
	if len(hints) == 0 {
		return "no hint"
	}
	return joinAddrs(hints)
}

func inAny(cfg *cluster.Config, a netip.Addr) bool {
	_, in := cfg.Network.PrefixFor(a)
	return in
}

// withoutVIPs drops the cluster's VIPs from the links: nodeip-configuration
// runs at boot, before the appliance holds any.
func withoutVIPs(s nodeip.State, cfg *cluster.Config) nodeip.State {
	vips := map[netip.Addr]bool{}
	for _, k := range []cluster.VIPKind{cluster.VIPAPI, cluster.VIPIngress} {
		for _, a := range cfg.VIPsFor(k) {
			vips[a] = true
		}
	}
	out := nodeip.State{Routes: s.Routes}
	for _, l := range s.Links {
		nl := nodeip.Link{Index: l.Index, Name: l.Name}
		for _, a := range l.Addrs {
			if !vips[a.Prefix.Addr()] {
				nl.Addrs = append(nl.Addrs, a)
			}
		}
		out.Links = append(out.Links, nl)
	}
	return out
}
