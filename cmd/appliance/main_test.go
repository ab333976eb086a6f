package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The test binary doubles as the appliance binary, so a command's test can
// run it as a process of its own (its exit status, its output on a signal)
// without a separate build step. Whole-system tests, which run the shipped
// binary among network namespaces, are in e2e.
const envRunMain = "APPLIANCE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// selfExe is the path of this test binary.
func selfExe(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// writeFile writes content into a fresh file in t.TempDir.
func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := writeFileAt(p, content); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeFileAt(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }
