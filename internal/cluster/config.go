package cluster

import (
	"net"
	"net/netip"
	"time"
)

// Role is what a node does in the cluster; it picks the services the node
// runs and its default VRRP priorities.
type Role string

// Node roles.
const (
	RoleBootstrap Role = "bootstrap"
	RoleMaster    Role = "master"
	RoleWorker    Role = "worker"
)

// VIPKind tells the two virtual IPs apart.
type VIPKind string

// VIP kinds.
const (
	VIPAPI     VIPKind = "api"
	VIPIngress VIPKind = "ingress"
)

// VRRP modes.
const (
	// VRRPModeNative is the appliance's own default: VRRPv3, fast adverts.
	VRRPModeNative = "native"
	// VRRPModeKeepalivedOpenShift speaks exactly what keepalived does on an
	// OpenShift on-prem cluster (VRRPv2, 1 s adverts, PASS auth
	// "<name>_api_vip", Fletcher-derived VRIDs), so nodes can move from
	// keepalived to the appliance one at a time.
	VRRPModeKeepalivedOpenShift = "keepalived-openshift"
)

// VRRP transports (vrrp.transport). vrrp.mode already names the protocol
// dialect, which is independent of how adverts travel: OpenShift's own
// keepalived runs unicast in the keepalived-openshift dialect.
const (
	// VRRPTransportUnicast sends adverts to the known members only and
	// accepts them only from those: a stranger on the segment can neither
	// take a VIP nor be told the cluster's priorities. The default, as
	// OpenShift's keepalived (ENABLE_UNICAST) runs.
	VRRPTransportUnicast = "unicast"
	// VRRPTransportMulticast sends adverts to 224.0.0.18 / ff02::12 and
	// hears every router on the segment.
	VRRPTransportMulticast = "multicast"
)

// OpenShift's default pod networks, used as network.clusterNetwork when a
// config gives none: the installer's default clusterNetwork, and the IPv6
// one of its dual-stack and IPv6 examples.
var (
	DefaultClusterNetworkV4 = netip.MustParsePrefix("10.128.0.0/14")
	DefaultClusterNetworkV6 = netip.MustParsePrefix("fd01::/48")
)

// Defaults applied by Parse.
const (
	// DefaultAdvertInterval is the native-mode VRRPv3 advertisement interval:
	// failover in about a third of a second instead of keepalived's ~3 s.
	DefaultAdvertInterval = 100 * time.Millisecond
	// CompatAdvertInterval is the interval in keepalived-openshift mode, and
	// the default for VRRPv2 (which cannot express less than a second).
	CompatAdvertInterval = time.Second
	// DefaultAdminListen keeps the admin endpoint off the network by default.
	DefaultAdminListen = "127.0.0.1:9447"
	// DefaultMetricsPort is the secure scrape endpoint's port on the node's
	// own addresses: in 9000-9999, the range OpenShift keeps for host-level
	// services, beside the admin listener's 9447, and used by none of
	// OpenShift's own host-network components (README: "The scrape
	// endpoint").
	DefaultMetricsPort = 9448
	// MaxUpstreamDNS is how many resolvers network.upstreamDNS may list:
	// the most CoreDNS's forward plugin takes in one stanza.
	MaxUpstreamDNS = 15
	// DefaultDNSPort is used for upstreamDNS entries given without a port.
	DefaultDNSPort = 53
	// DefaultDHCPLeaseTime is the lease time handed out (option 51).
	DefaultDHCPLeaseTime = time.Hour
	// DefaultDHCPLeaseFile keeps the dynamic pool's leases across restarts.
	DefaultDHCPLeaseFile = "/var/lib/appliance/dhcp-leases.json"
	// DefaultIngressHealthURL is the ingress router's readiness endpoint on
	// its node (OpenShift's router serves it on 1936).
	DefaultIngressHealthURL = "http://127.0.0.1:1936/healthz/ready"
)

// Config is the validated cluster model. Parse, ParseInstallConfig and Load
// are the only producers; everything in it has been checked, defaults are
// filled in, and services treat it as read-only.
type Config struct {
	Cluster Cluster
	Network Network
	Nodes   []Node
	VRRP    VRRP
	DHCP    DHCP
	LB      LB
	DNS     DNS
	Admin   Admin
	// Provision is nil unless the file has a provision section.
	Provision *Provision
	// Origin is set when the model was read from an installer
	// install-config.yaml; nil for an appliance.yaml. It is not part of
	// appliance.yaml and is never written to a node.
	Origin *InstallConfigOrigin
}

// InstallConfigOrigin is what an install-config says about the stack the
// installer and the Machine Config Operator deploy besides the appliance.
type InstallConfigOrigin struct {
	// Platform is the install-config's platform key, lower case
	// ("baremetal", "vsphere", ...).
	Platform string
	// UserManagedLB is platform.*.loadBalancer.type: UserManaged.
	UserManagedLB bool
}

// OnPremStack lists the static pods OpenShift's Machine Config Operator puts
// on every node of a cluster installed from this origin (an on-prem
// platform with VIPs): CoreDNS whenever the platform has API VIPs, keepalived
// and haproxy unless the load balancer is user-managed. Each would claim
// what the appliance serves (port 53, the VIPs and their VRIDs, 9445). Empty
// for an appliance.yaml and for platforms without VIPs.
func (o *InstallConfigOrigin) OnPremStack() []string {
	if o == nil {
		return nil
	}
	if _, onPrem := icPlatforms[o.Platform]; !onPrem {
		return nil
	}
	if o.UserManagedLB {
		return []string{"coredns"}
	}
	return []string{"keepalived", "haproxy", "coredns"}
}

// Cluster names the cluster.
type Cluster struct {
	Name       string // a DNS label, e.g. "ocp4"
	BaseDomain string // a DNS name, e.g. "example.com"
}

// Domain is the cluster domain, name.baseDomain, under which api, api-int and
// *.apps live.
func (c Cluster) Domain() string { return c.Name + "." + c.BaseDomain }

// Network describes the machine network the nodes and VIPs live on.
type Network struct {
	// MachineCIDRs holds one prefix per machine network (two when dual-stack).
	MachineCIDRs []netip.Prefix
	// Interface is the interface carrying the VIPs; "" means the one holding
	// an address inside MachineCIDRs, resolved at runtime by the caller.
	Interface string
	// Gateway is the machine network's router; zero when not set.
	Gateway netip.Addr
	// APIVIPs and IngressVIPs hold at most one address per family.
	APIVIPs     []netip.Addr
	IngressVIPs []netip.Addr
	// UpstreamDNS lists resolvers to forward to, in the order they are
	// tried; empty means the node's resolv.conf minus its own addresses
	// (decided by the DNS service).
	UpstreamDNS []netip.AddrPort
	// ClusterNetworks are the pod networks (an install-config's
	// networking.clusterNetwork): the DNS answers them, since the
	// cluster's own DNS pods forward through the node. Never empty after
	// Parse: OpenShift's defaults when not given.
	ClusterNetworks []netip.Prefix
	// NodeIPHints are the addresses written to
	// /etc/default/nodeip-configuration, one per family: OpenShift's
	// nodeip-configuration gives the kubelet the node's address on the
	// interface whose network holds a hint. Never empty after Parse: each
	// machine network's first address when not given.
	NodeIPHints []netip.Addr
}

// PrefixFor returns the machine network that contains a, e.g. to give a VIP
// the network's prefix length.
func (n Network) PrefixFor(a netip.Addr) (netip.Prefix, bool) {
	for _, p := range n.MachineCIDRs {
		if p.Contains(a) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// Node is one machine of the cluster as configured.
type Node struct {
	Name string // short host name, a DNS label
	Role Role
	MAC  net.HardwareAddr // nil when not configured
	IPs  []netip.Addr
}

// VRRP configures the virtual routers for the API and ingress VIPs.
type VRRP struct {
	// Enabled runs the VIPs in `appliance run` (default true).
	Enabled bool
	// IngressHealthURL is the ingress router's readiness, tracked by the
	// ingress VIP: a node whose router is not ready never holds it.
	IngressHealthURL string
	// Mode is VRRPModeNative or VRRPModeKeepalivedOpenShift.
	Mode string
	// Transport is VRRPTransportUnicast (default) or VRRPTransportMulticast.
	Transport string
	// Version is 2 or 3.
	Version int
	// AdvertInterval is whole seconds (1..255 s) for v2, or 10 ms steps
	// (10 ms..40.95 s) for v3.
	AdvertInterval time.Duration
	// Preempt lets a higher-priority backup take over from a lower master.
	Preempt bool
	// PreemptDelay holds off preemption after start-up.
	PreemptDelay time.Duration
	// APIVRID and IngressVRID are the virtual router IDs (1..255), derived
	// from the cluster name by DeriveVRIDs unless configured.
	APIVRID, IngressVRID uint8
	// AuthPass is the VRRPv2 simple-auth password (at most 8 bytes); empty
	// means no authentication. Use AuthPassFor, which knows compat mode.
	AuthPass string
	// UnicastPeers are peers besides the configured nodes (unicast
	// transport only): routers outside the config, e.g. keepalived nodes.
	UnicastPeers []netip.Addr
	// Priority overrides the role's default priority (1..254); 0 = default.
	// Use PriorityFor.
	Priority int
}

// DHCP configures the DHCP server's answers beyond what the nodes imply
// (reservations come from Nodes, router from Network.Gateway, domain from
// Cluster).
type DHCP struct {
	Enabled       bool          // serve DHCP in `appliance run` (default false)
	LeaseTime     time.Duration // option 51
	LeaseFile     string        // where pool leases are kept (reservations need none)
	Pool          Range         // dynamic pool for hosts without a reservation; zero: off
	DNS           []netip.Addr  // option 6; empty: the masters' addresses
	NTP           []netip.Addr  // option 42, sent only when set
	SearchDomains []string      // option 119, sent only when set
}

// Range is an inclusive range of IPv4 addresses.
type Range struct{ Start, End netip.Addr }

// IsZero reports whether the range is unset.
func (r Range) IsZero() bool { return !r.Start.IsValid() }

// Load-balancing algorithms (lb.balance).
const (
	LBRoundRobin = "roundrobin"
	LBLeastConn  = "leastconn"
)

// LB configures the API and Machine Config Server load balancer.
type LB struct {
	Enabled  bool   // run the LB in `appliance run` (default true)
	Balance  string // LBRoundRobin (default) or LBLeastConn
	MCS      bool   // balance the Machine Config Server too (default true)
	Redirect bool   // install the nftables VIP redirect (default true)
}

// DNS configures the cluster DNS service.
type DNS struct {
	Enabled bool // serve DNS in `appliance run` (default true)
	MDNS    bool // publish this node and learn the others with multicast DNS
	// AllowFrom lists client networks answered besides the machine networks
	// and loopback (e.g. a pod or management network); every other client
	// is refused, so the node is never an open resolver.
	AllowFrom []netip.Prefix
}

// Admin configures the admin HTTP listener and the secure scrape endpoint.
type Admin struct {
	Listen string // host:port
	// MetricsPort is the port of the secure scrape endpoint (/metrics over
	// TLS, for callers the Kubernetes API authorises) on the node's own
	// machine-network addresses; `appliance manifests` writes the same
	// port into the Service and ServiceMonitor.
	MetricsPort int
}

// DefaultPriority is a role's VRRP priority for a VIP, as OpenShift's
// keepalived uses them: the bootstrap node wins the API VIP while it exists,
// and workers (which run the routers) win the ingress VIP. 0 means the role
// does not take part in that virtual router.
func DefaultPriority(role Role, vip VIPKind) uint8 {
	switch vip {
	case VIPAPI:
		switch role {
		case RoleBootstrap:
			return 50
		case RoleMaster:
			return 40
		}
	case VIPIngress:
		switch role {
		case RoleMaster:
			return 20
		case RoleWorker:
			return 40
		}
	}
	return 0
}

// CompatPriority is a role's base priority in keepalived-openshift mode, as
// the Machine Config Operator's keepalived templates set them: the
// bootstrap's API router 70 (manifests/on-prem/keepalived.conf.tmpl), a
// master's API router 40, and every ingress router 20
// (templates/{master,worker}/00-*/on-prem/files/keepalived-keepalived.yaml).
// The tracked checks' weights come on top (app/node). 0 means the role
// does not take part.
func CompatPriority(role Role, vip VIPKind) uint8 {
	switch vip {
	case VIPAPI:
		switch role {
		case RoleBootstrap:
			return 70
		case RoleMaster:
			return 40
		}
	case VIPIngress:
		if role == RoleMaster || role == RoleWorker {
			return 20
		}
	}
	return 0
}

// PriorityFor is the priority a node of role uses for kind: the configured
// override when set, else the mode's base (DefaultPriority, or
// CompatPriority in keepalived-openshift mode). A role that does not take
// part stays out even with an override, so one setting cannot make a worker
// claim the API VIP.
func (c *Config) PriorityFor(role Role, kind VIPKind) uint8 {
	d := DefaultPriority(role, kind)
	if c.VRRP.Mode == VRRPModeKeepalivedOpenShift {
		d = CompatPriority(role, kind)
	}
	if d == 0 || c.VRRP.Priority == 0 {
		return d
	}
	return uint8(c.VRRP.Priority)
}

// Unicast reports whether the virtual routers advertise by unicast.
func (c *Config) Unicast() bool { return c.VRRP.Transport != VRRPTransportMulticast }

// compatAuthLen is how much of a PASS password VRRPv2 carries.
const compatAuthLen = 8

// AuthPassFor is the VRRPv2 password for kind's virtual router. In
// keepalived-openshift mode it is derived like keepalived's: the first 8 bytes
// of "<name>_api_vip" or "<name>_ingress_vip" (keepalived truncates longer
// passwords to 8). In native mode it is VRRP.AuthPass for both.
func (c *Config) AuthPassFor(kind VIPKind) string {
	if c.VRRP.Mode != VRRPModeKeepalivedOpenShift {
		return c.VRRP.AuthPass
	}
	p := c.Cluster.Name + "_" + string(kind) + "_vip"
	if len(p) > compatAuthLen {
		p = p[:compatAuthLen]
	}
	return p
}

// VRIDFor is the virtual router ID of kind.
func (c *Config) VRIDFor(kind VIPKind) uint8 {
	if kind == VIPIngress {
		return c.VRRP.IngressVRID
	}
	return c.VRRP.APIVRID
}

// VIPsFor returns the VIPs of kind (callers must not modify the slice).
func (c *Config) VIPsFor(kind VIPKind) []netip.Addr {
	if kind == VIPIngress {
		return c.Network.IngressVIPs
	}
	return c.Network.APIVIPs
}

// NodeByName finds a configured node by name.
func (c *Config) NodeByName(name string) (Node, bool) {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// NodeByAddr finds the configured node that owns address a.
func (c *Config) NodeByAddr(a netip.Addr) (Node, bool) {
	a = a.Unmap()
	for _, n := range c.Nodes {
		for _, ip := range n.IPs {
			if ip == a {
				return n, true
			}
		}
	}
	return Node{}, false
}

// VIPName is the conventional name of a VIP's virtual router in State and in
// logs: "api-v4", "ingress-v6".
func VIPName(kind VIPKind, vip netip.Addr) string {
	if vip.Is4() || vip.Is4In6() {
		return string(kind) + "-v4"
	}
	return string(kind) + "-v6"
}
