package main

import (
	stdlog "log"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"appliance/app/node"
	"appliance/dnsserver"
	"appliance/internal/cluster"
	"appliance/internal/kubenodes"
	"appliance/internal/scrape"
	"appliance/lb"
)

type runFlags struct {
	config      string
	id          identityFlags
	adminListen string
	dnsListen   string
	apiListen   string
	mcsListen   string
	readyz      string
	kubeconfig  string
	dhcpLeases  string
	manifests   string
	metricsCert string
}

func newRunCmd(g *globalFlags) *cobra.Command {
	f := &runFlags{}
	d := lb.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run every service this node's role needs, in one process: the static pod",
		Long: `Run the node's services from the cluster config, on one live view of the cluster:

  appliance run --config /etc/appliance/appliance.yaml [--node master-0] [--role worker]

  bootstrap  API VIP, LB (API + MCS), DNS, mDNS, DHCP when dhcp.enabled
  master     API VIP, ingress VIP, LB (API + MCS), DNS, mDNS, DHCP when dhcp.enabled
  worker     ingress VIP, DNS, mDNS

The API VIP follows the LB (a node whose LB has no healthy backend steps
down), and on the bootstrap node also its own apiserver (when it stops
answering /readyz a master takes over); the ingress VIP follows the node's
router. SIGTERM hands the VIPs over first, then drains the LB, then stops DNS.

The node is --node, else the configured node owning a local address (never a
VIP), else the one named like the short host name, else, with --role (as the
static pod passes it), the short host name: a node that joins later. A
configured node keeps its configured role.

With the kubelet's kubeconfig (or --kubeconfig), the metrics are also served
to cluster monitoring on https://NODE-IP:<admin.metricsPort, 9448>/metrics,
with the kubelet's serving certificate (--metrics-cert), to callers the
Kubernetes API allows to get /metrics (TokenReview, SubjectAccessReview).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A wrong flag is named before anything is loaded.
			hopts, err := f.id.options()
			if err != nil {
				return err
			}
			log, cfg, err := g.serviceStart("run", f.config)
			if err != nil {
				return err
			}
			// The embedded DNS server logs through the standard logger.
			stdlog.SetFlags(0)
			stdlog.SetOutput(slog.NewLogLogger(log.Handler(), slog.LevelInfo).Writer())
			if cmd.Flags().Changed("dhcp-leases") {
				cfg.DHCP.LeaseFile = f.dhcpLeases
			}
			lo := lb.DefaultOptions()
			lo.API.Listen, lo.MCS.Listen = f.apiListen, f.mcsListen
			// CoreDNS's own metrics live in the default registry, which
			// already holds the Go and process collectors.
			reg, ok := prometheus.DefaultRegisterer.(*prometheus.Registry)
			if !ok {
				reg = newRegistry()
			}
			n, err := node.New(node.Options{
				Config:           cfg,
				Host:             hopts,
				AdminListen:      adminListen(cmd, f.adminListen, cfg),
				Registry:         reg,
				LB:               &lo,
				DNS:              dnsserver.Options{Listen: f.dnsListen},
				APIServerReadyz:  f.readyz,
				Kubeconfig:       kubenodes.Kubeconfig(f.kubeconfig),
				KubeletManifests: f.manifests,
				Version:          version,
				MetricsCert:      f.metricsCert,
			}, log)
			if err != nil {
				return err
			}
			return n.Run(cmd.Context())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "appliance.yaml (or install-config.yaml) describing the cluster")
	f.id.add(cmd)
	fl.StringVar(&f.adminListen, "admin-listen", cluster.DefaultAdminListen, "admin HTTP listener (/metrics, /status, /healthz, /readyz); default admin.listen")
	fl.StringVar(&f.dnsListen, "dns-listen", dnsserver.DefaultListen, "DNS listen address, host:port (UDP and TCP)")
	fl.StringVar(&f.apiListen, "api-listen", d.API.Listen, "API proxy listener (VIP:6443 is redirected here)")
	fl.StringVar(&f.mcsListen, "mcs-listen", d.MCS.Listen, "Machine Config Server proxy listener (VIP:22623 is redirected here)")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "watch the Kubernetes Nodes as members with this kubeconfig (default: the kubelet's, when present; it must be allowed to list and watch Nodes)")
	fl.StringVar(&f.readyz, "bootstrap-readyz", node.DefaultAPIServerReadyz, "the node's own apiserver readiness, which the bootstrap's API VIP follows (and a master's in keepalived-openshift mode)")
	fl.StringVar(&f.manifests, "kubelet-manifests", node.DefaultKubeletManifests, "the kubelet's static pod folder: run refuses to start next to OpenShift's own keepalived, haproxy or coredns pod there (\"\" skips the check)")
	fl.StringVar(&f.metricsCert, "metrics-cert", scrape.DefaultCertFile, "certificate chain and key (one PEM file, re-read when it changes) of the secure scrape endpoint on admin.metricsPort; default the kubelet's serving certificate")
	fl.StringVar(&f.dhcpLeases, "dhcp-leases", cluster.DefaultDHCPLeaseFile, "lease file of the DHCP pool when dhcp.enabled (default dhcp.leaseFile)")
	return cmd
}
