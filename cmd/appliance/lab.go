package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"appliance/app/lab"
	"appliance/bootstrap"
	"appliance/internal/cluster"
)

type labFlags struct {
	interval      time.Duration
	keep          bool
	kubeTools     string
	kubeAssets    string
	kubelet       bool
	kubeletTools  string
	kubeletAssets string
	kubeletImage  string
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
Ctrl-C.

With --kubelet every node runs a real kubelet (with containerd and runc) and the
appliance as its static pod, exactly as a cluster's nodes run it: the manifest
and node files 'appliance manifests' writes, the image 'make image' builds
(--kubelet-image). The kubelet tools must be built first (their build.sh, about
7 minutes the first time); the lab says how when they are not.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return errors.New("lab: needs root (network namespaces and raw sockets)")
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("lab: %w", err)
			}
			o := lab.Options{
				Exe: exe, Out: cmd.OutOrStdout(), LogLevel: g.logLevel, LogFormat: "text",
				AdvertInterval: f.interval, Keep: f.keep,
				Kube: lab.KubeOptions{RunKubeconfig: runTakesKubeconfig(cmd), Tools: f.kubeTools, Assets: f.kubeAssets},
			}
			if f.kubelet {
				o.Kubelet = &lab.KubeletOptions{Tools: f.kubeletTools, Assets: f.kubeletAssets, Image: f.kubeletImage, Files: nodeFiles}
			}
			_, err = lab.Run(cmd.Context(), o)
			return err
		},
	}
	cmd.Flags().DurationVar(&f.interval, "advert-interval", cluster.DefaultAdvertInterval, "VRRP advert interval")
	cmd.Flags().BoolVar(&f.keep, "keep", false, "after the scenario, keep the lab up until Ctrl-C")
	cmd.Flags().StringVar(&f.kubeTools, "kube-tools", "../shared/tools/kube-apiserver",
		"folder of the kube-apiserver scripts (start.sh, stop.sh) for the day-2 worker's Node object; without them it joins through mDNS")
	cmd.Flags().StringVar(&f.kubeAssets, "kube-assets", os.Getenv("KUBEBUILDER_ASSETS"),
		"folder of the kube-apiserver, etcd and kubectl binaries (what the scripts' build.sh prints)")
	cmd.Flags().BoolVar(&f.kubelet, "kubelet", false, "run every node's appliance through a real kubelet, as its static pod (needs the kubelet tools and the image)")
	cmd.Flags().StringVar(&f.kubeletTools, "kubelet-tools", "../shared/tools/kubelet", "folder of the kubelet scripts (start.sh, stop.sh, build.sh)")
	cmd.Flags().StringVar(&f.kubeletAssets, "kubelet-assets", os.Getenv("KUBELET_ASSETS"),
		"folder of the kubelet, containerd and crictl binaries (what the scripts' build.sh prints; default: its cache)")
	cmd.Flags().StringVar(&f.kubeletImage, "kubelet-image", "bin/appliance-image.tar", "the node image, an OCI archive as make image writes it")
	cmd.AddCommand(newLabAPIServerCmd(), newLabMCSCmd(), newLabRouterCmd())
	return cmd
}

// nodeFiles are the files a node of role is given, as `appliance manifests`
// and `appliance ignition` give them, by path.
func nodeFiles(cfg *cluster.Config, role cluster.Role, image string) (map[string][]byte, error) {
	files, err := bootstrap.Files(cfg, role, bootstrapOptions(cfg, image))
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(files))
	for _, f := range files {
		out[f.Path] = f.Contents
	}
	return out, nil
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
