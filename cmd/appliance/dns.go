package main

import (
	"fmt"
	stdlog "log"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"appliance/app/node"
	"appliance/dnsserver"
	"appliance/internal/admin"
	"appliance/internal/cluster"
	"appliance/internal/host"
	"appliance/internal/service"
)

type dnsFlags struct {
	config      string
	listen      string
	adminListen string
	resolvConf  string
	queryLog    bool
	mdns        bool
	id          identityFlags
}

func newDNSCmd(g *globalFlags) *cobra.Command {
	f := &dnsFlags{}
	cmd := &cobra.Command{
		Use:   "dns",
		Short: "Serve the cluster's DNS: api, api-int, *.apps, node names; forward the rest",
		Long: `Serve the cluster's DNS from its config:

  appliance dns --config appliance.yaml [--listen 127.0.0.1:53]

api and api-int answer with the API VIPs, *.apps with the ingress VIPs, node
names (short and under the cluster domain) with the node addresses, with PTR
records for all of them. Every other name goes to network.upstreamDNS, or to
the nameservers of NetworkManager's resolv.conf (else /etc/resolv.conf) minus
this node's own addresses, re-read when it changes.

Only mDNS needs to know which node this is: with it, the node is found as
appliance run finds it (see --node, --role and --interface).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A wrong flag is named before anything is loaded.
			hopts, err := f.id.options()
			if err != nil {
				return err
			}
			log, cfg, err := g.serviceStart("dns", f.config)
			if err != nil {
				return err
			}
			// The embedded server logs through the standard logger.
			stdlog.SetFlags(0)
			stdlog.SetOutput(slog.NewLogLogger(log.Handler(), slog.LevelInfo).Writer())

			state := cluster.NewState(cfg)
			mo := dnsserver.MDNSOptions{Enabled: cfg.DNS.MDNS || f.mdns, Node: hopts.Node, Interface: hopts.Interface, Role: hopts.Role}
			var stages []service.Stage
			if mo.Enabled {
				// Only mDNS needs to know which node this is: without it the
				// server runs on any machine.
				h := host.New(cfg, hopts, "", log)
				mo.Host = h
				stages = append(stages, service.Stage{service.Func{ID: "host", RunFunc: h.Run, StatusFn: func() any { return h.View() }}})
			}
			srv, err := dnsserver.New(cfg, state, dnsserver.Options{
				Listen: f.listen, ResolvConf: f.resolvConf, QueryLog: f.queryLog, MDNS: mo,
			}, log)
			if err != nil {
				return err
			}
			// CoreDNS's own metrics (requests, cache, forward) live in the
			// default registry, which already holds the Go and process collectors.
			reg, ok := prometheus.DefaultRegisterer.(*prometheus.Registry)
			if !ok {
				reg = prometheus.NewRegistry()
			}
			for _, c := range srv.Collectors() {
				if err := reg.Register(c); err != nil {
					return fmt.Errorf("dns: metrics: %w", err)
				}
			}
			listen := adminListen(cmd, f.adminListen, cfg)
			// DNS stops before the node's view it reads.
			stages = append([]service.Stage{{node.DNSService(srv)}}, stages...)
			return service.Run(cmd.Context(), log, service.Options{
				Admin: admin.Options{Listen: listen, Registry: reg},
				// Each member shows its Source (config, mdns, kubernetes); refused
				// mDNS claims are under dns.mdns.
				Extra: map[string]func() any{"members": func() any { return state.Snapshot().Members }},
			}, stages...)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "appliance.yaml (or install-config.yaml) describing the cluster")
	fl.StringVar(&f.listen, "listen", dnsserver.DefaultListen, "DNS listen address, host:port (UDP and TCP)")
	fl.StringVar(&f.adminListen, "admin-listen", cluster.DefaultAdminListen, "admin HTTP listener (/metrics, /status, /healthz, /readyz); default admin.listen from the config")
	fl.StringVar(&f.resolvConf, "resolv-conf", "", "resolv.conf to take upstreams from (default NetworkManager's when present, else /etc/resolv.conf)")
	fl.BoolVar(&f.queryLog, "query-log", false, "log every query")
	fl.BoolVar(&f.mdns, "mdns", false, "publish this node and discover the others with multicast DNS (default dns.mdns)")
	f.id.add(cmd)
	return cmd
}
