package node

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

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

// Track weights in keepalived-openshift mode: those of the vrrp_scripts in
// the Machine Config Operator's keepalived templates, so an appliance node
// and a keepalived node of the same role and health advertise the same
// priority and a mixed cluster elects as an all-keepalived one would.
//
//	chk_ocp_lb          +20  the LB serves: haproxy_ready and the iptables rule exist
//	chk_ocp_both         +5  the LB serves, or the local apiserver's /readyz passes
//	chk_mcs              +3  the local Machine Config Server runs
//	chk_ingress           0  the router's /healthz (FAULT while failing)
//	chk_ingress_ready   +10  the router's /healthz/ready
//	chk_default_ingress +50  a pod of the default router runs on this node
//
// MCO's bootstrap holds 70 with no check at all, above any master (at most
// 40+20+5+3 = 68) for as long as it lives, even after its own apiserver has
// stopped. The appliance's bootstrap keeps that 70 while it serves, so a
// healthy one still wins as keepalived's does, and steps down when it
// cannot: its apiserver's /readyz failing takes 40 off (30, below every
// master's base 40, so any master takes the API over), its LB not serving
// the VIP takes 10 off (60, below every master whose LB serves, at least
// 65, and above every master whose LB does not, at most 48).
const (
	CompatWeightLB                 = 20
	CompatWeightLBOrAPIServer      = 5
	CompatWeightMCS                = 3
	CompatWeightRouterAlive        = 0
	CompatWeightRouterReady        = 10
	CompatWeightDefaultRouter      = 50
	CompatWeightBootstrapAPIServer = -40
	CompatWeightBootstrapLB        = -10
)

// Names of the tracks in /status. In keepalived-openshift mode each names
// the vrrp_script it stands for in a comment.
const (
	TrackLB                 = "lb"                  // chk_ocp_lb
	TrackLBOrAPIServer      = "lb-or-apiserver"     // chk_ocp_both
	TrackMCS                = "mcs"                 // chk_mcs
	TrackBootstrapAPIServer = "bootstrap-apiserver" // none: keepalived's bootstrap tracks nothing
	TrackRouter             = "router"              // native: the ingress health URL, weight 0
	TrackRouterAlive        = "router-alive"        // chk_ingress
	TrackRouterReady        = "router-ready"        // chk_ingress_ready
	TrackDefaultRouter      = "default-router"      // chk_default_ingress
)

// Probes are the checks the VRRP instances track, built by the caller from
// the services that run (nil: that check is not tracked).
type Probes struct {
	// LB says whether the local LB serves a VIP's traffic (its family has a
	// healthy backend and the redirect is installed).
	LB func(vip netip.Addr) vrrp.Probe
	// APIServer is the node's own apiserver's /readyz: the bootstrap's
	// handover, and in keepalived-openshift mode a master's chk_ocp_both.
	APIServer vrrp.Probe
	// IngressPort is the ingress router's readiness (vrrp.ingressHealthURL).
	IngressPort vrrp.Probe
	// keepalived-openshift mode only: the local Machine Config Server, the
	// router's liveness (/healthz), and whether the default router runs on
	// this node.
	MCS           vrrp.Probe
	RouterAlive   vrrp.Probe
	DefaultRouter vrrp.Probe
}

// Rise and fall of MCO's checks, kept in keepalived-openshift mode so a
// check moves an appliance node's priority after as many probes as it
// moves a keepalived node's; the intervals are theirs too.
var (
	compatAPICheck     = vrrp.TrackSpec{Interval: 2 * time.Second, Rise: 3, Fall: 3}
	compatRouterCheck  = vrrp.TrackSpec{Interval: time.Second, Rise: 3, Fall: 2}
	compatDefaultCheck = vrrp.TrackSpec{Interval: 5 * time.Second, Rise: 3, Fall: 2}
)

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
			VIPs: []netip.Prefix{in.VIP}, Unicast: in.Unicast, UnicastPeers: in.UnicastPeers,
		}
		if cfg.VRRP.Mode == cluster.VRRPModeKeepalivedOpenShift {
			c.Tracks = compatTracks(in, self.Role, p)
		} else {
			c.Tracks = nativeTracks(in, self.Role, p)
		}
		out = append(out, c)
	}
	return out
}

func nativeTracks(in cluster.VIPInstance, role cluster.Role, p Probes) []vrrp.TrackSpec {
	var ts []vrrp.TrackSpec
	switch in.Kind {
	case cluster.VIPAPI:
		if p.LB != nil {
			ts = append(ts, vrrp.TrackSpec{Name: TrackLB, Probe: p.LB(in.VIP.Addr()), Weight: WeightLB})
		}
		if role == cluster.RoleBootstrap && p.APIServer != nil {
			ts = append(ts, vrrp.TrackSpec{Name: TrackBootstrapAPIServer, Probe: p.APIServer, Weight: WeightBootstrapAPIServer})
		}
	case cluster.VIPIngress:
		if p.IngressPort != nil {
			// Weight 0: FAULT while the router is not ready; a node
			// without a router never holds the ingress VIP.
			ts = append(ts, vrrp.TrackSpec{Name: TrackRouter, Probe: p.IngressPort, Weight: 0})
		}
	}
	return ts
}

// compatTracks mirrors MCO's vrrp_scripts with the appliance's own probes
// (see CompatWeightLB). A probe the caller could not build is left out, as
// a check that never passes would be: the priority is then what keepalived
// gives a node where that check fails.
func compatTracks(in cluster.VIPInstance, role cluster.Role, p Probes) []vrrp.TrackSpec {
	var ts []vrrp.TrackSpec
	add := func(like vrrp.TrackSpec, name string, probe vrrp.Probe, weight int) {
		if probe == nil {
			return
		}
		like.Name, like.Probe, like.Weight = name, probe, weight
		ts = append(ts, like)
	}
	var lb vrrp.Probe
	if p.LB != nil {
		lb = p.LB(in.VIP.Addr())
	}
	switch {
	case in.Kind == cluster.VIPAPI && role == cluster.RoleBootstrap:
		add(compatAPICheck, TrackLB, lb, CompatWeightBootstrapLB)
		add(compatAPICheck, TrackBootstrapAPIServer, p.APIServer, CompatWeightBootstrapAPIServer)
	case in.Kind == cluster.VIPAPI:
		add(compatAPICheck, TrackLB, lb, CompatWeightLB)
		add(compatAPICheck, TrackLBOrAPIServer, eitherProbe(lb, p.APIServer), CompatWeightLBOrAPIServer)
		add(compatAPICheck, TrackMCS, p.MCS, CompatWeightMCS)
	case in.Kind == cluster.VIPIngress:
		add(compatRouterCheck, TrackRouterAlive, p.RouterAlive, CompatWeightRouterAlive)
		add(compatRouterCheck, TrackRouterReady, p.IngressPort, CompatWeightRouterReady)
		add(compatDefaultCheck, TrackDefaultRouter, p.DefaultRouter, CompatWeightDefaultRouter)
	}
	return ts
}

// eitherProbe passes when a passes or, failing that, b does (chk_ocp_both's
// "LB || apiserver"); nil probes are left out, and none at all is nil.
func eitherProbe(a, b vrrp.Probe) vrrp.Probe {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return vrrp.FuncProbe(func(ctx context.Context) error {
		errA := a.Probe(ctx)
		if errA == nil {
			return nil
		}
		if errB := b.Probe(ctx); errB != nil {
			return fmt.Errorf("%w; and %w", errA, errB)
		}
		return nil
	})
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

// vipState maps a VRRP state onto the cluster view's: the one place that
// knows both. ok is false for a state it has no mapping for; the tests
// hold it to every state vrrp names.
func vipState(s vrrp.State) (_ cluster.VIPState, ok bool) {
	switch s {
	case vrrp.StateInit:
		return cluster.VIPStateInit, true
	case vrrp.StateBackup:
		return cluster.VIPStateBackup, true
	case vrrp.StateMaster:
		return cluster.VIPStateMaster, true
	case vrrp.StateFault:
		return cluster.VIPStateFault, true
	}
	return "", false
}

// vipStatus turns an instance's status into the cluster view's entry. A
// state without a mapping (none, while the tests pass) leaves LocalState
// empty, which no reader takes for MASTER or BACKUP.
func vipStatus(kind cluster.VIPKind, vrid uint8, s vrrp.Status) cluster.VIPStatus {
	var local cluster.VIPState
	if st, ok := vrrp.ParseState(s.State); ok {
		local, _ = vipState(st)
	}
	v := cluster.VIPStatus{Name: s.Name, VRID: vrid, Kind: kind, LocalState: local, Master: s.Master,
		Predecessor: s.Predecessor, Priority: s.Priority, Since: s.Since, Collision: s.Collision}
	for _, h := range s.Holders {
		// A conversion: a field added to one type and not the other
		// does not compile.
		v.Holders = append(v.Holders, cluster.VIPHolder(h))
	}
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
