package node

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"appliance/internal/cluster"
	"appliance/vrrp"
)

// Plan is what a node runs. Each part can be switched off in appliance.yaml
// (vrrp.enabled, lb.enabled, dns.enabled, dns.mdns, dhcp.enabled).
type Plan struct {
	APIVIP     bool // a virtual router per API VIP
	IngressVIP bool // a virtual router per ingress VIP
	LB         bool // the API and MCS load balancer and its VIP redirect
	DNS        bool
	MDNS       bool
	DHCP       bool
}

// PlanFor decides the services of a node of role: the bootstrap runs the
// API VIP, the LB, DNS (and DHCP when enabled); a master adds the ingress
// VIP; a worker runs the ingress VIP and DNS.
func PlanFor(cfg *cluster.Config, role cluster.Role) Plan {
	cp := role == cluster.RoleBootstrap || role == cluster.RoleMaster
	return Plan{
		APIVIP:     cfg.VRRP.Enabled && cp && len(cfg.Network.APIVIPs) > 0,
		IngressVIP: cfg.VRRP.Enabled && role != cluster.RoleBootstrap && len(cfg.Network.IngressVIPs) > 0,
		LB:         cfg.LB.Enabled && cp,
		DNS:        cfg.DNS.Enabled,
		MDNS:       cfg.DNS.Enabled && cfg.DNS.MDNS,
		DHCP:       cfg.DHCP.Enabled && cp,
	}
}

// String lists the planned services, for the start-up log line.
func (p Plan) String() string {
	var on []string
	for _, s := range []struct {
		on   bool
		name string
	}{{p.APIVIP, "api-vip"}, {p.IngressVIP, "ingress-vip"}, {p.LB, "lb"}, {p.DNS, "dns"}, {p.MDNS, "mdns"}, {p.DHCP, "dhcp"}} {
		if s.on {
			on = append(on, s.name)
		}
	}
	if len(on) == 0 {
		return "nothing"
	}
	return strings.Join(on, ", ")
}

// Track weights of the API VIP. The defaults give the bootstrap 50 and a
// master 40 (OpenShift's): an LB that cannot serve takes 30 off, so any node
// whose LB serves outranks it (bootstrap 20, master 10); the bootstrap's own
// apiserver failing takes 20 off, putting it at 30, below every master,
// which is the handover.
const (
	WeightLB                 = -30
	WeightBootstrapAPIServer = -20
)

// Probes are the checks the VRRP instances track, built by the caller from
// the services that run (nil: that check is not tracked).
type Probes struct {
	// LB says whether the local LB serves a VIP's traffic (its family has a
	// healthy backend and the redirect is installed).
	LB          func(vip netip.Addr) vrrp.Probe
	APIServer   vrrp.Probe // the bootstrap's own apiserver /readyz
	IngressPort vrrp.Probe // the ingress router's readiness
}

// VRRPConfigs derives the node's virtual routers: one per VIP kind and
// family from the config, on iface, with the tracks that tie them to the
// other services.
func VRRPConfigs(cfg *cluster.Config, self cluster.Node, plan Plan, iface string, p Probes) []vrrp.Config {
	var out []vrrp.Config
	for _, in := range cfg.VIPInstances(self) {
		if (in.Kind == cluster.VIPAPI && !plan.APIVIP) || (in.Kind == cluster.VIPIngress && !plan.IngressVIP) {
			continue
		}
		c := vrrp.Config{
			Name: in.Name, Interface: iface, VRID: in.VRID, Version: uint8(in.Version),
			Priority: in.Priority, Interval: in.Interval, Preempt: in.Preempt,
			PreemptDelay: in.PreemptDelay, Accept: true, AuthPass: in.AuthPass,
			VIPs: []netip.Prefix{in.VIP}, UnicastPeers: in.UnicastPeers,
		}
		switch in.Kind {
		case cluster.VIPAPI:
			if p.LB != nil {
				c.Tracks = append(c.Tracks, vrrp.TrackSpec{Name: "lb", Probe: p.LB(in.VIP.Addr()), Weight: WeightLB})
			}
			if self.Role == cluster.RoleBootstrap && p.APIServer != nil {
				c.Tracks = append(c.Tracks, vrrp.TrackSpec{Name: "bootstrap-apiserver", Probe: p.APIServer, Weight: WeightBootstrapAPIServer})
			}
		case cluster.VIPIngress:
			if p.IngressPort != nil {
				// Weight 0: FAULT while the router is not ready; a node
				// without a router never holds the ingress VIP.
				c.Tracks = append(c.Tracks, vrrp.TrackSpec{Name: "router", Probe: p.IngressPort, Weight: 0})
			}
		}
		out = append(out, c)
	}
	return out
}

// unicastPeers lists where an instance of kind and family sends its adverts
// in unicast mode: the configured peers, plus every member whose role takes
// part in that VIP (a node that joined through the Kubernetes API or mDNS
// included), minus this node's own addresses.
func unicastPeers(cfg *cluster.Config, snap *cluster.Snapshot, kind cluster.VIPKind, v6 bool, self []netip.Addr) []netip.Addr {
	var out []netip.Addr
	add := func(a netip.Addr) {
		if a.Is6() == v6 && !slices.Contains(self, a) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, p := range cfg.VRRP.UnicastPeers {
		add(p)
	}
	for _, m := range snap.Members {
		if cfg.PriorityFor(m.Role, kind) == 0 {
			continue
		}
		for _, a := range m.IPs {
			if _, ok := cfg.Network.PrefixFor(a); ok {
				add(a)
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// vipStatus turns an instance's status into the cluster view's entry.
func vipStatus(kind cluster.VIPKind, vrid uint8, s vrrp.Status) cluster.VIPStatus {
	v := cluster.VIPStatus{Name: s.Name, VRID: vrid, Kind: kind, LocalState: s.State, Master: s.Master,
		Predecessor: s.Predecessor, Priority: s.Priority, Since: s.Since, Collision: s.Collision}
	if len(s.VIPs) > 0 {
		v.VIP = s.VIPs[0].Addr()
	}
	return v
}

// holdsAPIVIP reports whether this node is MASTER of an API VIP in snap:
// the one node that answers the DHCP pool.
func holdsAPIVIP(snap *cluster.Snapshot) bool {
	for _, v := range snap.VIPs {
		if v.Kind == cluster.VIPAPI && v.LocalState == cluster.VIPStateMaster {
			return true
		}
	}
	return false
}

// kindOf tells an instance's VIP kind from its name (cluster.VIPName).
func kindOf(name string) (cluster.VIPKind, error) {
	for _, k := range []cluster.VIPKind{cluster.VIPAPI, cluster.VIPIngress} {
		if strings.HasPrefix(name, string(k)+"-") {
			return k, nil
		}
	}
	return "", fmt.Errorf("node: instance %q is neither an API nor an ingress VIP", name)
}
