package main

import (
	"github.com/spf13/cobra"

	"appliance/app/lab"
)

// The lab's stand-ins for what OpenShift runs next to the appliance; the
// lab starts them inside its nodes.

func newLabAPIServerCmd() *cobra.Command {
	var o lab.APIServerOptions
	cmd := &cobra.Command{
		Use:    "apiserver",
		Short:  "Stand-in apiserver for the lab: HTTPS /readyz (fails while --fail-file exists), /version, a watch-like /lab/stream",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lab.ServeAPIServer(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Listen, "listen", ":6443", "HTTPS listen address")
	cmd.Flags().StringVar(&o.Name, "name", "", "node name put in every answer, so the lab shows who answered")
	cmd.Flags().StringVar(&o.FailFile, "fail-file", "", "while this file exists /readyz answers 500, like an apiserver shutting down")
	cmd.Flags().StringVar(&o.Upstream, "upstream", "", "a real kube-apiserver (https://IP:port) to pass every other path to")
	return cmd
}

func newLabMCSCmd() *cobra.Command {
	var listen, name string
	cmd := &cobra.Command{
		Use:    "mcs",
		Short:  "Stand-in Machine Config Server for the lab: HTTPS /healthz and /config/<role>",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lab.ServeMCS(cmd.Context(), listen, name)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", ":22623", "HTTPS listen address")
	cmd.Flags().StringVar(&name, "name", "", "node name put in every Ignition config served")
	return cmd
}

func newLabRouterCmd() *cobra.Command {
	var o lab.RouterOptions
	cmd := &cobra.Command{
		Use:    "router",
		Short:  "Stand-in ingress router for the lab: readiness on :1936/healthz/ready, answers on :80 and :443",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lab.ServeRouter(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Name, "name", "", "node name put in every answer")
	cmd.Flags().StringVar(&o.Stats, "stats", ":1936", "HTTP listener of /healthz/ready, which the ingress VIP tracks")
	cmd.Flags().StringVar(&o.HTTP, "http", ":80", "HTTP listener")
	cmd.Flags().StringVar(&o.HTTPS, "https", ":443", "HTTPS listener")
	return cmd
}
