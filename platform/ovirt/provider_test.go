package ovirt

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"
	"golang.org/x/sync/errgroup"

	"appliance/internal/cluster"
	"appliance/platform"
)

const infraID = "ocp4-x7k2p"

// fakeQCOW2 writes a small qcow2-looking file whose header claims a 16 GiB
// virtual size (all the mock reads) and returns the image description.
func fakeQCOW2(t testing.TB, tag string) platform.Image {
	t.Helper()
	data := make([]byte, 256<<10)
	copy(data, "QFI\xfb")
	binary.BigEndian.PutUint32(data[4:], 3)
	binary.BigEndian.PutUint64(data[24:], 16<<30)
	copy(data[4096:], tag)
	p := filepath.Join(t.TempDir(), "rhcos-openstack.qcow2")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return platform.Image{Path: p, Format: "qcow2", SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data)),
		Flavor: platform.FlavorOpenStack}
}

func testSpec(t testing.TB, workers int) *platform.Spec {
	s := &platform.Spec{InfraID: infraID, ClusterName: "ocp4", BaseDomain: "example.com", Image: fakeQCOW2(t, "v1")}
	add := func(node string, role cluster.Role, cpus, mem, disk, i int) {
		s.Machines = append(s.Machines, platform.Machine{
			Name: infraID + "-" + node, Node: node, Role: role, CPUs: cpus, MemoryMiB: mem, DiskGiB: disk,
			MAC:      net.HardwareAddr{0x02, 0x7e, 0, 0, byte(i >> 8), byte(i)},
			Ignition: []byte(fmt.Sprintf(`{"ignition":{"version":"3.2.0"},"x":%q}`, node)),
		})
	}
	add("bootstrap", cluster.RoleBootstrap, 4, 8192, 120, 9)
	for i := range 3 {
		add(fmt.Sprintf("master-%d", i), cluster.RoleMaster, 4, 16384, 120, 0x10+i)
	}
	for i := range workers {
		add(fmt.Sprintf("worker-%d", i), cluster.RoleWorker, 2, 8192, 16, 0x100+i) // 16 GiB: no resize needed
	}
	return s
}

// noResize sizes every disk like the image so no resize is needed: the mock
// holds its global lock for a second per resize, which slows tests that
// are about something else.
func noResize(s *platform.Spec) *platform.Spec {
	for i := range s.Machines {
		s.Machines[i].DiskGiB = 16
	}
	return s
}

type env struct {
	mock ovirtclient.MockClient
	p    *Provider
	opts Options
}

// skipUnderRace: the mock hands out its live objects and its own
// goroutines later change their status (template unlock, disk unlock, VM
// power), so -race reports races between the mock and any reader.
func skipUnderRace(t testing.TB) {
	if raceDetector {
		t.Skip("go-ovirt-client's mock races with its callers by design (see skipUnderRace)")
	}
}

func newEnv(t testing.TB, mod func(*Options)) *env {
	t.Helper()
	skipUnderRace(t)
	mock := ovirtclient.NewMock()
	cl, err := mock.ListClusters()
	if err != nil {
		t.Fatal(err)
	}
	sds, _ := mock.ListStorageDomains()
	profiles, _ := mock.ListVNICProfiles()
	opts := Options{ClusterID: string(cl[0].ID()), StorageDomainID: string(sds[0].ID()),
		VNICProfileID: string(profiles[0].ID()), PollInterval: 50 * time.Millisecond, WaitTimeout: time.Minute}
	if mod != nil {
		mod(&opts)
	}
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("OVIRT_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	p, err := NewWithClient(context.Background(), mock, opts, log)
	if err != nil {
		t.Fatal(err)
	}
	return &env{mock: mock, p: p, opts: opts}
}

// apply is what the engine does: image, then every Create in parallel.
func apply(ctx context.Context, p platform.Provider, spec *platform.Spec, workers int, stage func(m platform.Machine, s string)) error {
	if err := p.PrepareImage(ctx, spec, nil); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, m := range spec.Machines {
		g.Go(func() error {
			return p.Create(gctx, spec, m, func(s string) {
				if stage != nil {
					stage(m, s)
				}
			})
		})
	}
	return g.Wait()
}

// inventory counts everything in the mock, to prove re-runs add nothing.
type inventory struct {
	VMs, Templates, Disks, NICs, Tags, Groups, VMTags, GroupMembers int
}

func (e *env) inventory(t *testing.T) inventory {
	t.Helper()
	var inv inventory
	vms, _ := e.mock.ListVMs()
	inv.VMs = len(vms)
	for _, vm := range vms {
		nics, _ := e.mock.ListNICs(vm.ID())
		inv.NICs += len(nics)
		tags, _ := e.mock.ListVMTags(vm.ID())
		inv.VMTags += len(tags)
	}
	tpls, _ := e.mock.ListTemplates()
	inv.Templates = len(tpls)
	disks, _ := e.mock.ListDisks()
	inv.Disks = len(disks)
	tags, _ := e.mock.ListTags()
	inv.Tags = len(tags)
	groups, _ := e.mock.ListAffinityGroups(ovirtclient.ClusterID(e.opts.ClusterID))
	inv.Groups = len(groups)
	for _, g := range groups {
		inv.GroupMembers += len(g.VMIDs())
	}
	return inv
}

// foreign creates objects that look like the cluster's but are not ours.
func (e *env) foreign(t *testing.T) {
	t.Helper()
	cid := ovirtclient.ClusterID(e.opts.ClusterID)
	blank, _ := e.mock.GetBlankTemplate()
	for _, n := range []string{infraID + "-master-0-old", "ocp4-x7k2q-master-0", infraID + "-rhcos-builder-x"} {
		if _, err := e.mock.CreateVM(cid, blank.ID(), n, ovirtclient.NewCreateVMParams().MustWithDescription("not appliance-provision infraID="+infraID)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.mock.CreateTag(infraID+"-old", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mock.CreateAffinityGroup(cid, infraID+"-controlplane-old", ovirtclient.CreateAffinityGroupParams().MustWithDescription("hand made")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mock.CreateDisk(ovirtclient.StorageDomainID(e.opts.StorageDomainID), ovirtclient.ImageFormatRaw, 1<<20,
		ovirtclient.CreateDiskParams().MustWithAlias(imageAlias(infraID)+"-old")); err != nil {
		t.Fatal(err)
	}
}

func TestApplyListDestroy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.foreign(t)
	before := e.inventory(t)
	spec := testSpec(t, 2)
	ctx := context.Background()

	var mu sync.Mutex
	stages := map[string][]string{}
	if err := apply(ctx, e.p, spec, 8, func(m platform.Machine, s string) {
		mu.Lock()
		stages[m.Node] = append(stages[m.Node], s)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if got := stages["master-1"]; !slices.Equal(got, []string{"clone", "disk", "nic", "tag", "affinity", "created"}) {
		t.Errorf("stages of master-1: %v", got)
	}

	// Template.
	tpl, err := e.mock.GetTemplateByName(infraID + "-rhcos")
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Status() != ovirtclient.TemplateStatusOK || tpl.Description() != (mark{InfraID: infraID, Image: spec.Image.SHA256}).String() {
		t.Errorf("template %s %q", tpl.Status(), tpl.Description())
	}
	if atts, _ := tpl.ListDiskAttachments(); len(atts) != 1 {
		t.Errorf("template disks: %d", len(atts))
	}
	if _, err := e.mock.GetVMByName(builderName(infraID)); err == nil {
		t.Error("image builder VM left behind")
	}

	// VMs.
	tagID, ok, err := e.p.findTag(ctx, infraID)
	if err != nil || !ok {
		t.Fatalf("tag: %v %v", ok, err)
	}
	groups := map[string]ovirtclient.AffinityGroup{}
	ags, _ := e.mock.ListAffinityGroups(ovirtclient.ClusterID(e.opts.ClusterID))
	for _, g := range ags {
		groups[g.Name()] = g
	}
	for _, m := range spec.Machines {
		vm, err := e.mock.GetVMByName(m.Name)
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if topo := vm.CPU().Topo(); topo.Cores() != uint(m.CPUs) || topo.Sockets() != 1 || topo.Threads() != 1 {
			t.Errorf("%s CPU %d/%d/%d", m.Name, topo.Sockets(), topo.Cores(), topo.Threads())
		}
		if vm.Memory() != int64(m.MemoryMiB)<<20 {
			t.Errorf("%s memory %d", m.Name, vm.Memory())
		}
		if vm.OS().Type() != "rhcos_x64" {
			t.Errorf("%s OS %s", m.Name, vm.OS().Type())
		}
		if vm.Initialization().CustomScript() != string(m.Ignition) || vm.Initialization().HostName() != m.Node {
			t.Errorf("%s init %q %q", m.Name, vm.Initialization().CustomScript(), vm.Initialization().HostName())
		}
		if vm.Status() != ovirtclient.VMStatusDown {
			t.Errorf("%s started by Create: %s", m.Name, vm.Status())
		}
		if vm.Comment() != completeComment {
			t.Errorf("%s comment %q", m.Name, vm.Comment())
		}
		atts, _ := vm.ListDiskAttachments()
		if len(atts) != 1 {
			t.Fatalf("%s disks %d", m.Name, len(atts))
		}
		d, _ := e.mock.GetDisk(atts[0].DiskID())
		if want := uint64(max(m.DiskGiB, 16)) << 30; d.ProvisionedSize() != want {
			t.Errorf("%s disk %d, want %d", m.Name, d.ProvisionedSize(), want)
		}
		if !slices.Contains(d.StorageDomainIDs(), ovirtclient.StorageDomainID(e.opts.StorageDomainID)) {
			t.Errorf("%s disk on %v", m.Name, d.StorageDomainIDs())
		}
		nics, _ := vm.ListNICs()
		if len(nics) != 1 || !strings.EqualFold(nics[0].Mac(), m.MAC.String()) || string(nics[0].VNICProfileID()) != e.opts.VNICProfileID {
			t.Errorf("%s NICs %v", m.Name, nics)
		}
		tags, _ := vm.ListTags()
		if len(tags) != 1 || tags[0].ID() != tagID {
			t.Errorf("%s tags %v", m.Name, tags)
		}
		for name, g := range groups {
			in := slices.Contains(g.VMIDs(), vm.ID())
			want := name == groupName(infraID, string(m.Role))
			if in != want {
				t.Errorf("%s in group %s: %v", m.Name, name, in)
			}
		}
	}
	for _, n := range []string{infraID + "-controlplane", infraID + "-compute"} {
		g, ok := groups[n]
		if !ok {
			t.Fatalf("group %s missing", n)
		}
		if !g.Enforcing() || !g.VMsRule().Enforcing() || g.VMsRule().Affinity() != ovirtclient.AffinityNegative || !g.VMsRule().Enabled() {
			t.Errorf("group %s not negative enforcing", n)
		}
	}

	// List.
	vms, err := e.p.List(ctx, infraID)
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != len(spec.Machines) {
		t.Fatalf("List: %d VMs", len(vms))
	}
	for _, v := range vms {
		i := slices.IndexFunc(spec.Machines, func(m platform.Machine) bool { return m.Name == v.Name })
		if i < 0 || v.Node != spec.Machines[i].Node || !v.Complete || v.Power != platform.PowerStopped ||
			v.MAC.String() != spec.Machines[i].MAC.String() || len(v.Addresses) != 0 {
			t.Errorf("List: %+v", v)
		}
	}

	// Re-run: nothing new.
	after := e.inventory(t)
	var progressCalls int
	if err := e.p.PrepareImage(ctx, spec, func(d, total int64) { progressCalls++ }); err != nil {
		t.Fatal(err)
	}
	if progressCalls != 1 {
		t.Errorf("re-run PrepareImage reported %d progress calls, want 1 (nothing uploaded)", progressCalls)
	}
	if err := apply(ctx, e.p, spec, 8, nil); err != nil {
		t.Fatal(err)
	}
	if again := e.inventory(t); again != after {
		t.Errorf("re-run changed the inventory:\n%+v\n%+v", after, again)
	}
	// A fresh provider (a new process) sees the same.
	p2, _ := NewWithClient(ctx, e.mock, e.opts, nil)
	if err := apply(ctx, p2, spec, 8, nil); err != nil {
		t.Fatal(err)
	}
	if again := e.inventory(t); again != after {
		t.Errorf("re-run in new provider changed the inventory:\n%+v\n%+v", after, again)
	}

	// Destroy leaves exactly the foreign objects.
	lines, err := e.p.Destroy(ctx, infraID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("destroy:\n%s", strings.Join(lines, "\n"))
	if len(lines) != len(spec.Machines)+2+1+1 {
		t.Errorf("destroy lines: %v", lines)
	}
	if got := e.inventory(t); got != before {
		t.Errorf("after destroy:\n%+v\nwant (foreign only)\n%+v", got, before)
	}
	for _, n := range []string{infraID + "-master-0-old", "ocp4-x7k2q-master-0", infraID + "-rhcos-builder-x"} {
		if _, err := e.mock.GetVMByName(n); err != nil {
			t.Errorf("foreign VM %s: %v", n, err)
		}
	}
	// Destroy again: nothing to do, no error.
	if lines, err := e.p.Destroy(ctx, infraID); err != nil || len(lines) != 0 {
		t.Errorf("second destroy: %v %v", lines, err)
	}
}

func TestInterruptedApplyResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	spec := testSpec(t, 2)

	// 1. Killed during the upload.
	ctx, cancel := context.WithCancel(context.Background())
	err := e.p.PrepareImage(ctx, spec, func(done, total int64) {
		if done > total/2 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("upload not interrupted: %v", err)
	}

	// 2. Killed in the middle of the Creates.
	ctx, cancel = context.WithCancel(context.Background())
	var once sync.Once
	err = apply(ctx, e.p, spec, 8, func(m platform.Machine, s string) {
		if s == "nic" { // the first VM to get this far stops them all
			once.Do(cancel)
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("apply not interrupted: %v", err)
	}
	vms, err := e.p.List(context.Background(), infraID)
	if err != nil {
		t.Fatal(err)
	}
	incomplete := 0
	for _, v := range vms {
		if !v.Complete {
			incomplete++
		}
	}
	if incomplete == 0 {
		t.Fatal("interruption left nothing incomplete; test does not test resume")
	}
	t.Logf("after interruption: %d VMs, %d incomplete", len(vms), incomplete)

	// 3. A new process finishes the job.
	p2, _ := NewWithClient(context.Background(), e.mock, e.opts, nil)
	if err := apply(context.Background(), p2, spec, 8, nil); err != nil {
		t.Fatal(err)
	}
	got := e.inventory(t)
	n := len(spec.Machines)
	// One template with its disk, one disk and NIC and tag per VM, masters and workers in their groups.
	want := inventory{VMs: n, Templates: 2, Disks: n + 1, NICs: n, Tags: 1, Groups: 2, VMTags: n, GroupMembers: 5}
	if got != want {
		t.Errorf("after resume:\n%+v\nwant\n%+v", got, want)
	}
	vms, _ = p2.List(context.Background(), infraID)
	for _, v := range vms {
		if !v.Complete {
			t.Errorf("%s incomplete after resume", v.Name)
		}
	}
	if lines, err := p2.Destroy(context.Background(), infraID); err != nil {
		t.Fatal(err, lines)
	}
	if got := e.inventory(t); got != (inventory{Templates: 1}) {
		t.Errorf("after destroy: %+v", got)
	}
}

func TestPrepareImageReusesFinishedUpload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	spec := testSpec(t, 0)
	ctx := context.Background()
	// Simulate a run killed after the upload reached the builder VM.
	if _, err := e.p.ensureTag(ctx, infraID); err != nil {
		t.Fatal(err)
	}
	disk, err := e.p.upload(ctx, spec, func(int64, int64) {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.createBuilder(ctx, mark{InfraID: infraID, Image: spec.Image.SHA256}, disk); err != nil {
		t.Fatal(err)
	}
	var calls []int64
	if err := e.p.PrepareImage(ctx, spec, func(d, _ int64) { calls = append(calls, d) }); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0] != spec.Image.Size {
		t.Errorf("uploaded again: progress %v", calls)
	}
	if got := e.inventory(t); got.Templates != 2 || got.VMs != 0 || got.Disks != 1 {
		t.Errorf("inventory %+v", got)
	}
}

func TestPrepareImageReplacesOtherImage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	spec := testSpec(t, 0)
	ctx := context.Background()
	var last int64
	if err := e.p.PrepareImage(ctx, spec, func(d, _ int64) { last = d }); err != nil {
		t.Fatal(err)
	}
	if last != spec.Image.Size {
		t.Errorf("progress ended at %d of %d", last, spec.Image.Size)
	}
	spec.Image = fakeQCOW2(t, "v2")
	if err := e.p.PrepareImage(ctx, spec, nil); err != nil {
		t.Fatal(err)
	}
	tpl, err := e.p.findTemplate(ctx, infraID)
	if err != nil || tpl == nil {
		t.Fatal(tpl, err)
	}
	if m, _ := parseMark(tpl.Description()); m.Image != spec.Image.SHA256 {
		t.Errorf("template still for the old image: %q", tpl.Description())
	}
	if got := e.inventory(t); got.Templates != 2 || got.Disks != 1 {
		t.Errorf("inventory %+v", got)
	}
}

func TestForeignVMWithOurNameIsNotAdopted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	spec := noResize(testSpec(t, 2))
	blank, _ := e.mock.GetBlankTemplate()
	name := spec.Machines[len(spec.Machines)-1].Name
	if _, err := e.mock.CreateVM(ovirtclient.ClusterID(e.opts.ClusterID), blank.ID(), name, nil); err != nil {
		t.Fatal(err)
	}
	err := apply(context.Background(), e.p, spec, 8, nil)
	if err == nil || !strings.Contains(err.Error(), "not part of cluster") {
		t.Fatalf("err = %v", err)
	}
	if _, err := e.p.Destroy(context.Background(), infraID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mock.GetVMByName(name); err != nil {
		t.Errorf("foreign VM removed: %v", err)
	}
}

func TestStartHonoursAffinity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("enforcing", func(t *testing.T) {
		t.Parallel()
		// The mock has one host: enforcing anti-affinity lets only one master run.
		e := newEnv(t, nil)
		spec := noResize(testSpec(t, 0))
		if err := apply(ctx, e.p, spec, 8, nil); err != nil {
			t.Fatal(err)
		}
		for i, m := range spec.Machines[:3] { // bootstrap, master-0, master-1
			err := e.p.Start(ctx, spec, m)
			if i < 2 && err != nil {
				t.Fatalf("start %s: %v", m.Name, err)
			}
			if i == 2 && (err == nil || !strings.Contains(err.Error(), "no suitable host")) {
				t.Fatalf("start %s on one host with enforcing anti-affinity: %v", m.Name, err)
			}
		}
		// Starting a started VM is fine.
		if err := e.p.Start(ctx, spec, spec.Machines[0]); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("soft", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, func(o *Options) { o.Affinity.Soft = true })
		spec := noResize(testSpec(t, 1))
		if err := apply(ctx, e.p, spec, 8, nil); err != nil {
			t.Fatal(err)
		}
		for _, m := range spec.Machines {
			if err := e.p.Start(ctx, spec, m); err != nil {
				t.Fatal(err)
			}
		}
		vms, err := e.p.List(ctx, infraID)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vms {
			if v.Power != platform.PowerStarting && v.Power != platform.PowerRunning {
				t.Errorf("%s %s", v.Name, v.Power)
			}
		}
		// Destroy stops running VMs first.
		if _, err := e.p.Destroy(ctx, infraID); err != nil {
			t.Fatal(err)
		}
		if got := e.inventory(t); got != (inventory{Templates: 1}) {
			t.Errorf("after destroy: %+v", got)
		}
	})
}

func TestNoAffinity(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *Options) { o.Affinity.Disabled = true })
	spec := noResize(testSpec(t, 1))
	if err := apply(context.Background(), e.p, spec, 8, nil); err != nil {
		t.Fatal(err)
	}
	if got := e.inventory(t); got.Groups != 0 {
		t.Errorf("groups created: %+v", got)
	}
}

func TestWaitForAddresses(t *testing.T) {
	if testing.Short() {
		t.Skip("the mock reports guest addresses 14 s after start")
	}
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, func(o *Options) { o.Affinity.Disabled = true; o.PollInterval = 500 * time.Millisecond })
	spec := noResize(testSpec(t, 0))
	spec.Machines = spec.Machines[:2]
	if err := apply(ctx, e.p, spec, 8, nil); err != nil {
		t.Fatal(err)
	}
	names := []string{spec.Machines[0].Name, spec.Machines[1].Name}
	// Not started: gives up quickly, naming the VMs.
	if _, err := e.p.WaitForAddresses(ctx, infraID, names, 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), names[1]) {
		t.Fatalf("err = %v", err)
	}
	for _, m := range spec.Machines {
		if err := e.p.Start(ctx, spec, m); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	got, err := e.p.WaitForAddresses(ctx, infraID, names, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("addresses after %s: %v", time.Since(start).Round(time.Millisecond), got)
	for _, n := range names {
		// The mock reports lo (skipped), 192.168.0.123 and fe80::123 (link-local, skipped).
		if len(got[n]) != 1 || got[n][0].String() != "192.168.0.123" {
			t.Errorf("%s: %v", n, got[n])
		}
	}
}

func TestOptionsValidated(t *testing.T) {
	mock := ovirtclient.NewMock()
	if _, err := NewWithClient(context.Background(), mock, Options{}, nil); err == nil ||
		!strings.Contains(err.Error(), "clusterID") || !strings.Contains(err.Error(), "vnicProfileID") {
		t.Fatalf("err = %v", err)
	}
	e := newEnv(t, nil)
	o := e.opts
	o.StorageDomainID = "00000000-0000-0000-0000-000000000000"
	if _, err := NewWithClient(context.Background(), e.mock, o, nil); err == nil || !strings.Contains(err.Error(), "storageDomainID") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseMark(t *testing.T) {
	tests := []struct {
		in   string
		want mark
		ok   bool
	}{
		{"appliance-provision infraID=a node=master-0 role=master", mark{InfraID: "a", Node: "master-0", Role: "master"}, true},
		{"appliance-provision infraID=a image=abc", mark{InfraID: "a", Image: "abc"}, true},
		{"appliance-provision node=x", mark{}, false},
		{"appliance-provision infraID=", mark{}, false},
		{"appliance-provision infraID=a color=red", mark{}, false},
		{"not appliance-provision infraID=a", mark{}, false},
		{"", mark{}, false},
	}
	for _, tt := range tests {
		got, ok := parseMark(tt.in)
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseMark(%q) = %+v %v", tt.in, got, ok)
		}
	}
	m := mark{InfraID: "a", Node: "n", Role: "worker"}
	if got, ok := parseMark(m.String()); !ok || got != m {
		t.Errorf("round trip %+v", got)
	}
}

func TestDestroyFindsByTagOrMark(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	cid := ovirtclient.ClusterID(e.opts.ClusterID)
	blank, _ := e.mock.GetBlankTemplate()
	tagID, err := e.p.ensureTag(ctx, infraID)
	if err != nil {
		t.Fatal(err)
	}
	// Tagged by another tool for this cluster, without our description.
	tagged, err := e.mock.CreateVM(cid, blank.ID(), "tagged-by-hand", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.mock.AddTagToVM(tagged.ID(), tagID); err != nil {
		t.Fatal(err)
	}
	// Ours by description only (killed before tagging).
	if _, err := e.mock.CreateVM(cid, blank.ID(), infraID+"-worker-9", ovirtclient.NewCreateVMParams().
		MustWithDescription(mark{InfraID: infraID, Node: "worker-9", Role: "worker"}.String())); err != nil {
		t.Fatal(err)
	}
	// Another cluster's, and an unmarked one with our prefix.
	if _, err := e.mock.CreateVM(cid, blank.ID(), "ocp4-other-master-0", ovirtclient.NewCreateVMParams().
		MustWithDescription(mark{InfraID: "ocp4-other", Node: "master-0", Role: "master"}.String())); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mock.CreateVM(cid, blank.ID(), infraID+"-master-7", nil); err != nil {
		t.Fatal(err)
	}
	vms, err := e.p.List(ctx, infraID)
	if err != nil || len(vms) != 2 {
		t.Fatalf("List: %v %v", vms, err)
	}
	lines, err := e.p.Destroy(ctx, infraID)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"tag " + infraID, "vm " + infraID + "-worker-9", "vm tagged-by-hand"}
	if !slices.Equal(lines, want) {
		t.Errorf("destroy: %v, want %v", lines, want)
	}
	left, _ := e.mock.ListVMs()
	var names []string
	for _, v := range left {
		names = append(names, v.Name())
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"ocp4-other-master-0", infraID + "-master-7"}) {
		t.Errorf("left: %v", names)
	}
}

func TestForeignTagWithOurNameIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	if _, err := e.mock.CreateTag(infraID, nil); err != nil {
		t.Fatal(err)
	}
	err := e.p.PrepareImage(context.Background(), testSpec(t, 0), nil)
	if err == nil || !strings.Contains(err.Error(), "not created by appliance provision") {
		t.Fatalf("err = %v", err)
	}
	if _, err := e.p.Destroy(context.Background(), infraID); err == nil {
		t.Fatal("destroy ignored a foreign tag with the cluster's name")
	}
	if tags, _ := e.mock.ListTags(); len(tags) != 1 {
		t.Fatalf("tags: %d", len(tags))
	}
}
