// Command appliance is the one binary of the appliance: VIPs, DNS, load
// balancing, DHCP for a cluster's nodes, and the tools that put it on them
// and create them. root.go lists every subcommand; each lives in its own
// file and only parses flags, calls a composition (app/...) or a service,
// and prints.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"appliance/internal/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root, g := newRoot()
	err := service.Hint(root.ExecuteContext(ctx))
	stop()
	if err != nil {
		g.exitError(err)
		os.Exit(1)
	}
}
