package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"appliance/bootstrap"
	"appliance/internal/cluster"
	"appliance/platform/libvirt/libvirttest"
)

// runCmd runs `appliance ARGS...` in-process and returns its output.
func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"--log-format", "text", "--log-level", "warn"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// TestProvisionLibvirtCommand drives `appliance provision` against a private
// libvirtd and reads what each subcommand prints: plan's table, apply's
// summary, status's lines, status --wait giving up, a no-op re-apply,
// destroy --bootstrap, and destroy. What the runs do to the platform (an
// apply killed midway and resumed, the inventory, what destroy leaves) is
// app/provision's TestProvisionLibvirt.
func TestProvisionLibvirtCommand(t *testing.T) {
	d := libvirttest.Start(t)
	raw, err := d.Conn("qemu:///system")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Disconnect()
	id := libvirttest.Uniq()
	pool, network, infra := "e2epool-"+id, "e2enet-"+id, "e2e"+id
	poolDir := d.Pool(t, raw, pool)
	d.Network(t, raw, network, "e2ebr"+id)

	dir := t.TempDir()
	assets := filepath.Join(dir, "assets")
	if err := os.Mkdir(assets, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"bootstrap", "master", "worker"} {
		writeFileAt(filepath.Join(assets, role+".ign"), fmt.Sprintf(`{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/role","contents":{"source":"data:,%s"}}]}}`, role))
	}
	writeFileAt(filepath.Join(assets, "metadata.json"), fmt.Sprintf(`{"clusterName":"e2e","infraID":%q}`, infra))
	base := filepath.Join(dir, "rhcos.qcow2")
	libvirttest.QemuImg(t, "create", "-q", "-f", "qcow2", base, "64M")
	small := "{cpus: 1, memoryMiB: 512, diskGiB: 1}"
	cfgPath := writeFile(t, "appliance.yaml", fmt.Sprintf(`
cluster: {name: e2e, baseDomain: example.test}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}
nodes:
- {name: bootstrap, role: bootstrap, ips: [192.168.126.9]}
- {name: master-0, role: master, ips: [192.168.126.10]}
- {name: master-1, role: master, ips: [192.168.126.11]}
- {name: master-2, role: master, ips: [192.168.126.12]}
- {name: worker-0, role: worker, ips: [192.168.126.20]}
- {name: worker-1, role: worker, ips: [192.168.126.21]}
provision:
  platform: libvirt
  parallel: 1
  image: {file: %s}
  sizes: {bootstrap: %s, master: %s, worker: %s}
  libvirt: {uri: "qemu:///system", socket: %s, pool: %s, network: %s, domainType: qemu}
`, base, small, small, small, d.Socket, pool, network))
	cfg, err := cluster.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"provision", "--config", cfgPath, "--assets", assets}

	out, err := runCmd(t, append(args, "plan")...)
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	t.Logf("plan:\n%s", out)
	for _, want := range []string{"6 to create, 0 to complete, 0 exist.", infra + "-worker-1", cluster.DeriveMAC(cfg.Cluster, "worker-1").String(), "local file " + base} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}

	out, err = runCmd(t, append(args, "apply", "--image", testImageRef, "--parallel", "4")...)
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	if !strings.Contains(out, "6 started") {
		t.Errorf("apply did not start all six:\n%s", out)
	}

	// Each domain boots its role's asset with the appliance put in
	// (--image, with the files `appliance ignition` writes).
	for _, n := range cfg.Nodes {
		ign, err := os.ReadFile(filepath.Join(poolDir, infra+"-"+n.Name+".ign"))
		if err != nil || !bytes.Contains(ign, []byte(`"path":"/etc/role"`)) || !bytes.Contains(ign, []byte(`"path":"`+bootstrap.StaticPodPath+`"`)) {
			t.Errorf("%s's Ignition volume (%v) lacks the asset's file or the appliance's static pod:\n%.200s", n.Name, err, ign)
		}
	}

	out, err = runCmd(t, append(args, "status")...)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	for _, n := range cfg.Nodes {
		line := ""
		for l := range strings.Lines(out) {
			if strings.HasPrefix(l, n.Name+" ") {
				line = l
			}
		}
		if !strings.Contains(line, "running") || !strings.Contains(line, n.MAC.String()) {
			t.Errorf("status for %s: %q; want running with MAC %s\n%s", n.Name, line, n.MAC, out)
		}
	}

	// The guests boot nothing (an empty disk), so no address ever shows:
	// --wait gives up with the table and says so.
	out, err = runCmd(t, append(args, "status", "--wait", "1s")...)
	if err == nil || !strings.Contains(err.Error(), "not every VM reported an address within 1s") || !strings.Contains(out, "running") {
		t.Errorf("status --wait: %v\n%s", err, out)
	}

	out, err = runCmd(t, append(args, "apply", "--image", testImageRef)...)
	if err != nil || !strings.Contains(out, "0 created, 0 completed, 6 already there, 0 started") {
		t.Errorf("second apply: %v\n%s", err, out)
	}

	// destroy --bootstrap: the bootstrap domain goes; the masters and
	// workers keep running.
	out, err = runCmd(t, append(args, "destroy", "--bootstrap")...)
	if err != nil || !strings.Contains(out, "removed undefined domain "+infra+"-bootstrap\n") {
		t.Fatalf("destroy --bootstrap: %v\n%s", err, out)
	}
	out, err = runCmd(t, append(args, "status")...)
	for _, n := range cfg.Nodes {
		line := ""
		for l := range strings.Lines(out) {
			if strings.HasPrefix(l, n.Name+" ") {
				line = l
			}
		}
		if want := "running"; n.Role == cluster.RoleBootstrap {
			want = "absent"
			if !strings.Contains(line, want) {
				t.Errorf("status for %s after destroy --bootstrap: %q, want %s", n.Name, line, want)
			}
		} else if !strings.Contains(line, want) {
			t.Errorf("status for %s after destroy --bootstrap: %q, want %s (%v)", n.Name, line, want, err)
		}
	}
	if out, err = runCmd(t, append(args, "destroy", "--bootstrap")...); err != nil || !strings.Contains(out, "no VM of bootstrap") {
		t.Errorf("second destroy --bootstrap: %v\n%s", err, out)
	}

	out, err = runCmd(t, append(args, "destroy")...)
	if err != nil || !strings.Contains(out, "removed undefined domain "+infra+"-master-0\n") {
		t.Fatalf("destroy: %v\n%s", err, out)
	}
	out, err = runCmd(t, append(args, "destroy")...)
	if err != nil || !strings.Contains(out, "nothing carries infra ID "+infra) {
		t.Errorf("second destroy: %v\n%s", err, out)
	}
	// Without --assets destroy knows only the cluster name, and says where
	// the infra ID apply used may have come from.
	out, err = runCmd(t, "provision", "--config", cfgPath, "destroy")
	if want := "nothing carries infra ID e2e on libvirt (qemu:///system, pool " + pool + ") (if apply read the infra ID from metadata.json, give --assets DIR)\n"; err != nil || out != want {
		t.Errorf("destroy without --assets: %v\n%q, want %q", err, out, want)
	}
}
