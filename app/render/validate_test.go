package render

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// need fails the test when a program the real-program tests use is missing
// (make test installs them).
func need(t *testing.T, progs ...string) {
	t.Helper()
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s is not installed (make test-deps installs it): %v", p, err)
		}
	}
}

// renderTo renders a test case with keepalived on eth0 (the interface of a
// netlab node) into a fresh folder, as `appliance render` does.
func renderTo(t *testing.T, name string) (string, Result) {
	t.Helper()
	cfg, opts := loadCase(t, name)
	opts.Interface = "eth0"
	res, err := Render(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	if err := WriteDir(out, res.Files); err != nil {
		t.Fatal(err)
	}
	return out, res
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestValidatorsAccept runs each program's own checker over what Render
// writes: named-checkconf (with the zones loaded) and named-checkzone,
// haproxy -c, dnsmasq --test and keepalived --config-test.
func TestValidatorsAccept(t *testing.T) {
	need(t, "named-checkconf", "named-checkzone", "haproxy", "dnsmasq", "keepalived")
	// keepalived checks that the interface exists, so it runs in a
	// namespace that has an eth0.
	lab := netlabtest.New(t, netlab.Options{Nodes: 1, Name: "rendert"})
	for _, name := range testCases {
		t.Run(name, func(t *testing.T) {
			out, res := renderTo(t, name)
			bind := filepath.Join(out, "bind")
			run(t, bind, "named-checkconf", "-z", "named.conf")
			zones, err := clusterZones(mustCfg(t, name))
			if err != nil {
				t.Fatal(err)
			}
			for _, z := range zones {
				o := run(t, bind, "named-checkzone", "-k", "fail", "-n", "fail", "-i", "full",
					strings.TrimSuffix(z.name, "."), zoneFileName(z.name))
				if !strings.Contains(o, "OK") {
					t.Errorf("named-checkzone %s: %s", z.name, o)
				}
			}
			run(t, out, "haproxy", "-c", "-q", "-f", filepath.Join(out, "haproxy", "haproxy.cfg"))
			run(t, out, "dnsmasq", "--test", "--conf-file="+filepath.Join(out, "dnsmasq", "dnsmasq.conf"))

			var n int
			for _, f := range res.Files {
				if !strings.HasPrefix(f.Path, "keepalived/") {
					continue
				}
				n++
				p := filepath.Join(out, f.Path)
				if _, err := os.Stat(p); err != nil {
					t.Fatal(err) // keepalived -t passes a missing file
				}
				o, err := lab.Nodes[0].Run(context.Background(), "keepalived", "--config-test", "-f", p)
				if err != nil || strings.Contains(o, "WARNING") {
					t.Errorf("keepalived --config-test -f %s: %v\n%s", f.Path, err, o)
				}
			}
			if n == 0 {
				t.Error("no keepalived file rendered")
			}
		})
	}
}
