package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

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

// inventory is every domain and volume a daemon holds.
func inventory(t *testing.T, l *golibvirt.Libvirt, pool string) (domains, volumes []string) {
	t.Helper()
	doms, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range doms {
		domains = append(domains, d.Name)
	}
	pl, err := l.StoragePoolLookupByName(pool)
	if err != nil {
		t.Fatal(err)
	}
	// A pool refuses a refresh while an upload runs, and for a moment
	// after a killed client's upload stream is torn down.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := l.StoragePoolRefresh(pl, 0)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	vols, _, err := l.StoragePoolListAllVolumes(pl, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		volumes = append(volumes, v.Name)
	}
	slices.Sort(domains)
	slices.Sort(volumes)
	return domains, volumes
}

// TestProvisionLibvirtCommand drives `appliance provision` end to end against
// a private libvirtd: plan, an apply killed with SIGKILL midway, the resumed
// apply, status, a no-op re-apply, and destroy back to the starting state.
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
	// Someone else's domain with a name like ours: destroy must leave it.
	foreign := infra + "-master-7"
	if _, err := raw.DomainDefineXML(fmt.Sprintf(`<domain type="qemu"><name>%s</name><memory>16384</memory><os><type>hvm</type></os></domain>`, foreign)); err != nil {
		t.Fatal(err)
	}
	domsBefore, volsBefore := inventory(t, raw, pool)

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

	// An apply killed as soon as it has begun its first VM.
	kill := exec.Command(selfExe(t), append([]string{"--log-format", "text"}, append(args, "apply", "--image", testImageRef)...)...)
	kill.Env = append(os.Environ(), envRunMain+"=1")
	var killOut bytes.Buffer
	kill.Stdout, kill.Stderr = &killOut, &killOut
	if err := kill.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		// Domains only: a pool refresh fails while an upload is running.
		all, _, err := raw.ConnectListAllDomains(1, 0)
		if err != nil {
			t.Fatal(err)
		}
		var doms []string
		for _, d := range all {
			doms = append(doms, d.Name)
		}
		if slices.ContainsFunc(doms, func(n string) bool {
			return strings.HasPrefix(n, infra+"-bootstrap") || strings.HasPrefix(n, infra+"-master-0")
		}) {
			killed = kill.Process.Signal(syscall.SIGKILL) == nil
			break
		}
	}
	werr := kill.Wait()
	t.Logf("first apply (killed=%v): %v\n%s", killed, werr, killOut.String())
	domsMid, volsMid := inventory(t, raw, pool)
	t.Logf("left by the killed apply: domains %v volumes %v", domsMid, volsMid)

	out, err = runCmd(t, append(args, "apply", "--image", testImageRef, "--parallel", "4")...)
	if err != nil {
		t.Fatalf("resumed apply: %v\n%s", err, out)
	}
	if !strings.Contains(out, "6 started") {
		t.Errorf("resumed apply did not start all six:\n%s", out)
	}
	domsAfter, volsAfter := inventory(t, raw, pool)
	// Six node domains, the base image's marker, and the foreign one; per
	// node an overlay and an Ignition volume, plus the base image.
	if len(domsAfter) != 8 || len(volsAfter) != len(volsBefore)+13 {
		t.Errorf("after the resumed apply: domains %v (during the killed run: %v), volumes %v", domsAfter, domsMid, volsAfter)
	}

	// Each domain boots its role's asset with the appliance put in
	// (--image); the asset files stay as the installer wrote them.
	for _, n := range cfg.Nodes {
		ign, err := os.ReadFile(filepath.Join(poolDir, infra+"-"+n.Name+".ign"))
		if err != nil || !bytes.Contains(ign, []byte(`"path":"/etc/role"`)) || !bytes.Contains(ign, []byte(`"path":"`+bootstrap.StaticPodPath+`"`)) {
			t.Errorf("%s's Ignition volume (%v) lacks the asset's file or the appliance's static pod:\n%.200s", n.Name, err, ign)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(assets, "master.ign")); bytes.Contains(b, []byte(bootstrap.StaticPodPath)) {
		t.Error("apply edited the asset master.ign in place")
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
	if doms, vols := inventory(t, raw, pool); !slices.Equal(doms, domsAfter) || !slices.Equal(vols, volsAfter) {
		t.Errorf("second apply changed the inventory: %v %v", doms, vols)
	}

	// destroy --bootstrap: the bootstrap domain and the two volumes it
	// owns go; the masters and workers keep running, the base image stays.
	out, err = runCmd(t, append(args, "destroy", "--bootstrap")...)
	if err != nil || !strings.Contains(out, "undefined domain "+infra+"-bootstrap") {
		t.Fatalf("destroy --bootstrap: %v\n%s", err, out)
	}
	doms, vols := inventory(t, raw, pool)
	if len(doms) != len(domsAfter)-1 || slices.Contains(doms, infra+"-bootstrap") || len(vols) != len(volsAfter)-2 ||
		slices.ContainsFunc(vols, func(v string) bool { return strings.Contains(v, "bootstrap") }) {
		t.Errorf("after destroy --bootstrap: domains %v volumes %v\n%s", doms, vols, out)
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
	if err != nil {
		t.Fatalf("destroy: %v\n%s", err, out)
	}
	if doms, vols := inventory(t, raw, pool); !slices.Equal(doms, domsBefore) || !slices.Equal(vols, volsBefore) {
		t.Errorf("destroy left domains %v volumes %v; want %v %v\n%s", doms, vols, domsBefore, volsBefore, out)
	}
	out, err = runCmd(t, append(args, "destroy")...)
	if err != nil || !strings.Contains(out, "nothing carries infra ID "+infra) {
		t.Errorf("second destroy: %v\n%s", err, out)
	}
}
