package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"appliance/internal/cluster"
)

// globalFlags are the flags every subcommand shares.
type globalFlags struct {
	logLevel  string
	logFormat string
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "appliance",
		Short:         "Network services for a cluster that has none: VIPs, DNS, load balancing, DHCP",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "auto", "log format: text, json, or auto (text on a terminal, JSON otherwise)")
	// Every subcommand, in one list: what the binary can do reads here,
	// and a new one is added here (its flags and run live in its own file).
	root.AddCommand(
		// The node's services, one at a time or all together.
		newRunCmd(g),
		newVIPCmd(g),
		newDNSCmd(g),
		newLBCmd(g),
		newDHCPCmd(g),
		// Before and around an install.
		newConfigCmd(),
		newPreflightCmd(g),
		newIgnitionCmd(g),
		newManifestsCmd(g),
		newRenderCmd(g),
		newProvisionCmd(g),
		newImagesCmd(g),
		// A running appliance, and this binary.
		newStatusCmd(),
		newVersionCmd(),
		newLabCmd(g),
		newSoakCmd(g),
	)
	return root
}

// serviceStart is how every service subcommand begins: the logger, then the
// validated config (a missing --config is a usage error naming the service).
func (g *globalFlags) serviceStart(service, path string) (*slog.Logger, *cluster.Config, error) {
	log, err := g.logger()
	if err != nil {
		return nil, nil, err
	}
	if path == "" {
		return nil, nil, fmt.Errorf("%s: give --config appliance.yaml (or an installer install-config.yaml)", service)
	}
	cfg, err := cluster.Load(path)
	if err != nil {
		return nil, nil, err
	}
	return log, cfg, nil
}

// adminListen is the admin address: --admin-listen when given, else
// admin.listen from the config.
func adminListen(cmd *cobra.Command, flagValue string, cfg *cluster.Config) string {
	if cmd.Flags().Changed("admin-listen") || cfg.Admin.Listen == "" {
		return flagValue
	}
	return cfg.Admin.Listen
}

// logger builds the process logger from the global flags.
func (g *globalFlags) logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", g.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(g.logFormat) {
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "auto":
		if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
		}
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not one of text, json, auto", g.logFormat)
}
