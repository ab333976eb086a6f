package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"appliance/app/preflight"
	"appliance/app/provision"
	"appliance/internal/cluster"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Work with appliance.yaml"}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Validate an appliance.yaml or installer install-config.yaml and print the verdict",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := cluster.Load(args[0])
			if err != nil {
				return err
			}
			api, ingress := cfg.VRRP.APIVRID, cfg.VRRP.IngressVRID
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok: cluster %s, %d node(s), API VIPs %v (VRID %d), ingress VIPs %v (VRID %d), VRRP %s %s v%d every %s, pod networks %v\n",
				args[0], cfg.Cluster.Domain(), len(cfg.Nodes), cfg.Network.APIVIPs, api,
				cfg.Network.IngressVIPs, ingress, cfg.VRRP.Mode, cfg.VRRP.Transport, cfg.VRRP.Version, cfg.VRRP.AdvertInterval,
				cfg.Network.ClusterNetworks)
			if r := preflight.DecideOnPremStack(cfg); r.Status == preflight.StatusWarn {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", r.Message)
			}
			if p := cfg.Provision; p != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "provision: %d VM(s) on %s, %d at once\n", len(cfg.Nodes), provision.Where(p), p.Parallel)
			}
			return nil
		},
	})
	return cmd
}
