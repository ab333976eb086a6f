package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"appliance/app/lab"
	"appliance/internal/cluster"
)

type labFlags struct {
	interval   time.Duration
	keep       bool
	kubeTools  string
	kubeAssets string
}

func newLabCmd(g *globalFlags) *cobra.Command {
	f := &labFlags{}
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Bring up a cluster in network namespaces and show the appliance at work (needs root)",
		Long: `Creates a cluster in network namespaces joined by a bridge (nothing in the host's
own network changes): a bootstrap node, three masters and two workers, each
running "appliance run" next to stand-ins for the apiserver, the Machine Config
Server and the ingress router. A client calls the API through its VIP the whole
time while the bootstrap holds the VIP, the masters become ready, the bootstrap
is torn down, a master dies and a worker joins on day 2; the lab prints what
happens and what the client measured. Everything is removed on exit, also on
Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return errors.New("lab: needs root (network namespaces and raw sockets)")
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("lab: %w", err)
			}
			_, err = lab.Run(cmd.Context(), lab.Options{
				Exe: exe, Out: cmd.OutOrStdout(), LogLevel: g.logLevel, LogFormat: "text",
				AdvertInterval: f.interval, Keep: f.keep,
				Kube: lab.KubeOptions{RunKubeconfig: runTakesKubeconfig(cmd), Tools: f.kubeTools, Assets: f.kubeAssets},
			})
			return err
		},
	}
	cmd.Flags().DurationVar(&f.interval, "advert-interval", cluster.DefaultAdvertInterval, "VRRP advert interval")
	cmd.Flags().BoolVar(&f.keep, "keep", false, "after the scenario, keep the lab up until Ctrl-C")
	cmd.Flags().StringVar(&f.kubeTools, "kube-tools", "../shared/tools/kube-apiserver",
		"folder of the kube-apiserver scripts (start.sh, stop.sh) for the day-2 worker's Node object; without them it joins through mDNS")
	cmd.Flags().StringVar(&f.kubeAssets, "kube-assets", os.Getenv("KUBEBUILDER_ASSETS"),
		"folder of the kube-apiserver, etcd and kubectl binaries (what the scripts' build.sh prints)")
	cmd.AddCommand(newLabAPIServerCmd(), newLabMCSCmd(), newLabRouterCmd())
	return cmd
}

// runTakesKubeconfig tells whether `appliance run` has the --kubeconfig
// flag, i.e. watches Node objects.
func runTakesKubeconfig(cmd *cobra.Command) bool {
	for _, c := range cmd.Root().Commands() {
		if c.Name() == "run" {
			return c.Flags().Lookup("kubeconfig") != nil
		}
	}
	return false
}
