package netlab

import (
	"context"
	"net"
	"os"
)

// TB is the part of testing.TB the helpers below use. netlab takes it as
// an interface of its own so that the binary (which uses netlab for
// `appliance lab`) does not link the testing package; *testing.T and
// *testing.B satisfy it.
type TB interface {
	Helper()
	Cleanup(func())
	Failed() bool
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Skip(args ...any)
}

// RequireRoot skips t unless running as root; under CI (CI=true) it fails
// instead, so that root-only tests cannot silently stop running.
func RequireRoot(t TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("netlab: this test needs root, and CI=true forbids skipping it")
	}
	t.Skip("netlab: needs root")
}

// NewT builds a lab for a test: it requires root (see RequireRoot), fails
// the test if the lab cannot be built, and closes the lab when the test and
// its subtests end, even after a panic. If the test failed, the output of
// every process started through the lab is logged first.
func NewT(t TB, opts Options) *Lab {
	t.Helper()
	RequireRoot(t)
	l, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("netlab: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			l.logOutputs(t)
		}
		if err := l.Close(); err != nil {
			t.Errorf("netlab: close lab %s: %v", l.Prefix(), err)
		}
	})
	return l
}

// logOutputs logs the tail of each tracked process's output.
func (l *Lab) logOutputs(t TB) {
	l.mu.Lock()
	procs := append([]*Process(nil), l.procs...)
	l.mu.Unlock()
	for _, p := range procs {
		out := p.Output()
		if len(out) > 4096 {
			out = "..." + out[len(out)-4096:]
		}
		t.Logf("netlab: %s: %s (pid %d) output:\n%s", p.where, p.Cmd.String(), p.Pid(), out)
	}
}

// FreeLoopbackAddr returns a 127.0.0.1 port free for both UDP and TCP, for
// servers that listen on both at one address (":0" would give the two
// listeners different ports).
func FreeLoopbackAddr(t TB) string {
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
