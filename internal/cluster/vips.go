package cluster

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
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

// LocalInterface is one interface of this machine and its addresses.
type LocalInterface struct {
	Name  string
	Up    bool
	Addrs []netip.Prefix
}

// LocalInterfaces reads this machine's interfaces (in the caller's network namespace).
func LocalInterfaces() ([]LocalInterface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("cluster: list interfaces: %w", err)
	}
	out := make([]LocalInterface, 0, len(ifs))
	for _, ifi := range ifs {
		addrs, err := ifi.Addrs()
		if err != nil {
			return nil, fmt.Errorf("cluster: addresses of %s: %w", ifi.Name, err)
		}
		li := LocalInterface{Name: ifi.Name, Up: ifi.Flags&net.FlagUp != 0}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				ip, _ := netip.AddrFromSlice(ipn.IP)
				ones, _ := ipn.Mask.Size()
				li.Addrs = append(li.Addrs, netip.PrefixFrom(ip.Unmap(), ones))
			}
		}
		out = append(out, li)
	}
	return out, nil
}

// FindSelf decides which configured node this process runs on: the node
// named name when given; else the node owning one of the local addresses;
// else the node named like the host (short name).
func (c *Config) FindSelf(name string, local []LocalInterface, hostname string) (Node, error) {
	if name != "" {
		if n, ok := c.NodeByName(name); ok {
			return n, nil
		}
		return Node{}, fmt.Errorf("cluster: --node %q is not in nodes (known: %s)", name, c.nodeNames())
	}
	for _, li := range local {
		for _, a := range li.Addrs {
			if n, ok := c.NodeByAddr(a.Addr()); ok {
				return n, nil
			}
		}
	}
	short, _, _ := strings.Cut(hostname, ".")
	if n, ok := c.NodeByName(short); ok {
		return n, nil
	}
	return Node{}, fmt.Errorf("cluster: this machine (host %q) matches no node by address or name; pass --node NAME (known: %s)",
		hostname, c.nodeNames())
}

func (c *Config) nodeNames() string {
	if len(c.Nodes) == 0 {
		return "none configured"
	}
	names := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		names[i] = n.Name
	}
	return strings.Join(names, ", ")
}

// isVIP reports whether a is one of the cluster's VIPs.
func (c *Config) isVIP(a netip.Addr) bool {
	return slices.Contains(c.Network.APIVIPs, a) || slices.Contains(c.Network.IngressVIPs, a)
}

// MachineAddr returns this machine's first address of a family (IPv6 when
// v6) inside a machine network, never a VIP it may hold: where a process
// that knows no node of its own (a standalone LB) sends VIP traffic.
func (c *Config) MachineAddr(local []LocalInterface, v6 bool) (netip.Addr, bool) {
	for _, li := range local {
		if !li.Up {
			continue
		}
		for _, p := range li.Addrs {
			a := p.Addr()
			if a.Is6() != v6 || c.isVIP(a) || a.IsLinkLocalUnicast() {
				continue
			}
			if _, ok := c.Network.PrefixFor(a); ok {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
}

// OwnAddr is MachineAddr of the interfaces as they are now: the address a
// standalone LB (lb.Options.Self) sends VIP traffic to, read on every ask
// so that it follows the address when it moves.
func (c *Config) OwnAddr(v6 bool) (netip.Addr, bool) {
	local, err := LocalInterfaces()
	if err != nil {
		return netip.Addr{}, false
	}
	return c.MachineAddr(local, v6)
}

// PickInterface returns the interface holding an address inside a machine
// network, for when network.interface is not set. VIPs themselves do not
// count: a stale VIP must not pick the interface.
func (c *Config) PickInterface(local []LocalInterface) (string, error) {
	var found []string
	for _, li := range local {
		for _, a := range li.Addrs {
			if c.isVIP(a.Addr()) {
				continue
			}
			if _, ok := c.Network.PrefixFor(a.Addr()); ok {
				found = append(found, li.Name)
				break
			}
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("cluster: no interface has an address in network.machineCIDRs %v; set network.interface", c.Network.MachineCIDRs)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("cluster: interfaces %s all have addresses in network.machineCIDRs; set network.interface to one of them",
		strings.Join(found, ", "))
}
