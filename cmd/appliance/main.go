// Command appliance is the one binary of the appliance: VIPs, DNS, load
// balancing, DHCP for a cluster's nodes, and the tools that put it on them
// and create them. root.go lists every subcommand; each lives in its own
// file and only parses flags, calls a composition (app/...) or a service,
// and prints.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"appliance/internal/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := service.Hint(newRootCmd().ExecuteContext(ctx))
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "appliance:", err)
		os.Exit(1)
	}
}
