// Package netlabtest holds the test helpers for netlab labs: skipping
// without root, building a lab that the test closes, a free loopback port.
// They live apart from netlab so that the binary, which uses netlab for
// `appliance lab`, never links them nor the testing package.
package netlabtest

import (
	"context"
	"net"
	"os"
	"testing"

	"appliance/internal/netlab"
)

// RequireRoot skips t unless running as root; under CI (CI=true) it fails
// instead, so that root-only tests cannot silently stop running.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("netlab: this test needs root, and CI=true forbids skipping it")
	}
	t.Skip("netlab: needs root")
}

// New builds a lab for a test: it requires root (see RequireRoot), fails
// the test if the lab cannot be built, and closes the lab when the test and
// its subtests end, even after a panic. If the test failed, the output of
// every process started through the lab is logged first.
func New(t testing.TB, opts netlab.Options) *netlab.Lab {
	t.Helper()
	RequireRoot(t)
	l, err := netlab.New(context.Background(), opts)
	if err != nil {
		t.Fatalf("netlab: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			LogOutputs(t, l)
		}
		if err := l.Close(); err != nil {
			t.Errorf("netlab: close lab %s: %v", l.Prefix(), err)
		}
	})
	return l
}

// LogOutputs logs the tail of the output of each process started through l.
func LogOutputs(t testing.TB, l *netlab.Lab) {
	t.Helper()
	for _, p := range l.Processes() {
		out := p.Output()
		if len(out) > 4096 {
			out = "..." + out[len(out)-4096:]
		}
		t.Logf("netlab: %s: %s (pid %d) output:\n%s", p.Where(), p.Cmd.String(), p.Pid(), out)
	}
}

// FreeLoopbackAddr returns a 127.0.0.1 port free for both UDP and TCP, for
// servers that listen on both at one address (":0" would give the two
// listeners different ports).
func FreeLoopbackAddr(t testing.TB) string {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		ln.Close()
		if err == nil {
			pc.Close()
			return ln.Addr().String()
		}
	}
	t.Fatal("netlab: no loopback port free for both UDP and TCP")
	return ""
}

// Run runs a command inside node n and fails t when it fails, with its
// output; it returns the output.
func Run(t testing.TB, n *netlab.Node, name string, args ...string) string {
	t.Helper()
	out, err := n.Run(context.Background(), name, args...)
	if err != nil {
		t.Fatalf("%s: %s %v: %v\n%s", n.Name, name, args, err, out)
	}
	return out
}
