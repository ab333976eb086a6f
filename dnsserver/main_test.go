package dnsserver

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives its tests: every
// reader and loop a service starts must be awaited when it stops.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// CoreDNS stops a forwarding proxy's connection manager only from the
		// proxy's finalizer (Proxy.Stop leaves it running), so it lingers
		// until a garbage collection after the server stopped.
		goleak.IgnoreTopFunction("github.com/coredns/coredns/plugin/pkg/proxy.(*Transport).connManager"),
		// netlab starts every child process from one thread that lives as
		// long as the test binary, so a child dies with the binary.
		goleak.IgnoreTopFunction("appliance/internal/netlab.StartCommand.func1.1"))
}
