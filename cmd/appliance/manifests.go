package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"appliance/bootstrap"
)

func newManifestsCmd(g *globalFlags) *cobra.Command {
	var config, dir, image, runbook string
	cmd := &cobra.Command{
		Use:   "manifests",
		Short: "Write MachineConfigs that keep the appliance on masters and workers, and what cluster monitoring needs",
		Long: `Write the MachineConfig manifests DIR/openshift/99-appliance-master.yaml and
99-appliance-worker.yaml, carrying the same files as 'appliance ignition', so the
Machine Config Operator keeps them on every node through day-2 changes and
upgrades; DIR/openshift/99-appliance-node-reader.yaml, the ClusterRole and
ClusterRoleBinding appliance-node-reader that let the kubelets' credentials
(group system:nodes) get, list and watch Nodes, which 'appliance run' reads as
cluster members (since Kubernetes 1.34 the Node authorizer alone lets a kubelet
read its own Node only); DIR/openshift/99-appliance-namespace.yaml, the
namespace openshift-appliance where the static pods' mirror pods appear, watched
by cluster monitoring; DIR/openshift/99-appliance-monitoring.yaml: the
Service and ServiceMonitor through which cluster monitoring scrapes every node's
secure endpoint (admin.metricsPort), and the RBAC that lets its Prometheus get
/metrics and the kubelets' credentials review its token; and the alerts
99-appliance-prometheusrule.yaml (a PrometheusRule) and the console's dashboard
99-appliance-dashboard.yaml (a ConfigMap in openshift-config-managed); see the
README's Monitoring:

  openshift-install create manifests --dir DIR
  appliance manifests --config appliance.yaml --dir DIR --image REGISTRY/appliance@sha256:...
  openshift-install create ignition-configs --dir DIR`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, cfg, err := g.serviceStart("manifests", config)
			if err != nil {
				return err
			}
			if dir == "" {
				return fmt.Errorf("manifests: give --dir DIR, the installer's asset folder")
			}
			if err := bootstrap.CheckImage(image); err != nil {
				return fmt.Errorf("manifests: %w", err)
			}
			o := bootstrapOptions(cfg, image)
			o.RunbookBase = runbook
			written, err := bootstrap.WriteManifests(dir, cfg, o)
			for _, p := range written {
				fmt.Fprintln(cmd.OutOrStdout(), p)
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&config, "config", "", "appliance.yaml (or install-config.yaml) describing the cluster")
	fl.StringVar(&dir, "dir", "", "the installer's asset folder (manifests go to DIR/openshift/)")
	fl.StringVar(&image, "image", "", "the appliance image the nodes run, by digest (registry/appliance@sha256:...)")
	fl.StringVar(&runbook, "runbook-url", "", "where the alerts' runbook links point: the published README.md (default README.md#<alert>)")
	return cmd
}
