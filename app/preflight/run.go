package preflight

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/host"
	"appliance/internal/nodeip"
)

// Defaults for Options.
const (
	DefaultTimeout    = 10 * time.Second
	DefaultProbeWait  = time.Second     // ARP/NDP probes and MTU echoes
	DefaultDHCPWait   = 5 * time.Second // dnsmasq offers only after 3 s, once its ping found the address free
	DefaultVRRPListen = 3 * time.Second // three adverts of a router at keepalived's 1 s default
	DefaultResolvConf = "/etc/resolv.conf"
)

// Options tune a run. The zero value is usable: every field has a default.
type Options struct {
	// Node, Role and Interface find this machine's node and interface as
	// every command does (--node, --role, --interface; see host.Who): a
	// machine that no node matches (the installer's) skips the node-only
	// checks.
	Node      string
	Role      cluster.Role
	Interface string
	// Hostname is this machine's name for finding the node; default os.Hostname.
	Hostname string
	// Timeout bounds the whole run; checks still running then warn.
	Timeout time.Duration
	// ProbeWait, DHCPWait and VRRPListen are how long each check waits for
	// answers; tests shorten them.
	ProbeWait, DHCPWait, VRRPListen time.Duration
	// Resolvers are the DNS servers to check through; default dhcp.dns from
	// the config (what the nodes are handed), else ResolvConf's.
	Resolvers []netip.AddrPort
	// ResolvConf is read when neither Resolvers nor dhcp.dns is set.
	ResolvConf string
	// Listens are the node's service sockets, for the port checks.
	Listens Listens
	// NodeIPConf and NodeIPPrimary are the node IP hint file and this
	// boot's pick; defaults DefaultNodeIPConf, DefaultNodeIPPrimary.
	NodeIPConf, NodeIPPrimary string
	// Log receives progress at debug level; default discards.
	Log *slog.Logger
}

func (o *Options) defaults() {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ProbeWait <= 0 {
		o.ProbeWait = DefaultProbeWait
	}
	if o.DHCPWait <= 0 {
		o.DHCPWait = DefaultDHCPWait
	}
	if o.VRRPListen <= 0 {
		o.VRRPListen = DefaultVRRPListen
	}
	if o.ResolvConf == "" {
		o.ResolvConf = DefaultResolvConf
	}
	if o.NodeIPConf == "" {
		o.NodeIPConf = DefaultNodeIPConf
	}
	if o.NodeIPPrimary == "" {
		o.NodeIPPrimary = DefaultNodeIPPrimary
	}
	if o.Hostname == "" {
		o.Hostname, _ = os.Hostname()
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// Run loads the config at path and runs every check, in a fixed order:
// config, placement, VIPs, DHCP, VRRP, DNS, ports, MTU, node IP. A config that does
// not load fails the first check and skips the rest.
func Run(ctx context.Context, path string, opts Options) []Result {
	opts.defaults()
	cfg, err := cluster.Load(path)
	first := DecideConfig(path, cfg, err)
	if err != nil {
		out := []Result{first}
		for _, id := range []string{IDPlacement, IDOnPremStack, IDVIPFree, IDDHCP, IDVRRP, IDDNS, IDPort, IDMTU, IDNodeIP} {
			out = append(out, skipped(id, "skipped: the config does not load (see check %s)", IDConfig))
		}
		return out
	}
	return append([]Result{first}, RunConfig(ctx, cfg, opts)...)
}

// RunConfig runs every check after the config one against a loaded config.
// The network checks run concurrently, so the run takes about as long as
// the longest listening window.
func RunConfig(ctx context.Context, cfg *cluster.Config, opts Options) []Result {
	opts.defaults()
	// Listening windows fit inside the run's bound, so a short --timeout
	// shortens them rather than cutting every check off mid-way.
	limit := opts.Timeout * 8 / 10
	opts.ProbeWait, opts.DHCPWait, opts.VRRPListen = min(opts.ProbeWait, limit), min(opts.DHCPWait, limit), min(opts.VRRPListen, limit)
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	log := opts.Log

	out := []Result{DecidePlacement(cfg), DecideOnPremStack(cfg)}
	hopts := host.Options{Node: opts.Node, Role: opts.Role, Interface: opts.Interface}
	links, lerr := host.ReadLinks()
	ifi, ifErr := segmentInterface(cfg, hopts, links, lerr)
	self, selfErr := findSelf(cfg, hopts, opts.Hostname, links, lerr, log)
	log.Debug("preflight: where", "interface", ifName(ifi), "interfaceErr", ifErr, "node", self, "nodeErr", selfErr)

	// Each group of checks fills its own slot; slots keep the output order
	// fixed whatever finishes first.
	groups := []func() []Result{
		func() []Result { return vipChecks(ctx, cfg, ifi, ifErr, links, opts) },
		func() []Result { return []Result{dhcpCheck(ctx, cfg, ifi, ifErr, opts)} },
		func() []Result { return []Result{vrrpCheck(ctx, cfg, ifi, ifErr, opts)} },
		func() []Result { return dnsChecks(ctx, cfg, opts) },
		func() []Result { return portChecks(ctx, cfg, self, selfErr, opts) },
		func() []Result { return []Result{mtuCheck(ctx, cfg, ifi, ifErr, self, selfErr, opts)} },
		func() []Result { return []Result{nodeIPCheck(cfg, self, selfErr, opts)} },
	}
	slots := make([][]Result, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Go(func() { slots[i] = g() })
	}
	wg.Wait()
	for _, s := range slots {
		out = append(out, s...)
	}
	return out
}

func ifName(ifi *net.Interface) string {
	if ifi == nil {
		return ""
	}
	return ifi.Name
}

// segmentInterface is the interface on the machine network, as host.Locate
// finds it: --interface, else network.interface, else the one holding a
// machine-network address.
func segmentInterface(cfg *cluster.Config, hopts host.Options, links []host.Link, lerr error) (*net.Interface, error) {
	if lerr != nil {
		return nil, lerr
	}
	place := host.Locate(cfg, hopts, links, "")
	switch {
	case place.Interface == "":
		return nil, fmt.Errorf("%s; run preflight on a machine on the machine network", place.Problem)
	case place.Index == 0:
		return nil, errors.New(place.Problem)
	}
	ifi, err := net.InterfaceByIndex(place.Index)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", place.Interface, err)
	}
	return ifi, nil
}

// findSelf is the node this machine is, as host.Who decides: a configured
// node, or one that joins later when --role says so. nil with the reason
// when it is none.
func findSelf(cfg *cluster.Config, hopts host.Options, hostname string, links []host.Link, lerr error, log *slog.Logger) (*cluster.Node, error) {
	if lerr != nil {
		return nil, lerr
	}
	id, err := host.Who(cfg, hopts, hostname, links)
	if err != nil {
		return nil, err
	}
	if id.Warning != "" {
		log.Warn(id.Warning, "node", id.Name)
	}
	if n, ok := cfg.NodeByName(id.Name); ok && id.Configured {
		return &n, nil
	}
	if id.Role == "" {
		// A config without nodes takes any host name; without a role it
		// is no node to check.
		return nil, fmt.Errorf("node %s is not in nodes and has no role; pass --role", id.Name)
	}
	return &cluster.Node{Name: id.Name, Role: id.Role}, nil
}

func vipChecks(ctx context.Context, cfg *cluster.Config, ifi *net.Interface, ifErr error, links []host.Link, opts Options) []Result {
	type vip struct {
		kind cluster.VIPKind
		addr netip.Addr
	}
	var vips []vip
	var addrs []netip.Addr
	for _, k := range []cluster.VIPKind{cluster.VIPAPI, cluster.VIPIngress} {
		for _, a := range cfg.VIPsFor(k) {
			vips = append(vips, vip{k, a})
			addrs = append(addrs, a)
		}
	}
	var out []Result
	if ifErr != nil {
		for _, v := range vips {
			out = append(out, skipped(IDVIPFree+"."+cluster.VIPName(v.kind, v.addr), "%s VIP %s not probed: %v", v.kind, v.addr, ifErr))
		}
		return out
	}
	answers, errs := ProbeVIPs(ctx, ifi, addrs, opts.ProbeWait)
	for _, v := range vips {
		out = append(out, DecideVIP(cfg, VIPObservation{
			Kind: v.kind, VIP: v.addr, Answers: answers[v.addr], Err: errs[v.addr],
			LocalIface: holderOf(links, v.addr),
		}))
	}
	return out
}

// holderOf names the local interface holding a, if any.
func holderOf(links []host.Link, a netip.Addr) string {
	for _, li := range links {
		for _, p := range li.Addrs {
			if p.Addr() == a {
				return li.Name
			}
		}
	}
	return ""
}

func dhcpCheck(ctx context.Context, cfg *cluster.Config, ifi *net.Interface, ifErr error, opts Options) Result {
	if ifErr != nil {
		return skipped(IDDHCP, "no DHCP DISCOVER sent: %v", ifErr)
	}
	mac := ThrowawayMAC()
	offers, err := DiscoverServers(ctx, ifi.Name, mac, opts.DHCPWait)
	return DecideDHCP(cfg, DHCPObservation{Iface: ifi.Name, MAC: mac, Wait: opts.DHCPWait, Offers: offers, Err: err})
}

func vrrpCheck(ctx context.Context, cfg *cluster.Config, ifi *net.Interface, ifErr error, opts Options) Result {
	if ifErr != nil {
		return skipped(IDVRRP, "did not listen for VRRP: %v", ifErr)
	}
	v6 := false
	for _, a := range append(cfg.VIPsFor(cluster.VIPAPI), cfg.VIPsFor(cluster.VIPIngress)...) {
		v6 = v6 || a.Is6()
	}
	ads, err := ListenVRRP(ctx, ifi, v6, opts.VRRPListen)
	return DecideVRRP(cfg, VRRPObservation{Iface: ifi.Name, Window: opts.VRRPListen, Adverts: ads, Err: err})
}

// resolver picks the DNS server the nodes will use: the one given, else
// the first that DHCP hands out (dhcp.dns), else this machine's.
func resolver(cfg *cluster.Config, opts Options) (netip.AddrPort, string, error) {
	if len(opts.Resolvers) > 0 {
		return opts.Resolvers[0], "--resolver", nil
	}
	if len(cfg.DHCP.DNS) > 0 {
		return netip.AddrPortFrom(cfg.DHCP.DNS[0], 53), "dhcp.dns", nil
	}
	rs, err := ResolversFrom(opts.ResolvConf)
	if err != nil {
		return netip.AddrPort{}, "", err
	}
	if len(rs) == 0 {
		return netip.AddrPort{}, "", fmt.Errorf("%s lists no nameserver", opts.ResolvConf)
	}
	return rs[0], opts.ResolvConf, nil
}

func dnsChecks(ctx context.Context, cfg *cluster.Config, opts Options) []Result {
	srv, from, err := resolver(cfg, opts)
	if err != nil {
		return []Result{skipped(IDDNS, "no resolver to check through: %v; pass --resolver IP", err)}
	}
	opts.Log.Debug("preflight: DNS", "resolver", srv, "from", from)
	dom := cfg.Cluster.Domain()
	var r [6]byte
	_, _ = rand.Read(r[:])
	apps := randomLabel("preflight-", r) + ".apps." + dom
	_, _ = rand.Read(r[:])
	stray := randomLabel("preflight-", r) + "." + dom

	api := LookupName(ctx, srv, "api."+dom)
	first := DecideResolver(from, api)
	if first.Status == StatusFail {
		return []Result{first, skipped(IDDNS, "names not checked: the resolver does not answer (see check %s)", first.ID)}
	}
	type job func() Result
	jobs := []job{
		func() Result { return first },
		func() Result { return DecideName(IDDNS+".api", api, cfg.Network.APIVIPs, "network.apiVIPs") },
		func() Result {
			return DecideName(IDDNS+".api-int", LookupName(ctx, srv, "api-int."+dom), cfg.Network.APIVIPs, "network.apiVIPs")
		},
		func() Result {
			return DecideName(IDDNS+".apps", LookupName(ctx, srv, apps), cfg.Network.IngressVIPs, "network.ingressVIPs, as *.apps."+dom)
		},
		func() Result { return DecideWildcard(IDDNS+".wildcard", dom, LookupName(ctx, srv, stray)) },
	}
	for _, n := range cfg.Nodes {
		if len(n.IPs) == 0 {
			continue
		}
		fqdn := n.Name + "." + dom
		jobs = append(jobs, func() Result {
			return DecideName(IDDNS+".node."+n.Name, LookupName(ctx, srv, fqdn), n.IPs, "the addresses of node "+n.Name)
		})
		for _, a := range n.IPs {
			id := IDDNS + ".ptr." + n.Name
			if len(n.IPs) > 1 {
				id += "-" + family(a)
			}
			jobs = append(jobs, func() Result { return DecidePTR(id, LookupPTR(ctx, srv, a), fqdn) })
		}
	}
	out := make([]Result, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() { out[i] = j() })
	}
	wg.Wait()
	return out
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "v4"
	}
	return "v6"
}

func portChecks(ctx context.Context, cfg *cluster.Config, self *cluster.Node, selfErr error, opts Options) []Result {
	if self == nil {
		if opts.Node != "" || opts.Role != "" { // a mistyped --node or --role must not pass as "not a node"
			return []Result{fail(IDPort, "not checked: %v", selfErr)}
		}
		return []Result{skipped(IDPort, "not checked: this machine is not one of the nodes (%v)", selfErr)}
	}
	l := opts.Listens
	if l.Admin == "" {
		l.Admin = cfg.Admin.Listen
	}
	if !cfg.LB.MCS {
		l.NoMCS = true
	}
	var out []Result
	for _, p := range NodePorts(self.Role, l) {
		out = append(out, DecidePort(TryBind(ctx, p)))
	}
	return out
}

func mtuCheck(ctx context.Context, cfg *cluster.Config, ifi *net.Interface, ifErr error, self *cluster.Node, selfErr error, opts Options) Result {
	switch {
	case !cfg.Network.Gateway.IsValid():
		return skipped(IDMTU, "no network.gateway to probe the path to")
	case ifErr != nil:
		return skipped(IDMTU, "path MTU not probed: %v", ifErr)
	case self == nil:
		return skipped(IDMTU, "path MTU not probed: this machine is not one of the nodes (%v)", selfErr)
	}
	sizes := ProbeSizes(ifi.MTU)
	answered, err := ProbePathMTU(ctx, ifi.Name, cfg.Network.Gateway, sizes, opts.ProbeWait)
	return DecideMTU(MTUObservation{Iface: ifi.Name, MTU: ifi.MTU, Gateway: cfg.Network.Gateway, Answered: answered, Err: err})
}

// nodeIPCheck predicts the kubelet's node IP from this node's links and
// routes and its hint file (else the config's hints, which `appliance
// ignition` writes there). On-prem platforms pass their VIPs to runtimecfg
// as well; they lie in the same machine networks, so the verdict holds.
func nodeIPCheck(cfg *cluster.Config, self *cluster.Node, selfErr error, opts Options) Result {
	if self == nil {
		if opts.Node != "" {
			return fail(IDNodeIP, "not checked: %v", selfErr)
		}
		return skipped(IDNodeIP, "not checked: the kubelet's node IP is chosen on a node, and this machine is not one of them (%v)", selfErr)
	}
	o := NodeIPObservation{Node: self.Name, Source: opts.NodeIPConf}
	switch b, err := os.ReadFile(opts.NodeIPConf); {
	case err == nil:
		h, perr := nodeip.ParseHintFile(b)
		o.Var, o.Hints, o.HintErr = h.Var, h.Addrs, perr
		if perr != nil {
			o.HintErr = fmt.Errorf("%s: %w", opts.NodeIPConf, perr)
		}
	case errors.Is(err, fs.ErrNotExist):
		o.Source, o.Hints = hintsFromConfig, cfg.Network.NodeIPHints
	default:
		o.Err = err
	}
	st, err := nodeip.Read(nil)
	if err != nil && o.Err == nil {
		o.Err = err
	}
	o.Choice = nodeip.Choose(withoutVIPs(st, cfg), o.Hints, preferIPv6(cfg))
	if b, err := os.ReadFile(opts.NodeIPPrimary); err == nil {
		o.Current, _ = netip.ParseAddr(strings.TrimSpace(string(b)))
	}
	opts.Log.Debug("preflight: node IP", "source", o.Source, "hints", o.Hints, "choice", o.Choice)
	return DecideNodeIP(cfg, o)
}
