// Command appliance is the one binary of the appliance: VIPs, and (in later
// subcommands) DNS, load balancing, DHCP and provisioning. Each subcommand
// lives in its own file and only parses flags, loads config and wires packages.
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
