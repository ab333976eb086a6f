package cluster

import (
	"net/netip"
	"slices"
	"time"
)

// VIPInstance is one virtual router a node runs: one VIP kind, one family.
// It carries everything a VRRP implementation needs and nothing about sockets.
type VIPInstance struct {
	Name         string // VIPName: "api-v4", "ingress-v6"
	Kind         VIPKind
	VIP          netip.Prefix // the VIP as a host prefix: /32 or /128
	VRID         uint8
	Priority     uint8
	Version      int
	Interval     time.Duration
	AuthPass     string
	Preempt      bool
	PreemptDelay time.Duration
	// Unicast says adverts go to UnicastPeers only (which may be empty
	// until members are known) rather than to the multicast group.
	Unicast bool
	// UnicastPeers are the configured nodes taking part in this router and
	// vrrp.unicastPeers, of the VIP's family, without self's own addresses.
	UnicastPeers []netip.Addr
}

// VIPInstances lists the virtual routers self takes part in: the API VIPs on
// the bootstrap and control-plane nodes, the ingress VIPs on control-plane
// and worker nodes, one per address family.
func (c *Config) VIPInstances(self Node) []VIPInstance {
	var out []VIPInstance
	for _, kind := range []VIPKind{VIPAPI, VIPIngress} {
		prio := c.PriorityFor(self.Role, kind)
		if prio == 0 {
			continue
		}
		for _, vip := range c.VIPsFor(kind) {
			if _, ok := c.Network.PrefixFor(vip); !ok {
				continue // Parse guarantees a machine network; defensive only
			}
			in := VIPInstance{
				// A host prefix, as OpenShift installs its VIPs: with the
				// machine network's length, a VIP added before the node's
				// own address (NetworkManager re-adding it, a move to
				// br-ex) became the subnet's primary address, the source
				// of the node's traffic, and removing it at a failover
				// removed the node's address with it (promote_secondaries
				// unset).
				Name: VIPName(kind, vip), Kind: kind, VIP: netip.PrefixFrom(vip, vip.BitLen()),
				VRID: c.VRIDFor(kind), Priority: prio, Version: c.VRRP.Version,
				Interval: c.VRRP.AdvertInterval, Preempt: c.VRRP.Preempt,
				PreemptDelay: c.VRRP.PreemptDelay,
			}
			if in.Version == 2 && vip.Is6() {
				// VRRPv2 is IPv4 only (RFC 3768): in keepalived-openshift
				// mode the IPv6 VIP's router speaks VRRPv3, with the same
				// VRID and interval and no authentication.
				in.Version = 3
			}
			if in.Version == 2 {
				in.AuthPass = c.AuthPassFor(kind)
			}
			if c.Unicast() {
				in.Unicast = true
				in.UnicastPeers = c.UnicastPeersFor(kind, vip.Is6(), self.IPs)
			}
			out = append(out, in)
		}
	}
	return out
}

// UnicastPeersFor lists the configured peers of kind's virtual router of a
// family: every configured node whose role takes part in it, then
// vrrp.unicastPeers, without the addresses in self, sorted. Members learned
// later (Kubernetes Nodes, mDNS) are added by the caller as they come.
func (c *Config) UnicastPeersFor(kind VIPKind, v6 bool, self []netip.Addr) []netip.Addr {
	var out []netip.Addr
	add := func(a netip.Addr) {
		if a.Is6() == v6 && !slices.Contains(self, a) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, n := range c.Nodes {
		if c.PriorityFor(n.Role, kind) == 0 {
			continue
		}
		for _, a := range n.IPs {
			add(a)
		}
	}
	for _, a := range c.VRRP.UnicastPeers {
		add(a)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}
