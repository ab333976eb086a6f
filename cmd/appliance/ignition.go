package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"appliance/app/node"
	"appliance/bootstrap"
	"appliance/internal/cluster"
	"appliance/lb"
)

// bootstrapOptions ties the node files to what `appliance run` does: a role
// runs the static pod when its plan has any service (a worker runs DNS, and
// the ingress VIP when there is one), and resolves through it when it
// serves DNS; the grace period covers the LB's drain.
func bootstrapOptions(cfg *cluster.Config, image string) bootstrap.Options {
	return bootstrap.Options{
		Image: image,
		Drain: lb.DefaultOptions().DrainTimeout,
		Services: func(role cluster.Role) bootstrap.RoleServices {
			p := node.PlanFor(cfg, role)
			return bootstrap.RoleServices{
				Runs: p.APIVIP || p.IngressVIP || p.LB || p.DNS || p.DHCP,
				DNS:  p.DNS,
			}
		},
	}
}

func newIgnitionCmd(g *globalFlags) *cobra.Command {
	var config, assets, image string
	cmd := &cobra.Command{
		Use:   "ignition",
		Short: "Put the appliance into the installer's bootstrap.ign, master.ign and worker.ign",
		Long: `Edit the Ignition files written by 'openshift-install create ignition-configs' in place:

  appliance ignition --config appliance.yaml --assets DIR --image REGISTRY/appliance@sha256:...

Each of DIR/bootstrap.ign, master.ign and worker.ign that exists gets, for the
roles that run the appliance, the static pod ` + bootstrap.StaticPodPath + `,
the node's ` + bootstrap.NodeConfigPath + ` (0600), ` + bootstrap.NodeIPHintPath + `
(the kubelet takes the node's machine-network address), and where the role
serves DNS a NetworkManager dispatcher script and a oneshot unit that put the
node's own address first in /etc/resolv.conf, with a kubelet drop-in that waits
for them.
Pointer configs (master.ign, worker.ign) carry the files themselves, next to
their merge source and CA, which stay as they were. Each file keeps its
Ignition spec version; the first run keeps the originals as *.ign.orig, and
running again replaces the appliance's entries instead of adding more.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, cfg, err := g.serviceStart("ignition", config)
			if err != nil {
				return err
			}
			if assets == "" {
				return fmt.Errorf("ignition: give --assets DIR, the folder of 'openshift-install create ignition-configs'")
			}
			if err := bootstrap.CheckImage(image); err != nil {
				return fmt.Errorf("ignition: %w", err)
			}
			done, err := bootstrap.EditAssets(assets, cfg, bootstrapOptions(cfg, image))
			out := cmd.OutOrStdout()
			for _, e := range done {
				for _, w := range e.Warnings {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
				}
				what := fmt.Sprintf("%d appliance files", len(e.Added))
				if len(e.Added) == 0 {
					what = "no appliance files (the role runs nothing)"
				}
				fmt.Fprintf(out, "%s: Ignition %s, %s (%s)\n", e.File, e.Version, what, e.Role)
				if e.Orig != "" {
					fmt.Fprintf(out, "  original kept as %s\n", e.Orig)
				}
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&config, "config", "", "appliance.yaml (or install-config.yaml) describing the cluster")
	fl.StringVar(&assets, "assets", "", "the installer's asset folder holding bootstrap.ign, master.ign, worker.ign")
	fl.StringVar(&image, "image", "", "the appliance image the nodes run, by digest (registry/appliance@sha256:...)")
	return cmd
}
