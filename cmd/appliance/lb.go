package main

import (
	"net/netip"

	"github.com/spf13/cobra"

	"appliance/app/node"
	"appliance/internal/admin"
	"appliance/internal/cluster"
	"appliance/internal/host"
	"appliance/internal/service"
	"appliance/lb"
)

type lbFlags struct {
	config      string
	id          identityFlags
	adminListen string
	apiListen   string
	mcsListen   string
	balance     string
	noRedirect  bool
	noMCS       bool
}

func newLBCmd(g *globalFlags) *cobra.Command {
	f := &lbFlags{}
	d := lb.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "lb",
		Short: "Load-balance the API (6443) and Machine Config Server (22623) across the control plane",
		Long: `Run the L4 load balancer for the cluster in --config:

  appliance lb --config appliance.yaml

Control-plane nodes are the backends (the bootstrap node only while no master is
healthy), checked with HTTPS GET /readyz (API) and /healthz (MCS). While a pool
has a healthy backend, nftables redirects API-VIP:6443 and :22623 to the proxies.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, cfg, err := g.serviceStart("lb", f.config)
			if err != nil {
				return err
			}
			base := lb.DefaultOptions()
			base.API.Listen, base.MCS.Listen = f.apiListen, f.mcsListen
			// The file decides (lb.FromCluster); a flag given on the command
			// line overrides it: --no-mcs and --no-redirect turn off what
			// the file leaves on, --balance replaces its algorithm.
			base.MCS.Disabled, base.Redirect = f.noMCS, !f.noRedirect
			opts, err := lb.FromCluster(cfg, base)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("balance") {
				opts.Balance = f.balance
			}
			// IPv6 VIP traffic goes to this machine's own address (the
			// kernel's IPv6 redirect would pick the VIP itself while held),
			// as internal/host has it: any machine on the machine network,
			// node or not, followed when the address moves.
			h := host.New(cfg, host.Options{Interface: f.id.iface, AnyMachine: true}, "", log)
			view, err := h.Resolve()
			if err != nil {
				return err
			}
			opts.Self = func(v6 bool) (netip.Addr, bool) { return h.View().Addr(v6) } // never nil once resolved
			listen := adminListen(cmd, f.adminListen, cfg)

			reg := newRegistry()
			balancer, err := lb.New(cfg, cluster.NewState(cfg), opts, lb.NewMetrics(reg), log)
			if err != nil {
				return err
			}
			// The LB drains before the view it reads stops.
			return service.Run(cmd.Context(), log, service.Options{Admin: admin.Options{Listen: listen, Registry: reg}},
				service.Stage{node.LBService(balancer)},
				service.Stage{node.HostService(h, view.Interface, func(*host.View) { balancer.Kick() })})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "appliance.yaml (or install-config.yaml) describing the cluster")
	f.id.addInterface(cmd)
	fl.StringVar(&f.adminListen, "admin-listen", "127.0.0.1:9447", "admin HTTP listener (/metrics, /status, /healthz, /readyz); default from the config")
	fl.StringVar(&f.apiListen, "api-listen", d.API.Listen, "API proxy listener (VIP:6443 is redirected here)")
	fl.StringVar(&f.mcsListen, "mcs-listen", d.MCS.Listen, "Machine Config Server proxy listener (VIP:22623 is redirected here)")
	fl.StringVar(&f.balance, "balance", d.Balance, "balancing: roundrobin or leastconn (default lb.balance)")
	fl.BoolVar(&f.noRedirect, "no-redirect", false, "do not install the nftables VIP redirect")
	fl.BoolVar(&f.noMCS, "no-mcs", false, "do not balance the Machine Config Server")
	return cmd
}
