package netlab

import (
	"context"
	"os"
	"testing"
)

// The package's own tests cannot import netlabtest (it imports netlab), so
// they keep these two small copies of its helpers.

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

func NewT(t testing.TB, opts Options) *Lab {
	t.Helper()
	RequireRoot(t)
	l, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("netlab: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range l.Processes() {
				t.Logf("netlab: %s: %s output:\n%s", p.Where(), p.Cmd.String(), p.Output())
			}
		}
		if err := l.Close(); err != nil {
			t.Errorf("netlab: close lab %s: %v", l.Prefix(), err)
		}
	})
	return l
}
