package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"appliance/bootstrap"
	"appliance/internal/cluster"
	"appliance/lb"
)

const testImageRef = "registry.example.com/appliance@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// runBootstrapCmd runs `appliance ARGS...` in-process.
func runBootstrapCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

const exampleConfig = "../../internal/cluster/testdata/appliance.yaml"

// TestStaticPodArgsParse: the static pod's command line is one `appliance
// run` accepts, for every role: the real command parses it (with --help
// appended, so it stops after parsing instead of running the node).
func TestStaticPodArgsParse(t *testing.T) {
	cfg, err := cluster.Load(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []cluster.Role{cluster.RoleBootstrap, cluster.RoleMaster, cluster.RoleWorker} {
		pod, err := bootstrap.StaticPod(cfg, bootstrap.PodOptions{Image: testImageRef, Role: role, Drain: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		args := pod.Spec.Containers[0].Args
		out, err := runBootstrapCmd(t, append(args, "--help")...)
		if err != nil {
			t.Errorf("%s: `appliance %s` does not parse: %v", role, strings.Join(args, " "), err)
		}
		if !strings.Contains(out, "appliance run") {
			t.Errorf("%s: the args did not reach `appliance run`:\n%s", role, out)
		}
	}
	// The check can fail: a flag run does not know is refused.
	if _, err := runBootstrapCmd(t, "run", "--config", "x", "--no-such-flag", "--help"); err == nil {
		t.Error("an unknown flag parsed")
	}
}

// TestBootstrapWiring: the node files follow `appliance run`'s plan and the
// LB's drain.
func TestBootstrapWiring(t *testing.T) {
	cfg, err := cluster.Load(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	o := bootstrapOptions(cfg, testImageRef)
	if o.Drain != lb.DefaultOptions().DrainTimeout {
		t.Errorf("drain %s, the LB's is %s", o.Drain, lb.DefaultOptions().DrainTimeout)
	}
	for role, want := range map[cluster.Role]bootstrap.RoleServices{
		cluster.RoleBootstrap: {Runs: true, DNS: true},
		cluster.RoleMaster:    {Runs: true, DNS: true},
		cluster.RoleWorker:    {Runs: true, DNS: true}, // the ingress VIP and DNS
	} {
		if got := o.Services(role); got != want {
			t.Errorf("%s: %+v, want %+v", role, got, want)
		}
	}
	// Without VIPs to hold or DNS to serve, a worker runs nothing.
	off := *cfg
	off.DNS.Enabled, off.VRRP.Enabled = false, false
	if got := bootstrapOptions(&off, testImageRef).Services(cluster.RoleWorker); got.Runs {
		t.Errorf("worker with nothing to run: %+v", got)
	}
}

func TestIgnitionCmd(t *testing.T) {
	dir := t.TempDir()
	orig := map[string]string{
		"bootstrap.ign": `{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,hi"}}]}}`,
		"master.ign":    `{"ignition":{"config":{"merge":[{"source":"https://192.168.126.5:22623/config/master"}]},"version":"3.1.0"}}`,
	}
	for n, c := range orig {
		os.WriteFile(filepath.Join(dir, n), []byte(c), 0o600)
	}
	args := []string{"ignition", "--config", exampleConfig, "--assets", dir, "--image", testImageRef}
	out, err := runBootstrapCmd(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"bootstrap.ign: Ignition 3.2.0, 8 appliance files (bootstrap)", "master.ign: Ignition 3.1.0, 8 appliance files (master)", "bootstrap.ign.orig"} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not say %q:\n%s", want, out)
		}
	}
	once := map[string][]byte{}
	for n := range orig {
		once[n], _ = os.ReadFile(filepath.Join(dir, n))
	}
	// Twice gives what once gave; the originals stay the first ones.
	if out, err := runBootstrapCmd(t, args...); err != nil || strings.Contains(out, ".orig") {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	for n, c := range orig {
		twice, _ := os.ReadFile(filepath.Join(dir, n))
		if !bytes.Equal(once[n], twice) {
			t.Errorf("%s: a second run changed it", n)
		}
		if o, _ := os.ReadFile(filepath.Join(dir, n+".orig")); string(o) != c {
			t.Errorf("%s.orig: %s", n, o)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "worker.ign")); !os.IsNotExist(err) {
		t.Error("an absent worker.ign was created")
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"ignition", "--config", exampleConfig, "--assets", dir}, "--image"},
		{[]string{"ignition", "--config", exampleConfig, "--image", testImageRef}, "--assets"},
		{[]string{"ignition", "--config", exampleConfig, "--assets", t.TempDir(), "--image", testImageRef}, "create ignition-configs"},
	} {
		if _, err := runBootstrapCmd(t, bad.args...); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: error %v, want one naming %s", bad.args, err, bad.want)
		}
	}
}

func TestManifestsCmd(t *testing.T) {
	dir := t.TempDir()
	out, err := runBootstrapCmd(t, "manifests", "--config", exampleConfig, "--dir", dir, "--image", testImageRef)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// The MachineConfigs, and the RBAC that lets kubelets list Nodes.
	for _, name := range []string{"master", "worker", "node-reader"} {
		p := filepath.Join(dir, "openshift", "99-appliance-"+name+".yaml")
		if !strings.Contains(out, p) {
			t.Errorf("output does not name %s:\n%s", p, out)
		}
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
	}
}
