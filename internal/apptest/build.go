package apptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Build compiles cmd/appliance into a temporary directory of t with the
// Makefile's flags (static, CGO_ENABLED=0, -trimpath, stripped) and returns
// its path. A dynamically linked or unstripped build maps libc and a
// different file, so its RSS and start-up are not the shipped binary's.
func Build(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "appliance")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "appliance/cmd/appliance")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build appliance: %v\n%s", err, out)
	}
	return bin
}
