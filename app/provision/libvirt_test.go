package provision

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"appliance/bootstrap"
	"appliance/internal/cluster"
	"appliance/platform"
	"appliance/platform/libvirt/libvirttest"
)

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

// shown is the MAC status prints for a row: the one the VM reports, else
// the configured one.
func shown(r StatusRow) string {
	if r.VM != nil && r.VM.MAC != nil {
		return r.VM.MAC.String()
	}
	return r.Machine.MAC.String()
}

// TestProvisionLibvirt runs provision end to end against a private
// libvirtd: plan, an apply killed with SIGKILL midway, the resumed apply,
// status, a no-op re-apply, destroy --bootstrap, and destroy back to the
// starting state, each with a session of its own as each command has.
func TestProvisionLibvirt(t *testing.T) {
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
	write := func(path, content string) {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, role := range []string{"bootstrap", "master", "worker"} {
		write(filepath.Join(assets, role+".ign"), fmt.Sprintf(`{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/role","contents":{"source":"data:,%s"}}]}}`, role))
	}
	write(filepath.Join(assets, "metadata.json"), fmt.Sprintf(`{"clusterName":"e2e","infraID":%q}`, infra))
	base := filepath.Join(dir, "rhcos.qcow2")
	libvirttest.QemuImg(t, "create", "-q", "-f", "qcow2", base, "64M")
	small := "{cpus: 1, memoryMiB: 512, diskGiB: 1}"
	cfgPath := filepath.Join(dir, "appliance.yaml")
	write(cfgPath, fmt.Sprintf(`
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
	ctx := context.Background()
	log := testLog(t)
	// run opens a session as a command does, hands it to fn, and closes it.
	run := func(fn func(*Session)) {
		t.Helper()
		s, err := Open(ctx, Options{Config: cfg, ConfigPath: cfgPath, Assets: assets, NeedAssets: true}, log)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		fn(s)
	}
	apply := func(s *Session, parallel int, rec *recorder) (*platform.Result, error) {
		return s.Apply(ctx, ApplyOptions{Parallel: parallel, Ignition: Ignition{Files: testFiles(testImageRef)}}, rec.emit)
	}

	run(func(s *Session) {
		rep, err := s.Plan(ctx)
		if err != nil {
			t.Fatalf("plan: %v", err)
		}
		counts := map[Action]int{}
		var worker1 *platform.Machine
		for _, it := range rep.Plan.Items {
			counts[it.Action]++
			if it.Machine.Name == infra+"-worker-1" {
				worker1 = &it.Machine
			}
		}
		if counts[ActionCreate] != 6 || counts[ActionComplete] != 0 || counts[ActionNone] != 0 {
			t.Errorf("plan: %v, want 6 to create, 0 to complete, 0 exist", counts)
		}
		if worker1 == nil || worker1.MAC.String() != cluster.DeriveMAC(cfg.Cluster, "worker-1").String() {
			t.Errorf("plan: worker-1's VM %+v, want %s-worker-1 with the derived MAC", worker1, infra)
		}
		if rep.Image != "local file "+base || rep.InfraID != infra {
			t.Errorf("plan: image %q, infra ID %q", rep.Image, rep.InfraID)
		}
	})

	// An apply killed as soon as it has begun its first VM.
	kill := applyProcess(t, cfgPath, assets, "")
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

	run(func(s *Session) {
		rec := &recorder{}
		res, err := apply(s, 4, rec)
		if err != nil {
			t.Fatalf("resumed apply: %v\n%v", err, rec.kinds())
		}
		if len(res.Started) != 6 {
			t.Errorf("resumed apply did not start all six: %+v", res)
		}
		if !rec.has(BuildEnd{Result: res}) {
			t.Errorf("resumed apply reported %v, without its result", rec.kinds())
		}
	})
	domsAfter, volsAfter := inventory(t, raw, pool)
	// Six node domains, the base image's marker, and the foreign one; per
	// node an overlay and an Ignition volume, plus the base image.
	if len(domsAfter) != 8 || len(volsAfter) != len(volsBefore)+13 {
		t.Errorf("after the resumed apply: domains %v (during the killed run: %v), volumes %v", domsAfter, domsMid, volsAfter)
	}

	// Each domain boots its role's asset with the appliance put in; the
	// asset files stay as the installer wrote them.
	for _, n := range cfg.Nodes {
		ign, err := os.ReadFile(filepath.Join(poolDir, infra+"-"+n.Name+".ign"))
		if err != nil || !bytes.Contains(ign, []byte(`"path":"/etc/role"`)) || !bytes.Contains(ign, []byte(`"path":"`+bootstrap.StaticPodPath+`"`)) {
			t.Errorf("%s's Ignition volume (%v) lacks the asset's file or the appliance's static pod:\n%.200s", n.Name, err, ign)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(assets, "master.ign")); bytes.Contains(b, []byte(bootstrap.StaticPodPath)) {
		t.Error("apply edited the asset master.ign in place")
	}

	run(func(s *Session) {
		rep, err := s.Status(ctx, 0)
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		for i, n := range cfg.Nodes {
			r := rep.Rows[i]
			if r.Machine.Node != n.Name || r.VM == nil || r.VM.Power != platform.PowerRunning || shown(r) != n.MAC.String() {
				t.Errorf("status for %s: %+v %+v; want running with MAC %s", n.Name, r.Machine, r.VM, n.MAC)
			}
		}
	})

	// The guests boot nothing (an empty disk), so no address ever shows:
	// waiting gives up with the rows and says so.
	run(func(s *Session) {
		rep, err := s.Status(ctx, time.Second)
		if err == nil || !strings.Contains(err.Error(), "not every VM reported an address within 1s") || rep == nil || len(rep.Rows) != 6 ||
			slices.ContainsFunc(rep.Rows, func(r StatusRow) bool { return r.VM == nil || r.VM.Power != platform.PowerRunning }) {
			t.Errorf("status --wait: %v %+v", err, rep)
		}
	})

	run(func(s *Session) {
		res, err := apply(s, 0, &recorder{})
		if err != nil || len(res.Created) != 0 || len(res.Completed) != 0 || len(res.Existing) != 6 || len(res.Started) != 0 {
			t.Errorf("second apply: %v %+v; want 0 created, 0 completed, 6 already there, 0 started", err, res)
		}
	})
	if doms, vols := inventory(t, raw, pool); !slices.Equal(doms, domsAfter) || !slices.Equal(vols, volsAfter) {
		t.Errorf("second apply changed the inventory: %v %v", doms, vols)
	}

	// destroy --bootstrap: the bootstrap domain and the two volumes it
	// owns go; the masters and workers keep running, the base image stays.
	run(func(s *Session) {
		rep, err := s.DestroyBootstrap(ctx)
		if err != nil || !slices.Contains(rep.Removed, "undefined domain "+infra+"-bootstrap") {
			t.Fatalf("destroy --bootstrap: %v %+v", err, rep)
		}
		doms, vols := inventory(t, raw, pool)
		if len(doms) != len(domsAfter)-1 || slices.Contains(doms, infra+"-bootstrap") || len(vols) != len(volsAfter)-2 ||
			slices.ContainsFunc(vols, func(v string) bool { return strings.Contains(v, "bootstrap") }) {
			t.Errorf("after destroy --bootstrap: domains %v volumes %v\n%v", doms, vols, rep.Removed)
		}
	})
	run(func(s *Session) {
		rep, err := s.Status(ctx, 0)
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		for i, n := range cfg.Nodes {
			r := rep.Rows[i]
			if n.Role == cluster.RoleBootstrap {
				if r.VM != nil {
					t.Errorf("status for %s after destroy --bootstrap: %+v, want absent", n.Name, r.VM)
				}
			} else if r.VM == nil || r.VM.Power != platform.PowerRunning {
				t.Errorf("status for %s after destroy --bootstrap: %+v, want running", n.Name, r.VM)
			}
		}
	})
	run(func(s *Session) {
		if rep, err := s.DestroyBootstrap(ctx); err != nil || len(rep.Removed) != 0 || !slices.Equal(rep.Nodes, []string{"bootstrap"}) || rep.InfraID != infra {
			t.Errorf("second destroy --bootstrap: %v %+v; want nothing removed of node bootstrap", err, rep)
		}
	})

	run(func(s *Session) {
		rep, err := s.Destroy(ctx)
		if err != nil {
			t.Fatalf("destroy: %v", err)
		}
		if doms, vols := inventory(t, raw, pool); !slices.Equal(doms, domsBefore) || !slices.Equal(vols, volsBefore) {
			t.Errorf("destroy left domains %v volumes %v; want %v %v\n%v", doms, vols, domsBefore, volsBefore, rep.Removed)
		}
	})
	run(func(s *Session) {
		if rep, err := s.Destroy(ctx); err != nil || len(rep.Removed) != 0 || rep.InfraID != infra || rep.NoAssets {
			t.Errorf("second destroy: %v %+v; want nothing carrying infra ID %s", err, rep, infra)
		}
	})
}
