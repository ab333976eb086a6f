package main

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/cobra"

	"appliance/app/node"
	"appliance/dhcp"
	"appliance/internal/admin"
	"appliance/internal/cluster"
	"appliance/internal/host"
	"appliance/internal/service"
)

type dhcpFlags struct {
	config      string
	id          identityFlags
	leases      string
	adminListen string
	leaseTime   time.Duration
	pool        string
	dns         []string
	ntp         []string
	search      []string
	noPool      bool
}

func newDHCPCmd(g *globalFlags) *cobra.Command {
	f := &dhcpFlags{}
	cmd := &cobra.Command{
		Use:   "dhcp",
		Short: "Serve DHCPv4 to the cluster's nodes: reservations, optional pool, crash-safe leases",
		Long: `Serve DHCPv4 on the machine network: every node with a MAC in the config gets
its address, host name, router, DNS and domain.

  appliance dhcp --config appliance.yaml [--interface eth0] [--pool 192.168.126.100-192.168.126.199]`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, cfg, err := g.serviceStart("dhcp", f.config)
			if err != nil {
				return err
			}
			opts, err := f.options(cfg, cmd.Flags().Changed)
			if err != nil {
				return err
			}
			listen := adminListen(cmd, f.adminListen, cfg)
			reg := newRegistry()
			srv, err := dhcp.New(opts, dhcp.NewMetrics(reg), log)
			if err != nil {
				return err
			}
			return service.Run(cmd.Context(), log, service.Options{Admin: admin.Options{Listen: listen, Registry: reg}},
				service.Stage{node.DHCPService(srv)})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "appliance.yaml (or install-config.yaml) describing the nodes")
	f.id.addInterface(cmd)
	fl.StringVar(&f.leases, "leases", cluster.DefaultDHCPLeaseFile, "lease file of the dynamic pool (default dhcp.leaseFile)")
	fl.StringVar(&f.adminListen, "admin-listen", cluster.DefaultAdminListen, "admin HTTP listener (/metrics, /status, /healthz, /readyz)")
	fl.DurationVar(&f.leaseTime, "lease-time", cluster.DefaultDHCPLeaseTime, "lease time (option 51; default dhcp.leaseTime)")
	fl.StringVar(&f.pool, "pool", "", "dynamic pool START-END for hosts without a reservation (default dhcp.pool: off)")
	fl.StringSliceVar(&f.dns, "dns", nil, "DNS servers (option 6; default dhcp.dns, else the masters' addresses)")
	fl.StringSliceVar(&f.ntp, "ntp", nil, "NTP servers (option 42; default dhcp.ntp: none)")
	fl.StringSliceVar(&f.search, "search", nil, "DNS search list (option 119; default dhcp.searchDomains: none)")
	fl.BoolVar(&f.noPool, "standby", false, "do not serve the pool (another server does); reservations are still answered")
	return cmd
}

// options builds the server options from the config's dhcp section; a flag
// given on the command line overrides its field.
func (f *dhcpFlags) options(cfg *cluster.Config, changed func(string) bool) (dhcp.Options, error) {
	opts, err := dhcp.FromCluster(cfg)
	if err != nil {
		return opts, err
	}
	opts.Interface = f.id.iface
	if opts.Interface == "" {
		opts.Interface = cfg.Network.Interface
	}
	if opts.Interface == "" {
		// Any machine on the machine network may serve, node or not.
		view, err := host.Resolve(cfg, host.Options{AnyMachine: true})
		if err != nil {
			return opts, fmt.Errorf("dhcp: %w", err)
		}
		if view.Interface == "" {
			return opts, fmt.Errorf("dhcp: %s", view.Problem)
		}
		opts.Interface = view.Interface
	}
	if changed("leases") {
		opts.LeaseFile = f.leases
	}
	if changed("lease-time") {
		opts.LeaseTime = f.leaseTime
	}
	if changed("pool") {
		if opts.Pool, err = parseRange(f.pool); err != nil {
			return opts, fmt.Errorf("--pool %q: %w", f.pool, err)
		}
	}
	if len(f.dns) > 0 {
		if opts.DNS, err = parseAddrs("--dns", f.dns); err != nil {
			return opts, err
		}
	}
	if changed("ntp") {
		if opts.NTP, err = parseAddrs("--ntp", f.ntp); err != nil {
			return opts, err
		}
	}
	if changed("search") {
		opts.SearchDomains = f.search
	}
	if f.noPool {
		opts.ServePool = func() bool { return false }
	}
	return opts, nil
}

func parseRange(s string) (cluster.Range, error) {
	for i := range len(s) {
		if s[i] != '-' {
			continue
		}
		a, err1 := netip.ParseAddr(s[:i])
		b, err2 := netip.ParseAddr(s[i+1:])
		if err1 == nil && err2 == nil && a.Is4() && b.Is4() {
			return cluster.Range{Start: a, End: b}, nil
		}
	}
	return cluster.Range{}, fmt.Errorf("not an IPv4 range like 192.168.126.100-192.168.126.199")
}

func parseAddrs(flag string, ss []string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, s := range ss {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			return nil, fmt.Errorf("%s %q: not an IPv4 address", flag, s)
		}
		out = append(out, a)
	}
	return out, nil
}
