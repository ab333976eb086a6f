package bootstrap

import (
	"slices"
	"testing"

	"appliance/internal/cluster"
	"appliance/internal/nodeip"
)

// TestFilesPerRole: every role that runs the appliance gets the node IP
// hint file; the resolv files only where the role serves DNS; every path
// is one of OwnedPaths, so a second run replaces it.
func TestFilesPerRole(t *testing.T) {
	cfg := mustParse(t, `
cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDRs: [192.168.126.0/24, "fd00:126::/64"]
  apiVIPs: [192.168.126.5, "fd00:126::5"]
  ingressVIPs: [192.168.126.6, "fd00:126::6"]
`)
	o := testOptions()
	o.Services = func(r cluster.Role) RoleServices {
		return RoleServices{Runs: r != cluster.RoleWorker, DNS: r == cluster.RoleMaster}
	}
	paths := func(fs []File) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.Path)
			if !Owned(f.Path) {
				t.Errorf("%s is not in OwnedPaths", f.Path)
			}
		}
		return out
	}
	master, err := Files(cfg, cluster.RoleMaster, o)
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(master); !slices.Equal(got, OwnedPaths) {
		t.Errorf("master: %q, want every owned path %q", got, OwnedPaths)
	}
	boot, _ := Files(cfg, cluster.RoleBootstrap, o)
	if got, want := paths(boot), []string{StaticPodPath, NodeConfigPath, NodeIPHintPath}; !slices.Equal(got, want) {
		t.Errorf("bootstrap without DNS: %q, want %q", got, want)
	}
	if w, _ := Files(cfg, cluster.RoleWorker, o); len(w) != 0 {
		t.Errorf("a worker that runs nothing: %q", paths(w))
	}
	for _, f := range master {
		if f.Path != NodeIPHintPath {
			continue
		}
		h, err := nodeip.ParseHintFile(f.Contents)
		if err != nil || h.Var != nodeip.HintVar || !slices.Equal(h.Addrs, cfg.Network.NodeIPHints) || f.Mode != 0o644 {
			t.Errorf("hint file %+v %v (mode %#o), want %s=%v:\n%s", h, err, f.Mode, nodeip.HintVar, cfg.Network.NodeIPHints, f.Contents)
		}
		if want := `NODEIP_HINT="192.168.126.0 fd00:126::"`; !slices.Contains(lines(string(f.Contents)), want) {
			t.Errorf("no line %s:\n%s", want, f.Contents)
		}
	}
}
