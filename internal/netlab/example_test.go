package netlab_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"

	"appliance/internal/netlab"
)

// ExampleNew builds two nodes on a bridge, runs a daemon on one and pings
// it from the other. Tests would use netlabtest.New(t, opts) instead, which
// skips without root and closes the lab when the test ends.
func ExampleNew() {
	ctx := context.Background()
	lab, err := netlab.New(ctx, netlab.Options{
		Nodes: 2,
		Name:  "demo",
		IPv6:  netip.MustParsePrefix("fd00:126::/64"),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer lab.Close() // kills what Start started, deletes the namespaces

	n0, n1 := lab.Nodes[0], lab.Nodes[1]
	capture, err := lab.HubStart(ctx, "tcpdump", "-n", "-i", lab.Bridge(), "vrrp")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer capture.Stop(0)

	if _, err := n1.Run(ctx, "ping", "-c", "1", n0.IPv6.Addr().String()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	_ = n0.LinkDown() // n0 loses carrier; n1 can no longer reach it
	_ = n0.LinkUp()
	fmt.Println(n0.Name, n0.IPv4, n0.MAC)
}
