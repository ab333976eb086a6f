package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// renderCmd runs `appliance render ARGS...` and returns its output and error.
func renderCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(selfExe(t), append([]string{"render"}, args...)...)
	cmd.Env = append(os.Environ(), envRunMain+"=1")
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// TestRenderCommand: the command writes the folder and lists it, runs again
// over its own folder, refuses someone else's, says what is missing, and
// warns when keepalived cannot be rendered.
func TestRenderCommand(t *testing.T) {
	cfg := writeDNSConfig(t, "") // no network.interface
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	for range 2 {
		got, err := renderCmd(t, "--config", cfg, "--out", out, "--log-format", "text")
		if err != nil {
			t.Fatalf("render: %v\n%s", err, got)
		}
		for _, f := range []string{"bind/named.conf", "bind/ocp4.example.com.zone", "dnsmasq/dnsmasq.conf", "haproxy/haproxy.cfg", "hosts"} {
			p := filepath.Join(out, f)
			if !strings.Contains(got, p) {
				t.Errorf("output does not list %s:\n%s", p, got)
			}
			if _, err := os.Stat(p); err != nil {
				t.Error(err)
			}
		}
		if !strings.Contains(got, "network.interface") || strings.Contains(got, "keepalived.conf") {
			t.Errorf("without an interface, want a warning naming network.interface and no keepalived file:\n%s", got)
		}
	}
	got, err := renderCmd(t, "--config", cfg, "--out", out, "--interface", "eth0")
	if err != nil || !strings.Contains(got, filepath.Join(out, "keepalived", "master", "keepalived.conf")) {
		t.Errorf("--interface eth0: %v\n%s", err, got)
	}

	foreign := filepath.Join(dir, "foreign")
	if err := os.MkdirAll(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(foreign, "named.conf"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := renderCmd(t, "--config", cfg, "--out", foreign); err == nil || !strings.Contains(got, "did not write") {
		t.Errorf("render over a foreign folder: %v\n%s", err, got)
	}
	if got, err := renderCmd(t, "--config", cfg); err == nil || !strings.Contains(got, "--out") {
		t.Errorf("render without --out: %v\n%s", err, got)
	}
	if got, err := renderCmd(t, "--out", out); err == nil || !strings.Contains(got, "--config") {
		t.Errorf("render without --config: %v\n%s", err, got)
	}
}
