package netlab

import (
	"context"
	"os"
	"testing"
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

// NewT builds a lab for a test: it requires root (see RequireRoot), fails
// the test if the lab cannot be built, and closes the lab when the test and
// its subtests end, even after a panic. If the test failed, the output of
// every process started through the lab is logged first.
func NewT(t testing.TB, opts Options) *Lab {
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
func (l *Lab) logOutputs(t testing.TB) {
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
