package node

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"appliance/dhcp"
	"appliance/dnsserver"
	"appliance/internal/admin"
	"appliance/internal/cluster"
	"appliance/internal/host"
	"appliance/internal/kubenodes"
	"appliance/internal/scrape"
	"appliance/internal/service"
	"appliance/lb"
	"appliance/vrrp"
)

// DefaultAPIServerReadyz is the node's own apiserver, tracked by the
// bootstrap's API VIP (and a master's in keepalived-openshift mode): it
// listens on every address of the node, loopback included.
const DefaultAPIServerReadyz = "https://127.0.0.1:6443/readyz"

// DefaultMCSHealthz is the node's own Machine Config Server, tracked by a
// master's API VIP in keepalived-openshift mode (MCO's chk_mcs): the
// address and path the LB checks its MCS backends on.
const DefaultMCSHealthz = "https://127.0.0.1:22623/healthz"

// Options configure a node's run.
type Options struct {
	Config *cluster.Config
	// Host says how to find this node (--node, --role, --interface).
	Host host.Options
	// AdminListen is the admin listener's address.
	AdminListen string
	// Registry holds every service's metrics; nil makes a new one.
	Registry *prometheus.Registry
	// LB is the load balancer's options before lb.FromCluster applies the
	// config's choices (balance, mcs, redirect); nil: lb.DefaultOptions().
	LB *lb.Options
	// DNS is the DNS server's options; MDNS is filled in from the config.
	DNS dnsserver.Options
	// APIServerReadyz is the node's own apiserver readiness; "" means
	// DefaultAPIServerReadyz.
	APIServerReadyz string
	// MCSHealthz is the node's own Machine Config Server health; "" means
	// DefaultMCSHealthz.
	MCSHealthz string
	// TrackInterval is how often the VIPs' tracks probe; 0: vrrp's default.
	TrackInterval time.Duration
	// Kubeconfig, when set, adds the Kubernetes Nodes as members (day-2
	// nodes get DNS names, join the LB pool, become VRRP peers); see
	// kubenodes.Kubeconfig for picking one.
	Kubeconfig string
	// KubeletManifests is the kubelet's static pod folder, checked for
	// OpenShift's own on-prem stack before anything starts (see
	// CheckOnPremStack); "" skips the check.
	KubeletManifests string
	// Version is the binary's version, reported in /status's node section:
	// which image a node runs, read without the container runtime (an
	// upgrade is done on a node when it reports the new one).
	Version string
	// KubeServer replaces the kubeconfig's server on the control plane, so
	// a node reads its members from its own apiserver, never through the VIP
	// it serves; "" means kubenodes.DefaultLocalServer.
	KubeServer string
	// MetricsCert is the secure scrape endpoint's certificate and key (one
	// PEM file); "" means scrape.DefaultCertFile, the kubelet's serving
	// certificate. The endpoint runs only with a Kubeconfig: without the
	// Kubernetes API it could authorise no caller.
	MetricsCert string
}

// Node is one node's services, built and ready to run.
type Node struct {
	cfg   *cluster.Config
	view  *host.View
	self  cluster.Node
	plan  Plan
	state *cluster.State
	host  *host.Host
	log   *slog.Logger
	reg   *prometheus.Registry
	admin string
	ver   string

	vips   *VIPs
	kinds  map[string]cluster.VIPKind // instance name → VIP kind
	lb     *lb.LB
	dns    *dnsserver.Server
	dhcp   *dhcp.Server
	nodes  *kubenodes.Watcher
	scrape *scrape.Server
}

// New identifies the node and builds the services its role runs.
func New(opts Options, log *slog.Logger) (*Node, error) {
	cfg := opts.Config
	// One Host decides who the node is (logged once) and then follows
	// where its addresses are; Run keeps this identity.
	h := host.New(cfg, opts.Host, "", log)
	view, err := h.Resolve()
	if err != nil {
		return nil, err
	}
	self, ok := cfg.NodeByName(view.Name)
	if !ok {
		self = cluster.Node{Name: view.Name, Role: view.Role}
	}
	if self.Role == "" {
		return nil, fmt.Errorf("run: node %s is not in nodes and has no role; add it to nodes or pass --role", view.Name)
	}
	plan := PlanFor(cfg, self.Role)
	// Before the interface: next to OpenShift's own stack the node must not
	// run, wherever its address is.
	if err := CheckOnPremStack(opts.KubeletManifests, plan); err != nil {
		return nil, err
	}
	if view.Interface == "" {
		return nil, fmt.Errorf("run: node %s: %s", view.Name, view.Problem)
	}
	n := &Node{cfg: cfg, view: view, self: self, plan: plan, state: cluster.NewState(cfg),
		log: log.With("node", view.Name), reg: opts.Registry, admin: opts.AdminListen, host: h, ver: opts.Version}
	if n.reg == nil {
		n.reg = prometheus.NewRegistry()
	}
	mreg, err := MetricsRegisterer(n.reg, self)
	if err != nil {
		return nil, err
	}

	if opts.Kubeconfig != "" {
		ko := kubenodes.Options{Kubeconfig: opts.Kubeconfig, Domain: cfg.Cluster.Domain()}
		if self.Role == cluster.RoleBootstrap || self.Role == cluster.RoleMaster {
			ko.LocalServer = opts.KubeServer
			if ko.LocalServer == "" {
				ko.LocalServer = kubenodes.DefaultLocalServer
			}
		}
		if n.nodes, err = kubenodes.New(n.state, ko, log); err != nil {
			return nil, fmt.Errorf("run: %w", err)
		}
		// The secure scrape endpoint reviews its callers with the same
		// credentials, through the same server.
		n.scrape, err = scrape.New(scrape.Options{
			Port: cfg.Admin.MetricsPort, Addrs: view.Addrs(), CertFile: opts.MetricsCert,
			Metrics:    promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{}),
			Kubeconfig: opts.Kubeconfig, LocalServer: ko.LocalServer, Registerer: mreg,
		}, log)
		if err != nil {
			return nil, fmt.Errorf("run: %w", err)
		}
	} else {
		log.Info("no kubeconfig: no Kubernetes Nodes as members, and no secure scrape endpoint (it could authorise no caller); /metrics stays on the admin listener")
	}
	if n.plan.LB {
		base := lb.DefaultOptions()
		if opts.LB != nil {
			base = *opts.LB
		}
		lo, err := lb.FromCluster(cfg, base)
		if err != nil {
			return nil, fmt.Errorf("run: %w", err)
		}
		// IPv6 VIP traffic goes to the node's own address, never the VIP
		// (lb.Options.Self), as the node's live view has it.
		lo.Self = func(v6 bool) (netip.Addr, bool) {
			v := n.host.View()
			if v == nil {
				v = n.view
			}
			return v.Addr(v6)
		}
		if n.lb, err = lb.New(cfg, n.state, lo, lb.NewMetrics(mreg), log); err != nil {
			return nil, fmt.Errorf("run: %w", err)
		}
	}
	if n.plan.APIVIP || n.plan.IngressVIP {
		if err := n.buildVIPs(opts, mreg); err != nil {
			return nil, err
		}
	}
	if n.plan.DNS {
		do := opts.DNS
		do.MDNS = dnsserver.MDNSOptions{Enabled: n.plan.MDNS, Host: n.host}
		if n.dns, err = dnsserver.New(cfg, n.state, do, log); err != nil {
			return nil, fmt.Errorf("run: %w", err)
		}
		for _, c := range n.dns.Collectors() {
			if err := mreg.Register(c); err != nil {
				return nil, fmt.Errorf("run: dns metrics: %w", err)
			}
		}
	}
	if n.plan.DHCP {
		do, err := dhcp.FromCluster(cfg)
		if err != nil {
			return nil, fmt.Errorf("run: %w", err)
		}
		do.Interface = view.Interface
		// Reservations are answered by every node alike; the pool by the
		// API VIP's holder alone, so two nodes never lease one address.
		do.ServePool = func() bool { return holdsAPIVIP(n.state.Snapshot()) }
		if n.dhcp, err = dhcp.New(do, dhcp.NewMetrics(mreg), log); err != nil {
			return nil, fmt.Errorf("run: %w", err)
		}
	}
	return n, nil
}

func (n *Node) buildVIPs(opts Options, reg prometheus.Registerer) error {
	cfgs := VRRPConfigs(n.cfg, n.self, n.plan, n.view.Interface, n.probes(opts))
	vrids := map[string]uint8{}
	kinds := map[string]cluster.VIPKind{}
	n.kinds = kinds
	for i := range cfgs {
		for j := range cfgs[i].Tracks {
			if opts.TrackInterval > 0 {
				cfgs[i].Tracks[j].Interval = opts.TrackInterval
			}
		}
		k, err := kindOf(cfgs[i].Name)
		if err != nil {
			return err
		}
		kinds[cfgs[i].Name], vrids[cfgs[i].Name] = k, cfgs[i].VRID
	}
	// Every instance's state goes into the cluster view: the DHCP pool and
	// /status read it there.
	onChange := func(s vrrp.Status) { n.state.SetVIP(vipStatus(kinds[s.Name], vrids[s.Name], s)) }
	var err error
	n.vips, err = NewVIPs(cfgs, vrrp.NewMetrics(reg), n.log, onChange)
	return err
}

// probes builds the checks the node's virtual routers track from the
// services it runs.
func (n *Node) probes(opts Options) Probes {
	var p Probes
	compat := n.cfg.VRRP.Mode == cluster.VRRPModeKeepalivedOpenShift
	if n.lb != nil {
		p.LB = func(vip netip.Addr) vrrp.Probe {
			return vrrp.FuncProbe(func(context.Context) error { return n.lb.ServingVIP(vip) })
		}
	}
	if n.self.Role == cluster.RoleBootstrap || (compat && n.self.Role == cluster.RoleMaster) {
		u := opts.APIServerReadyz
		if u == "" {
			u = DefaultAPIServerReadyz
		}
		p.APIServer = vrrp.HTTPProbe{URL: u, InsecureSkipVerify: true}
	}
	if n.plan.IngressVIP {
		p.IngressPort = vrrp.HTTPProbe{URL: n.cfg.VRRP.IngressHealthURL}
	}
	if !compat {
		return p
	}
	if n.self.Role == cluster.RoleMaster {
		u := opts.MCSHealthz
		if u == "" {
			u = DefaultMCSHealthz
		}
		p.MCS = vrrp.HTTPProbe{URL: u, InsecureSkipVerify: true}
	}
	if n.plan.IngressVIP {
		p.RouterAlive = vrrp.HTTPProbe{URL: RouterAliveURL(n.cfg.VRRP.IngressHealthURL)}
		if n.nodes != nil {
			// Without a kubeconfig the node cannot tell, and is scored as
			// a keepalived node without the default router.
			p.DefaultRouter = vrrp.FuncProbe(n.nodes.DefaultRouterHere(n.self.Name))
		}
	}
	return p
}

// RouterAliveURL is the router's liveness (MCO's chk_ingress: /healthz)
// beside its readiness URL (/healthz/ready): the same server with the
// path's "/ready" cut.
func RouterAliveURL(ready string) string {
	u, err := url.Parse(ready)
	if err != nil {
		return ready
	}
	u.Path = strings.TrimSuffix(u.Path, "/ready")
	return u.String()
}

// Plan is what this node runs.
func (n *Node) Plan() Plan { return n.plan }

// Stages are the node's services in their stop order: the VIPs hand over
// first (priority 0, gap-free), then the LB drains, then DNS and DHCP stop,
// then the node's live view.
func (n *Node) Stages() []service.Stage {
	var stages []service.Stage
	if n.vips != nil {
		stages = append(stages, service.Stage{n.vips})
	}
	if n.lb != nil {
		stages = append(stages, service.Stage{LBService(n.lb)})
	}
	var last service.Stage
	if n.dns != nil {
		last = append(last, DNSService(n.dns))
	}
	if n.dhcp != nil {
		last = append(last, DHCPService(n.dhcp))
	}
	if len(last) > 0 {
		stages = append(stages, last)
	}
	var sources service.Stage
	if n.vips != nil && n.cfg.Unicast() {
		sources = append(sources, service.Func{ID: "vrrp-peers", RunFunc: n.followPeers})
	}
	if n.nodes != nil {
		// Not part of /readyz: before the API exists (a master during the
		// install) the node must be ready on config and mDNS alone.
		sources = append(sources, service.Func{ID: n.nodes.Name(), RunFunc: n.nodes.Run, StatusFn: n.nodes.Status})
	}
	if n.scrape != nil {
		// Not part of /readyz either (Run lists its problem there as a
		// note): it cannot serve before the API and the kubelet's serving
		// certificate exist, which on a fresh cluster is the whole install.
		sources = append(sources, service.Func{ID: n.scrape.Name(), RunFunc: n.runScrape, StatusFn: n.scrape.Status})
	}
	moved := func(v *host.View) {
		if n.vips != nil {
			for _, in := range n.vips.Instances() {
				in.SetInterface(v.Interface)
			}
		}
		if n.lb != nil {
			n.lb.Kick() // its IPv6 target may have moved with the address
		}
		if n.dhcp != nil {
			if err := n.dhcp.SetInterface(v.Interface); err != nil {
				// It keeps serving where it was; the next move tries again.
				n.log.Error("DHCP cannot follow the node's address", "interface", v.Interface, "err", err)
			}
		}
	}
	return append(stages, append(sources, HostService(n.host, n.view.Interface, moved)))
}

// runScrape runs the secure scrape endpoint on the node's addresses as the
// node's live view has them.
func (n *Node) runScrape(ctx context.Context) error {
	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error {
		for v := range n.host.Subscribe(ctx) {
			n.scrape.SetAddrs(v.Addrs())
		}
		return nil
	})
	eg.Go(func() error { return n.scrape.Run(ctx) })
	return eg.Wait()
}

// followPeers keeps the unicast peers of every virtual router in step with
// the members: a node that joins (through the Kubernetes API, or mDNS once
// its claim passed dnsserver's checks) becomes a peer, one that leaves
// stops being one.
func (n *Node) followPeers(ctx context.Context) error {
	for snap := range n.state.Subscribe(ctx) {
		self := n.view.Addrs()
		if v := n.host.View(); v != nil {
			self = v.Addrs()
		}
		for _, in := range n.vips.Instances() {
			st := in.Status()
			if len(st.VIPs) == 0 {
				continue
			}
			in.SetUnicastPeers(unicastPeers(n.cfg, snap, n.kinds[st.Name], st.VIPs[0].Addr().Is6(), self))
		}
	}
	return nil
}

// Status is the "node" section of /status: which node this is and what
// it runs; `appliance status` reads it with this type. The fields are in
// their JSON names' order, the order encoding/json gave the map this
// section was before, so the section reads byte for byte as it did.
type Status struct {
	Name    string       `json:"name"`
	Plan    string       `json:"plan"` // Plan.String()
	Role    cluster.Role `json:"role"`
	Version string       `json:"version,omitempty"`
}

// Run runs the node's services behind one admin listener until ctx ends,
// then stops them in order.
func (n *Node) Run(ctx context.Context) error {
	n.log.Info("starting", "role", n.self.Role, "interface", n.view.Interface, "services", n.plan.String(), "version", n.ver)
	var notes func() error
	if n.scrape != nil {
		// Listed on /readyz without counting: the node's readiness says
		// whether it does its job on the network (a master's: whether its
		// LB has a healthy backend), which an unreachable API or a
		// certificate not issued yet does not change.
		notes = func() error {
			if err := n.scrape.Problem(); err != nil {
				return fmt.Errorf("%s: %w", n.scrape.Name(), err)
			}
			return nil
		}
	}
	return service.Run(ctx, n.log, service.Options{
		Admin: admin.Options{Listen: n.admin, Registry: n.reg, Notes: notes},
		Extra: map[string]func() any{
			"node":    func() any { return Status{Name: n.self.Name, Plan: n.plan.String(), Role: n.self.Role, Version: n.ver} },
			"members": func() any { return n.state.Snapshot().Members },
		},
	}, n.Stages()...)
}
