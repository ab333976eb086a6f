package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"appliance/internal/cluster"
)

// globalFlags are the flags every subcommand shares, and the logger a
// command built from them.
type globalFlags struct {
	logLevel  string
	logFormat string

	log     *slog.Logger // nil until a command built one
	logJSON bool
}

func newRootCmd() *cobra.Command {
	root, _ := newRoot()
	return root
}

// newRoot is the root command and the flags its subcommands share.
func newRoot() (*cobra.Command, *globalFlags) {
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
	return root, g
}

// exitError reports the error the process exits with. A command that logs
// JSON (as `appliance run` does in its pod) reports it as its last JSON
// record, so the container's log stays one record per line to the end;
// otherwise, and before any logger exists (a usage error), as a plain
// line.
func (g *globalFlags) exitError(err error) {
	if g.log != nil && g.logJSON {
		g.log.Error("exiting", "err", err)
		return
	}
	fmt.Fprintln(os.Stderr, "appliance:", err)
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
	asJSON := false
	switch strings.ToLower(g.logFormat) {
	case "json":
		asJSON = true
	case "text":
	case "auto":
		fi, err := os.Stderr.Stat()
		asJSON = err != nil || fi.Mode()&os.ModeCharDevice == 0
	default:
		return nil, fmt.Errorf("--log-format: %q is not one of text, json, auto", g.logFormat)
	}
	g.logJSON = asJSON
	if asJSON {
		g.log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: readableDurations}))
	} else {
		g.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	return g.log, nil
}

// readableDurations writes durations in JSON records as the text handler
// does ("1.5s", "17ms"): slog's JSON handler would write nanoseconds, which
// nobody reads at a glance in a pod's log.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}
