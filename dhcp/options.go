package dhcp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"appliance/internal/cluster"
)

// Defaults for Options.
const (
	// DefaultLeaseTime is short enough that a node moved to another address
	// picks it up within the hour, long enough that a server outage of
	// minutes goes unnoticed.
	DefaultLeaseTime = cluster.DefaultDHCPLeaseTime
	// DefaultLeaseFile is where a standalone server keeps its pool leases.
	DefaultLeaseFile = cluster.DefaultDHCPLeaseFile
	// DefaultWorkers bounds concurrent request handling.
	DefaultWorkers = 32
	// DefaultProbeTimeout is how long an ARP probe of a pool address waits
	// for an answer (see Options.ProbeTimeout).
	DefaultProbeTimeout = 150 * time.Millisecond
)

// Reservation binds a MAC to an address and host name.
type Reservation struct {
	MAC      net.HardwareAddr
	IP       netip.Addr
	Hostname string // option 12; "" sends none
}

// Options configures a Server and its Policy.
type Options struct {
	// Interface is where the server listens; required by Server.
	Interface string
	// ServerID is option 54 and the address clients unicast to; the zero
	// value means the interface's address inside Network (filled by New).
	ServerID netip.Addr
	// Network is the IPv4 machine network served (option 1 from its mask).
	Network netip.Prefix
	// Router is option 3; zero sends none.
	Router netip.Addr
	// DNS is option 6; empty means the server's own address.
	DNS []netip.Addr
	// NTP is option 42, sent only when set.
	NTP []netip.Addr
	// Domain is option 15, the cluster domain.
	Domain string
	// SearchDomains is option 119, sent only when set.
	SearchDomains []string
	// LeaseTime is option 51; zero means DefaultLeaseTime.
	LeaseTime time.Duration
	// Reservations are answered by every server.
	Reservations []Reservation
	// Pool is the dynamic range; the zero Range turns the pool off.
	Pool cluster.Range
	// Excluded addresses (VIPs, the router, the server) are never given
	// from the pool; reserved addresses are excluded too.
	Excluded []netip.Addr
	// ServePool says whether this server may hand out pool addresses now;
	// nil means always. With several servers it is wired to "holds the API
	// VIP" so exactly one serves the pool.
	ServePool func() bool
	// LeaseFile holds the pool leases; "" keeps them in memory only (tests).
	LeaseFile string
	// Workers bounds concurrent request handling; 0 means DefaultWorkers.
	Workers int
	// ProbeTimeout is how long an ARP probe waits before a pool address is
	// considered free; 0 means DefaultProbeTimeout, negative disables the
	// probe.
	ProbeTimeout time.Duration
}

// FromCluster derives Options from the cluster config: the first IPv4
// machine network, its gateway, the cluster domain, one reservation per node
// with a MAC and an IPv4 address in the network (host name = node name), the
// VIPs excluded from any pool, and DNS pointing at the masters (they serve
// the cluster DNS), or at the server itself when there are none. The caller
// adds Interface, the pool and the other knobs.
func FromCluster(cfg *cluster.Config) (Options, error) {
	var o Options
	for _, p := range cfg.Network.MachineCIDRs {
		if p.Addr().Is4() {
			o.Network = p.Masked()
			break
		}
	}
	if !o.Network.IsValid() {
		return o, errors.New("dhcp: network.machineCIDR holds no IPv4 network to serve")
	}
	if cfg.Network.Gateway.Is4() {
		o.Router = cfg.Network.Gateway
		o.Excluded = append(o.Excluded, cfg.Network.Gateway)
	}
	if cfg.Cluster.Name != "" && cfg.Cluster.BaseDomain != "" {
		o.Domain = cfg.Cluster.Domain()
	}
	o.Excluded = append(o.Excluded, cfg.Network.APIVIPs...)
	o.Excluded = append(o.Excluded, cfg.Network.IngressVIPs...)
	for i, n := range cfg.Nodes {
		var ip netip.Addr
		for _, a := range n.IPs {
			if a.Is4() && o.Network.Contains(a) {
				ip = a
				break
			}
		}
		if !ip.IsValid() {
			continue
		}
		if n.Role == cluster.RoleMaster {
			o.DNS = append(o.DNS, ip)
		}
		o.Excluded = append(o.Excluded, n.IPs...)
		if len(n.MAC) == 0 {
			continue
		}
		if len(n.MAC) != 6 {
			return o, fmt.Errorf("dhcp: nodes[%d].mac: %s is not a 6-byte Ethernet address", i, n.MAC)
		}
		o.Reservations = append(o.Reservations, Reservation{MAC: n.MAC, IP: ip, Hostname: n.Name})
	}
	d := cfg.DHCP
	o.LeaseTime, o.LeaseFile = d.LeaseTime, d.LeaseFile
	if !d.Pool.IsZero() {
		o.Pool = d.Pool
	}
	if len(d.DNS) > 0 {
		o.DNS = slices.Clone(d.DNS)
	}
	o.NTP = slices.Clone(d.NTP)
	o.SearchDomains = slices.Clone(d.SearchDomains)
	return o, nil
}

// validate checks what Policy relies on.
func (o *Options) validate() error {
	if !o.Network.IsValid() || !o.Network.Addr().Is4() {
		return fmt.Errorf("dhcp: network %v is not an IPv4 prefix", o.Network)
	}
	if !o.ServerID.Is4() {
		return fmt.Errorf("dhcp: server identifier %v is not an IPv4 address", o.ServerID)
	}
	if o.LeaseTime < 0 || o.LeaseTime > 0xffffffff*time.Second {
		return fmt.Errorf("dhcp: lease time %v out of range", o.LeaseTime)
	}
	seenMAC := map[string]int{}
	seenIP := map[netip.Addr]int{}
	for i, r := range o.Reservations {
		if len(r.MAC) != 6 {
			return fmt.Errorf("dhcp: reservation %d: MAC %v is not a 6-byte Ethernet address", i, r.MAC)
		}
		if !o.Network.Contains(r.IP) {
			return fmt.Errorf("dhcp: reservation %s: %v is outside %v", r.MAC, r.IP, o.Network)
		}
		if j, dup := seenMAC[r.MAC.String()]; dup {
			return fmt.Errorf("dhcp: reservations %d and %d share MAC %s", j, i, r.MAC)
		}
		if j, dup := seenIP[r.IP]; dup {
			return fmt.Errorf("dhcp: reservations %d and %d share address %v", j, i, r.IP)
		}
		seenMAC[r.MAC.String()], seenIP[r.IP] = i, i
	}
	if !o.Pool.IsZero() {
		s, e := o.Pool.Start, o.Pool.End
		if !o.Network.Contains(s) || !o.Network.Contains(e) || e.Less(s) {
			return fmt.Errorf("dhcp: pool %v-%v must be an ascending range inside %v", s, e, o.Network)
		}
	}
	for _, d := range o.SearchDomains {
		if d == "" || strings.ContainsAny(d, " \t") {
			return fmt.Errorf("dhcp: search domain %q is not a DNS name", d)
		}
	}
	if slices.ContainsFunc(o.DNS, func(a netip.Addr) bool { return !a.Is4() }) {
		return fmt.Errorf("dhcp: DNS servers %v: IPv4 addresses only", o.DNS)
	}
	if slices.ContainsFunc(o.NTP, func(a netip.Addr) bool { return !a.Is4() }) {
		return fmt.Errorf("dhcp: NTP servers %v: IPv4 addresses only", o.NTP)
	}
	return nil
}
