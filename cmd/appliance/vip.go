package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/spf13/cobra"

	"appliance/app/node"
	"appliance/internal/admin"
	"appliance/internal/cluster"
	"appliance/internal/host"
	"appliance/internal/service"
	"appliance/vrrp"
)

type vipFlags struct {
	config       string
	id           identityFlags
	vips         []string
	vrid         uint8
	priority     uint8
	interval     time.Duration
	version      uint8
	peers        []string
	authPass     string
	noPreempt    bool
	preemptDelay time.Duration
	trackHTTP    []string
	trackTCP     []string
	adminListen  string
	name         string
}

func newVIPCmd(g *globalFlags) *cobra.Command {
	f := &vipFlags{}
	cmd := &cobra.Command{
		Use:   "vip",
		Short: "Hold virtual IPs with VRRP (v2/v3), failing over between nodes",
		Long: `Hold virtual IPs with VRRP. Either describe one virtual router with flags:

  appliance vip --interface eth0 --vip 192.168.126.5/24 --vrid 51 --priority 100

or run the API and ingress VIPs of a cluster from its config:

  appliance vip --config appliance.yaml [--node master-0]

With --config the node is found as appliance run finds it (see --node, --role
and --interface); with flags, --interface is the interface that holds the VIP.

SIGTERM hands the VIPs over at once (a priority-0 advert) and removes them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			var cfgs []vrrp.Config
			var follow *host.Host
			listen := f.adminListen
			if f.config != "" {
				cfgs, listen, follow, err = f.fromConfig(cmd, log)
			} else {
				cfgs, err = f.fromFlags()
			}
			if err != nil {
				return err
			}
			return runVIPs(cmd.Context(), cfgs, listen, follow, log)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "appliance.yaml (or install-config.yaml) describing the cluster's VIPs")
	f.id.add(cmd)
	fl.StringSliceVar(&f.vips, "vip", nil, "virtual IP with prefix length, e.g. 192.168.126.5/24 (repeatable, one family)")
	fl.Uint8Var(&f.vrid, "vrid", 0, "virtual router ID, 1..255")
	fl.Uint8Var(&f.priority, "priority", 100, "priority 1..255 (255: address owner)")
	fl.DurationVar(&f.interval, "advert-interval", cluster.DefaultAdvertInterval, "advertisement interval (v2: whole seconds)")
	fl.Uint8Var(&f.version, "vrrp-version", 3, "VRRP version, 2 or 3")
	fl.StringSliceVar(&f.peers, "unicast-peer", nil, "send adverts to this peer instead of multicast (repeatable)")
	fl.StringVar(&f.authPass, "auth-pass", "", "VRRPv2 simple password (at most 8 bytes)")
	fl.BoolVar(&f.noPreempt, "no-preempt", false, "never take over from a live master, even with a higher priority")
	fl.DurationVar(&f.preemptDelay, "preempt-delay", 0, "wait this long before preempting a live lower-priority master")
	fl.StringArrayVar(&f.trackHTTP, "track-http", nil, "URL:weight, e.g. https://127.0.0.1:6443/readyz:-50 (weight 0: failure means FAULT)")
	fl.StringArrayVar(&f.trackTCP, "track-tcp", nil, "HOST:PORT:weight")
	fl.StringVar(&f.adminListen, "admin-listen", "127.0.0.1:9447", "admin HTTP listener (/metrics, /status, /healthz, /readyz)")
	fl.StringVar(&f.name, "name", "", "instance name in logs and metrics (default vrid-N)")
	return cmd
}

func (f *vipFlags) tracks() ([]vrrp.TrackSpec, error) {
	var specs []vrrp.TrackSpec
	for _, s := range f.trackHTTP {
		t, err := vrrp.ParseTrackFlag("http", s)
		if err != nil {
			return nil, fmt.Errorf("--track-http %q: %w", s, err)
		}
		specs = append(specs, t)
	}
	for _, s := range f.trackTCP {
		t, err := vrrp.ParseTrackFlag("tcp", s)
		if err != nil {
			return nil, fmt.Errorf("--track-tcp %q: %w", s, err)
		}
		specs = append(specs, t)
	}
	return specs, nil
}

func (f *vipFlags) fromFlags() ([]vrrp.Config, error) {
	if f.id.iface == "" || len(f.vips) == 0 || f.vrid == 0 {
		return nil, errors.New("vip: give --interface, --vip and --vrid (or --config FILE)")
	}
	c := vrrp.Config{
		Name: f.name, Interface: f.id.iface, VRID: f.vrid, Version: f.version, Priority: f.priority,
		Interval: f.interval, Preempt: !f.noPreempt, PreemptDelay: f.preemptDelay, Accept: true,
		AuthPass: f.authPass,
	}
	if c.Name == "" {
		c.Name = fmt.Sprintf("vrid-%d", f.vrid)
	}
	for _, s := range f.vips {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("--vip %q: not an address with prefix length like 192.168.126.5/24", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		c.VIPs = append(c.VIPs, p)
	}
	for _, s := range f.peers {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("--unicast-peer %q: not an IP address", s)
		}
		c.UnicastPeers = append(c.UnicastPeers, a)
	}
	var err error
	if c.Tracks, err = f.tracks(); err != nil {
		return nil, err
	}
	return []vrrp.Config{c}, nil
}

// fromConfig builds the node's virtual routers from the cluster config. When
// no interface is pinned (--interface, network.interface) it also returns a
// Host that follows the node's address to whichever interface holds it.
func (f *vipFlags) fromConfig(cmd *cobra.Command, log *slog.Logger) ([]vrrp.Config, string, *host.Host, error) {
	hopts, err := f.id.options()
	if err != nil {
		return nil, "", nil, err
	}
	cfg, err := cluster.Load(f.config)
	if err != nil {
		return nil, "", nil, err
	}
	// One Host decides who the node is and, unpinned, follows its address.
	h := host.New(cfg, hopts, "", log)
	view, err := h.Resolve()
	if err != nil {
		return nil, "", nil, err
	}
	if view.Interface == "" {
		return nil, "", nil, fmt.Errorf("vip: %s", view.Problem)
	}
	self, ok := cfg.NodeByName(view.Name)
	if !ok {
		self = cluster.Node{Name: view.Name, Role: view.Role}
	}
	if self.Role == "" {
		return nil, "", nil, fmt.Errorf("vip: node %s is not in nodes and has no role; add it to nodes or pass --role", view.Name)
	}
	iface := view.Interface
	tracks, err := f.tracks()
	if err != nil {
		return nil, "", nil, err
	}
	// The same routers `appliance run` builds, every VIP kind the role takes
	// part in, tracking only what the flags say.
	out := node.VRRPConfigs(cfg, self, node.Plan{APIVIP: true, IngressVIP: true}, iface, node.Probes{})
	for i := range out {
		out[i].Tracks = tracks
	}
	if len(out) == 0 {
		return nil, "", nil, fmt.Errorf("vip: node %s (role %s) holds no VIP in %s", self.Name, self.Role, f.config)
	}
	var follow *host.Host
	if !view.Pinned {
		follow = h
	}
	return out, adminListen(cmd, f.adminListen, cfg), follow, nil
}

// runVIPs runs the instances and the admin listener until ctx ends. With
// follow, the instances move with the node's address to another interface.
func runVIPs(ctx context.Context, cfgs []vrrp.Config, listen string, follow *host.Host, log *slog.Logger) error {
	reg := newRegistry()
	vips, err := node.NewVIPs(cfgs, vrrp.NewMetrics(reg), log, nil)
	if err != nil {
		return err
	}
	stages := []service.Stage{{vips}}
	if follow != nil {
		stages = append(stages, service.Stage{node.HostService(follow, cfgs[0].Interface, func(v *host.View) {
			for _, in := range vips.Instances() {
				in.SetInterface(v.Interface)
			}
		})})
	}
	return service.Run(ctx, log, service.Options{Admin: admin.Options{Listen: listen, Registry: reg}}, stages...)
}
