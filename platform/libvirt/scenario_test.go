package libvirt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"appliance/internal/cluster"
	"appliance/platform"
)

// applyAll is a stand-in for the engine: image, then every machine's
// Create with at most parallel at once, then Start (when start is set).
func applyAll(ctx context.Context, p platform.Provider, spec *platform.Spec, parallel int, start bool) error {
	if err := p.PrepareImage(ctx, spec, nil); err != nil {
		return err
	}
	run := func(f func(m platform.Machine) error) error {
		var mu sync.Mutex
		var errs []error
		sem := make(chan struct{}, parallel)
		var wg sync.WaitGroup
		for _, m := range spec.Machines {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := f(m); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	if err := run(func(m platform.Machine) error { return p.Create(ctx, spec, m, nil) }); err != nil {
		return err
	}
	if !start {
		return nil
	}
	return run(func(m platform.Machine) error { return p.Start(ctx, spec, m) })
}

// clusterSpec is bootstrap + 3 masters + workers tiny VMs.
func clusterSpec(infraID string, img platform.Image, workers int) *platform.Spec {
	spec := &platform.Spec{InfraID: infraID, ClusterName: "t", BaseDomain: "example.test", Image: img}
	add := func(node string, role cluster.Role) {
		i := len(spec.Machines)
		spec.Machines = append(spec.Machines, platform.Machine{
			Name: infraID + "-" + node, Node: node, Role: role, CPUs: 1, MemoryMiB: 128, DiskGiB: 1,
			MAC:      net.HardwareAddr{0x52, 0x54, 0x00, 0x7e, byte(i >> 8), byte(i)},
			Ignition: []byte(fmt.Sprintf(`{"ignition":{"version":"3.2.0"},"node":%q}`, node)), IgnitionSource: string(role) + ".ign",
		})
	}
	add("bootstrap", cluster.RoleBootstrap)
	for i := range 3 {
		add(fmt.Sprintf("master-%d", i), cluster.RoleMaster)
	}
	for i := range workers {
		add(fmt.Sprintf("worker-%d", i), cluster.RoleWorker)
	}
	return spec
}

// inventory is what a daemon holds: domain name → UUID, pool volumes.
type inventory struct {
	Domains map[string]string
	Volumes []string
}

func takeInventory(t *testing.T, l *golibvirt.Libvirt, pool string) inventory {
	t.Helper()
	doms, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	inv := inventory{Domains: map[string]string{}}
	for _, d := range doms {
		inv.Domains[d.Name] = uuidString(d.UUID)
	}
	pl, err := l.StoragePoolLookupByName(pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.StoragePoolRefresh(pl, 0); err != nil {
		t.Fatal(err)
	}
	vols, _, err := l.StoragePoolListAllVolumes(pl, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		inv.Volumes = append(inv.Volumes, v.Name)
	}
	sort.Strings(inv.Volumes)
	return inv
}

func (a inventory) String() string { return fmt.Sprintf("domains %v volumes %v", a.Domains, a.Volumes) }

func (a inventory) equal(b inventory) bool { return a.String() == b.String() }

func TestLibvirtScenario(t *testing.T) {
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	raw, err := d.Conn("qemu:///system")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Disconnect()

	id := uniq()
	poolName, netName, infraID := "aptpool-"+id, "aptnet-"+id, "apt"+id
	d.Pool(t, raw, poolName)
	pl, err := raw.StoragePoolLookupByName(poolName)
	if err != nil {
		t.Fatal(err)
	}
	// An isolated bridge (no <ip>, no <forward>, no dnsmasq), in the
	// daemon's own network namespace anyway.
	d.Network(t, raw, netName, "aptbr"+id)

	// Foreign resources with names like ours must survive destroy: a
	// domain without our mark, a domain of another infra ID sharing our
	// prefix, and volumes named like ours.
	foreignVol := func(name string) {
		v, err := raw.StorageVolCreateXML(pl, fmt.Sprintf(`<volume><name>%s</name><capacity>1048576</capacity><target><format type="raw"/></target></volume>`, name), 0)
		if err != nil {
			t.Fatal(err)
		}
		_ = v
	}
	foreignVol(infraID + "-master-0-extra.qcow2")
	foreignVol(infraID + "-base-foreign.qcow2")
	foreignVol(infraID + "x-master-0.qcow2")
	foreignDom := func(name, meta string) {
		doc := fmt.Sprintf(`<domain type="qemu"><name>%s</name><memory unit="MiB">16</memory><os><type arch="x86_64">hvm</type></os>%s</domain>`, name, meta)
		if _, err := raw.DomainDefineXML(doc); err != nil {
			t.Fatal(err)
		}
	}
	foreignDom(infraID+"-master-9", "")
	otherMark, _ := encodeMark(Mark{InfraID: infraID + "x", Kind: kindNode, Node: "master-0", Complete: true,
		Volumes: []MarkVolume{{Pool: poolName, Name: infraID + "x-master-0.qcow2", Purpose: purposeDisk}}})
	foreignDom(infraID+"x-master-0", "<metadata>"+otherMark+"</metadata>")
	before := takeInventory(t, raw, poolName)

	// A tiny qcow2, fully preallocated so that its upload spans several
	// stream packets (4 MiB each) and can be cut in the middle.
	imgPath := filepath.Join(d.Dir, "base.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", "-o", "preallocation=full", imgPath, "9M")
	st, err := os.Stat(imgPath)
	if err != nil {
		t.Fatal(err)
	}
	img := platform.Image{Path: imgPath, Format: "qcow2", SHA256: strings.Repeat("5a", 32), Size: st.Size(), Flavor: platform.FlavorQEMU}
	spec := clusterSpec(infraID, img, 2)

	var logBuf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logBuf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := New(ctx, Options{URI: "qemu:///system", Socket: d.Socket, Pool: poolName, Network: netName, DomainType: "qemu"}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	t0 := time.Now()
	phase := func(name string) { t.Logf("%-28s %v", name, time.Since(t0).Round(time.Millisecond)); t0 = time.Now() }
	defer phase("destroy")

	// 1. An upload cut midway is detected and redone.
	upCtx, upCancel := context.WithCancel(ctx)
	err = p.PrepareImage(upCtx, spec, func(done, total int64) {
		if done < total {
			upCancel()
		}
	})
	upCancel()
	if err == nil {
		t.Fatal("cut upload reported success")
	}
	if !strings.Contains(err.Error(), "interrupted after") {
		t.Fatalf("cut upload: %v", err)
	}
	_, mk, found, err := p.imageMarker(infraID)
	if err != nil || !found || len(mk.Volumes) != 1 || mk.Volumes[0].Complete {
		t.Fatalf("after a cut upload the marker should list one incomplete base volume: %+v %v %v", mk, found, err)
	}
	if v, ok, err := p.lookupVol(mk.Volumes[0].Name); err != nil || !ok {
		t.Fatalf("cut upload left no volume: %v", err)
	} else if _, _, phys, err := raw.StorageVolGetInfoFlags(v, uint32(golibvirt.StorageVolGetPhysical)); err != nil || phys >= uint64(img.Size) {
		t.Fatalf("cut upload: volume holds %d of %d bytes (%v)", phys, img.Size, err)
	} else {
		t.Logf("cut upload left %d of %d bytes", phys, img.Size)
	}
	var progressed int64
	if err := p.PrepareImage(ctx, spec, func(done, total int64) { progressed = done }); err != nil {
		t.Fatal(err)
	}
	if progressed != img.Size {
		t.Fatalf("re-upload progress ended at %d of %d", progressed, img.Size)
	}
	if got := downloadVol(t, d, raw, poolName, baseVolumeName(img, infraID)); !fileEqual(t, imgPath, got) {
		t.Fatal("base volume content differs from the image")
	}
	uploads := strings.Count(logBuf.String(), "uploading base image")
	if err := p.PrepareImage(ctx, spec, nil); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logBuf.String(), "uploading base image"); n != uploads {
		t.Fatal("a complete upload was not reused")
	}

	phase("image (cut, redo, reuse)")

	// 2. Creation killed at different steps on three machines.
	failAt := map[string]string{"master-1": "define", "master-2": "disk", "worker-0": "ignition"}
	p.hook = func(node, step string) error {
		if failAt[node] == step {
			return fmt.Errorf("killed after %s", step)
		}
		return nil
	}
	if err := applyAll(ctx, p, spec, 3, false); err == nil {
		t.Fatal("interrupted apply reported success")
	}
	vms, err := p.List(ctx, infraID)
	if err != nil {
		t.Fatal(err)
	}
	incomplete := 0
	for _, vm := range vms {
		if !vm.Complete {
			incomplete++
		}
	}
	if len(vms) != 6 || incomplete != 3 {
		t.Fatalf("after interruption want 6 VMs, 3 incomplete; got %+v", vms)
	}
	if err := p.Start(ctx, spec, spec.Machines[2]); err == nil || !strings.Contains(err.Error(), "not fully created") {
		t.Fatalf("starting an incomplete VM: %v", err)
	}
	p.hook = nil
	phase("interrupted apply")

	// 3. Re-run: finishes, creates nothing twice, starts everything (TCG).
	if err := applyAll(ctx, p, spec, 3, true); err != nil {
		t.Fatal(err)
	}
	applied := takeInventory(t, raw, poolName)
	if got, want := len(applied.Domains)-len(before.Domains), 7; got != want {
		t.Fatalf("apply added %d domains, want %d (6 nodes + image marker): %v", got, want, applied)
	}
	if got, want := len(applied.Volumes)-len(before.Volumes), 13; got != want {
		t.Fatalf("apply added %d volumes, want %d (6 disks + 6 ignition + base): %v", got, want, applied)
	}
	phase("resumed apply + start")
	checkDomains(t, d, raw, p, spec)

	vms, err = p.List(ctx, infraID)
	if err != nil {
		t.Fatal(err)
	}
	for i, vm := range vms {
		m := machineByName(spec, vm.Name)
		if vm.Power != platform.PowerRunning || !vm.Complete || vm.MAC.String() != m.MAC.String() || vm.Node != m.Node {
			t.Errorf("vm %d: %+v", i, vm)
		}
	}

	phase("checks + list")

	// 4. Apply again: nothing new, nothing redefined.
	if err := applyAll(ctx, p, spec, 3, true); err != nil {
		t.Fatal(err)
	}
	if again := takeInventory(t, raw, poolName); !again.equal(applied) {
		t.Fatalf("second apply changed the inventory:\n%v\n%v", applied, again)
	}

	phase("apply again")

	// 5. Destroy: back to exactly the state before; foreign things survive.
	lines, err := p.Destroy(ctx, infraID)
	if err != nil {
		t.Fatal(err)
	}
	if after := takeInventory(t, raw, poolName); !after.equal(before) {
		t.Fatalf("destroy left a different inventory:\nbefore %v\nafter  %v\n%s", before, after, strings.Join(lines, "\n"))
	}
	if want := 6 + 1 + 13 + 6; len(lines) != want { // stopped, undefined, deleted
		t.Errorf("destroy reported %d lines, want %d:\n%s", len(lines), want, strings.Join(lines, "\n"))
	}
	if lines, err := p.Destroy(ctx, infraID); err != nil || len(lines) != 0 {
		t.Fatalf("second destroy: %v %v", lines, err)
	}
	if procs := qemuCount(d); procs != 0 {
		t.Errorf("%d qemu processes left after destroy", procs)
	}
}

// checkDomains reads back each domain's XML and volumes.
func checkDomains(t *testing.T, d *testDaemon, raw *golibvirt.Libvirt, p *Provider, spec *platform.Spec) {
	t.Helper()
	basePath := filepath.Join(p.pool.Path, baseVolumeName(spec.Image, spec.InfraID))
	for _, m := range spec.Machines {
		dom, err := raw.DomainLookupByName(m.Name)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := raw.DomainGetXMLDesc(dom, 0)
		if err != nil {
			t.Fatal(err)
		}
		var dx libvirtxml.Domain
		if err := dx.Unmarshal(doc); err != nil {
			t.Fatal(err)
		}
		if got := dx.Devices.Interfaces[0].MAC.Address; got != m.MAC.String() {
			t.Errorf("%s: MAC %s, want %s", m.Name, got, m.MAC)
		}
		if s := dx.Devices.Interfaces[0].Source; s.Network == nil || s.Network.Network != p.opts.Network {
			t.Errorf("%s: NIC not on network %s", m.Name, p.opts.Network)
		}
		disk := dx.Devices.Disks[0]
		if disk.Source.Volume == nil || disk.Source.Volume.Volume != m.Name+".qcow2" || disk.Target.Bus != "virtio" {
			t.Errorf("%s: disk %+v", m.Name, disk.Source)
		}
		ign := filepath.Join(p.pool.Path, m.Name+".ign")
		if len(dx.SysInfo) != 1 || dx.SysInfo[0].FWCfg == nil || dx.SysInfo[0].FWCfg.Entry[0].Name != IgnitionFWCfgKey || dx.SysInfo[0].FWCfg.Entry[0].File != ign {
			t.Errorf("%s: fw_cfg wiring: %+v", m.Name, dx.SysInfo)
		}
		if len(dx.Devices.Serials) == 0 || len(dx.Devices.Consoles) == 0 {
			t.Errorf("%s: no serial console", m.Name)
		}
		// The disk is an overlay on the base image, DiskGiB large.
		pl, _ := raw.StoragePoolLookupByName(p.pool.Name)
		v, err := raw.StorageVolLookupByName(pl, m.Name+".qcow2")
		if err != nil {
			t.Fatal(err)
		}
		vdoc, _ := raw.StorageVolGetXMLDesc(v, 0)
		var vx libvirtxml.StorageVolume
		if err := vx.Unmarshal(vdoc); err != nil {
			t.Fatal(err)
		}
		if vx.BackingStore == nil || vx.BackingStore.Path != basePath || vx.Capacity.Value != uint64(m.DiskGiB)<<30 {
			t.Errorf("%s: overlay %s", m.Name, vdoc)
		}
		if got := downloadVol(t, d, raw, p.pool.Name, m.Name+".ign"); !bytes.Equal(got, m.Ignition) {
			t.Errorf("%s: ignition volume holds %q", m.Name, got)
		}
		// qemu really got the fw_cfg file.
		if !strings.Contains(qemuCmdline(t, m.Name), "name=opt/com.coreos/config,file="+ign) {
			t.Errorf("%s: qemu command line lacks the fw_cfg entry", m.Name)
		}
	}
}

func machineByName(spec *platform.Spec, name string) platform.Machine {
	for _, m := range spec.Machines {
		if m.Name == name {
			return m
		}
	}
	return platform.Machine{}
}

// downloadVol reads a volume's bytes where libvirtd keeps it, through the
// daemon's own mount namespace. go-libvirt's StorageVolDownload stream can
// deadlock (its router blocks handing a callback to the request, which waits
// for the router's lock); it hung a test run once.
func downloadVol(t *testing.T, d *testDaemon, l *golibvirt.Libvirt, pool, name string) []byte {
	t.Helper()
	pl, err := l.StoragePoolLookupByName(pool)
	if err != nil {
		t.Fatal(err)
	}
	v, err := l.StorageVolLookupByName(pl, name)
	if err != nil {
		t.Fatalf("volume %s: %v", name, err)
	}
	path, err := l.StorageVolGetPath(v)
	if err != nil {
		t.Fatalf("volume %s: path: %v", name, err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/root%s", d.PID, path))
	if err != nil {
		t.Fatalf("read volume %s: %v", name, err)
	}
	return b
}

func fileEqual(t *testing.T, path string, b []byte) bool {
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(want, b)
}

// qemuProcs lists the qemu processes in the daemon's network namespace.
func qemuProcs(d *testDaemon) []int {
	netns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", d.PID))
	if err != nil {
		return nil
	}
	var out []int
	for _, pid := range pidsInNetns(netns, d.PID) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.HasPrefix(string(b), "qemu-system") {
			out = append(out, pid)
		}
	}
	return out
}

func qemuCount(d *testDaemon) int { return len(qemuProcs(d)) }

// qemuCmdline finds the running qemu for domain name and returns its
// command line, spaces between arguments.
func qemuCmdline(t *testing.T, name string) string {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(b, []byte("guest="+name+",")) {
			continue
		}
		return string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
	}
	t.Errorf("no qemu process for %s", name)
	return ""
}

// lockedWriter serialises writes from concurrent Create calls' loggers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestLibvirtTestDriver runs the whole cycle on test:///default, the driver
// the benchmark uses (no uploads, no DHCP leases, fewer undefine flags).
func TestLibvirtTestDriver(t *testing.T) {
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	imgPath := filepath.Join(d.Dir, "base.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", imgPath, "64M")
	st, _ := os.Stat(imgPath)
	img := platform.Image{Path: imgPath, Format: "qcow2", SHA256: strings.Repeat("d4", 32), Size: st.Size(), Flavor: platform.FlavorQEMU}
	spec := clusterSpec("apt"+uniq(), img, 2)
	p, err := New(ctx, testDriverOptions(d), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// Foreign things where ours would go: a domain with a worker's name but
	// no mark, a volume with another worker's Ignition volume name, and a
	// volume with another cluster's base image name. None is adopted.
	pl, err := p.l.StoragePoolLookupByName(p.pool.Name)
	if err != nil {
		t.Fatal(err)
	}
	spec2 := clusterSpec("apt"+uniq(), img, 0)
	for _, name := range []string{spec.Machines[5].Name + ".ign", baseVolumeName(img, spec2.InfraID)} {
		if _, err := p.l.StorageVolCreateXML(pl, fmt.Sprintf(`<volume><name>%s</name><capacity>1024</capacity></volume>`, name), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.l.DomainDefineXML(fmt.Sprintf(`<domain type="qemu"><name>%s</name><memory>16384</memory><os><type>hvm</type></os></domain>`, spec.Machines[4].Name)); err != nil {
		t.Fatal(err)
	}
	err = applyAll(ctx, p, spec, 4, true)
	if err == nil || !strings.Contains(err.Error(), "domain "+spec.Machines[4].Name+" exists and was not created for node worker-0") ||
		!strings.Contains(err.Error(), spec.Machines[5].Name+".ign exists but no appliance mark claims it") {
		t.Fatalf("apply over foreign resources: %v", err)
	}
	if err := p.PrepareImage(ctx, spec2, nil); err == nil || !strings.Contains(err.Error(), "no appliance mark claims it") {
		t.Fatalf("prepare over a foreign base volume: %v", err)
	}
	spec.Machines = spec.Machines[:4]
	for range 2 {
		if err := applyAll(ctx, p, spec, 4, true); err != nil {
			t.Fatal(err)
		}
	}
	vms, err := p.List(ctx, spec.InfraID)
	if err != nil || len(vms) != 4 {
		t.Fatalf("list: %v %v", vms, err)
	}
	for _, vm := range vms {
		if vm.Power != platform.PowerRunning || !vm.Complete {
			t.Errorf("%+v", vm)
		}
	}
	lines, err := p.Destroy(ctx, spec.InfraID)
	if err != nil {
		t.Fatal(err)
	}
	if want := 4 + 5 + 9; len(lines) != want {
		t.Errorf("destroy: %d lines, want %d:\n%s", len(lines), want, strings.Join(lines, "\n"))
	}
	if vms, err := p.List(ctx, spec.InfraID); err != nil || len(vms) != 0 {
		t.Fatalf("after destroy: %v %v", vms, err)
	}
	if _, err := p.l.DomainLookupByName(spec.InfraID + "-worker-0"); err != nil {
		t.Errorf("foreign domain removed: %v", err)
	}
	for _, name := range []string{spec.InfraID + "-worker-1.ign", baseVolumeName(img, spec2.InfraID)} {
		if _, err := p.l.StorageVolLookupByName(pl, name); err != nil {
			t.Errorf("foreign volume %s removed: %v", name, err)
		}
	}
}

// testDriverOptions connects to the daemon's test:///default driver, whose
// state lives as long as a connection to it is open.
func testDriverOptions(d *testDaemon) Options {
	return Options{URI: "test:///default", Socket: d.Socket, Pool: "default-pool", Network: "default", DomainType: "qemu"}
}
