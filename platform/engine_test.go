package platform

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"appliance/internal/cluster"
)

// fake is an in-memory Provider. Create has two steps, like a real
// platform: the VM is recorded (incomplete), then finished.
type fake struct {
	mu      sync.Mutex
	vms     map[string]*VM // by name
	creates map[string]int // Create calls that began a VM from nothing
	images  int
	// failOnce makes the first Create of a machine fail after its first step.
	failOnce map[string]bool
	// between runs between the two steps (to cancel or block).
	between           func(name string)
	active, maxActive atomic.Int32
	startErr          error
	imageErr          error // PrepareImage fails with it
	overlap           bool  // Create waits (bounded) for a second Create in flight
}

func newFake() *fake {
	return &fake{vms: map[string]*VM{}, creates: map[string]int{}, failOnce: map[string]bool{}}
}

func (f *fake) List(_ context.Context, infraID string) ([]VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []VM
	for _, v := range f.vms {
		out = append(out, *v)
	}
	return out, nil
}

func (f *fake) PrepareImage(_ context.Context, _ *Spec, progress func(done, total int64)) error {
	f.mu.Lock()
	f.images++
	f.mu.Unlock()
	if f.imageErr != nil {
		return f.imageErr
	}
	progress(10, 10)
	return nil
}

func (f *fake) Create(ctx context.Context, _ *Spec, m Machine, stage func(string)) error {
	n := f.active.Add(1)
	defer f.active.Add(-1)
	for {
		mx := f.maxActive.Load()
		if n <= mx || f.maxActive.CompareAndSwap(mx, n) {
			break
		}
	}
	f.mu.Lock()
	v, ok := f.vms[m.Name]
	if ok && v.Complete {
		f.mu.Unlock()
		return fmt.Errorf("Create called for the complete VM %s", m.Name)
	}
	if !ok {
		f.creates[m.Name]++
		v = &VM{Name: m.Name, Node: m.Node, MAC: m.MAC, Power: PowerStopped}
		f.vms[m.Name] = v
	}
	fail := f.failOnce[m.Name]
	delete(f.failOnce, m.Name)
	f.mu.Unlock()
	stage("defined")
	if f.between != nil {
		f.between(m.Name)
	}
	// Wait (bounded) for a second Create to be in flight, so the test of
	// the parallelism bound does not depend on scheduling luck.
	for deadline := time.Now().Add(time.Second); f.overlap && f.active.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if fail {
		return errors.New("disk quota exceeded")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	v.Complete = true
	f.mu.Unlock()
	return nil
}

func (f *fake) Start(_ context.Context, _ *Spec, m Machine) error {
	if f.startErr != nil {
		return f.startErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vms[m.Name]
	if !ok || !v.Complete {
		return fmt.Errorf("start of %s before it was built", m.Name)
	}
	v.Power = PowerRunning
	return nil
}

func (f *fake) Destroy(context.Context, string) ([]string, error) { return nil, nil }
func (f *fake) Close() error                                      { return nil }

func (f *fake) DestroyVMs(_ context.Context, _ string, vms []VM) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var lines []string
	for _, v := range vms {
		if _, ok := f.vms[v.Name]; ok {
			delete(f.vms, v.Name)
			lines = append(lines, "vm "+v.Name)
		}
	}
	return lines, nil
}

func testSpec(workers int) *Spec {
	s := &Spec{InfraID: "ocp4-x7k2p"}
	add := func(node string, role cluster.Role) {
		s.Machines = append(s.Machines, Machine{Name: s.InfraID + "-" + node, Node: node, Role: role, MAC: net.HardwareAddr{2, 0, 0, 0, 0, byte(len(s.Machines))}})
	}
	add("bootstrap", cluster.RoleBootstrap)
	for i := range 3 {
		add(fmt.Sprintf("master-%d", i), cluster.RoleMaster)
	}
	for i := range workers {
		add(fmt.Sprintf("worker-%d", i), cluster.RoleWorker)
	}
	return s
}

func TestDiff(t *testing.T) {
	spec := testSpec(1)
	cases := []struct {
		name      string
		vms       []VM
		want      []Action
		wantStray int
	}{
		{name: "nothing exists", want: []Action{ActionCreate, ActionCreate, ActionCreate, ActionCreate, ActionCreate}},
		{name: "some complete", vms: []VM{{Name: "ocp4-x7k2p-master-0", Node: "master-0", Complete: true}},
			want: []Action{ActionCreate, ActionNone, ActionCreate, ActionCreate, ActionCreate}},
		{name: "interrupted", vms: []VM{{Name: "ocp4-x7k2p-bootstrap", Node: "bootstrap"}},
			want: []Action{ActionComplete, ActionCreate, ActionCreate, ActionCreate, ActionCreate}},
		{name: "matched by node, not name", vms: []VM{{Name: "renamed-vm", Node: "worker-0", Complete: true}},
			want: []Action{ActionCreate, ActionCreate, ActionCreate, ActionCreate, ActionNone}},
		{name: "name fallback without node mark", vms: []VM{{Name: "ocp4-x7k2p-master-2", Complete: true}},
			want: []Action{ActionCreate, ActionCreate, ActionCreate, ActionNone, ActionCreate}},
		{name: "stray node", vms: []VM{{Name: "ocp4-x7k2p-worker-7", Node: "worker-7", Complete: true}},
			want: []Action{ActionCreate, ActionCreate, ActionCreate, ActionCreate, ActionCreate}, wantStray: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Diff(spec, tc.vms)
			var got []Action
			for _, it := range p.Items {
				got = append(got, it.Action)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || len(p.Stray) != tc.wantStray {
				t.Errorf("actions %v stray %d; want %v stray %d", got, len(p.Stray), tc.want, tc.wantStray)
			}
			if p.Pending() != (fmt.Sprint(tc.want) != fmt.Sprint([]Action{ActionNone, ActionNone, ActionNone, ActionNone, ActionNone})) {
				t.Errorf("Pending() = %v", p.Pending())
			}
		})
	}
}

func TestApplyCreatesStartsAndIsIdempotent(t *testing.T) {
	f := newFake()
	f.overlap = true
	spec := testSpec(2)
	var events []Event
	res, err := Apply(context.Background(), f, spec, ApplyOptions{Parallel: 3, Progress: func(e Event) { events = append(events, e) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 6 || len(res.Started) != 6 {
		t.Fatalf("created %v started %v", res.Created, res.Started)
	}
	if mx := f.maxActive.Load(); mx < 2 || mx > 3 {
		t.Errorf("at most %d Creates ran at once; want 2..3 with Parallel 3", mx)
	}
	finished := map[string]bool{}
	for _, e := range events {
		if e.Finished && e.Err == nil {
			finished[e.Machine] = true
		}
	}
	for _, m := range spec.Machines {
		if !finished[m.Name] {
			t.Errorf("no finishing event for %s", m.Name)
		}
	}

	res, err = Apply(context.Background(), f, spec, ApplyOptions{Parallel: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created)+len(res.Completed)+len(res.Started) != 0 || len(res.Existing) != 6 {
		t.Errorf("second apply did %+v; want nothing", res)
	}
	if f.images != 1 {
		t.Errorf("image prepared %d times; a second apply with nothing to build must not touch it", f.images)
	}
}

func TestApplyFailureThenResume(t *testing.T) {
	f := newFake()
	spec := testSpec(2)
	f.failOnce["ocp4-x7k2p-master-1"] = true
	_, err := Apply(context.Background(), f, spec, ApplyOptions{Parallel: 4})
	if err == nil || !strings.Contains(err.Error(), "ocp4-x7k2p-master-1") || !strings.Contains(err.Error(), "disk quota") {
		t.Fatalf("error %v; want it to name master-1 and the cause", err)
	}
	for _, v := range f.vms {
		if v.Power == PowerRunning {
			t.Fatalf("%s started although the cluster was not complete", v.Name)
		}
	}
	res, err := Apply(context.Background(), f, spec, ApplyOptions{Parallel: 4})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.Completed) != "[ocp4-x7k2p-master-1]" || len(res.Created) != 0 || len(res.Started) != 6 {
		t.Errorf("resume did %+v", res)
	}
	for name, n := range f.creates {
		if n != 1 {
			t.Errorf("%s begun %d times", name, n)
		}
	}
}

func TestApplyCancelledMidwayResumes(t *testing.T) {
	for _, parallel := range []int{1, 8} {
		t.Run(fmt.Sprint("parallel=", parallel), func(t *testing.T) {
			f := newFake()
			spec := testSpec(10)
			ctx, cancel := context.WithCancel(context.Background())
			var n atomic.Int32
			f.between = func(string) {
				if n.Add(1) == 4 {
					cancel()
				}
			}
			_, err := Apply(ctx, f, spec, ApplyOptions{Parallel: parallel})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v; want context.Canceled", err)
			}
			f.between = nil
			res, err := Apply(context.Background(), f, spec, ApplyOptions{Parallel: parallel})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Started) != len(spec.Machines) {
				t.Errorf("started %d of %d", len(res.Started), len(spec.Machines))
			}
			if len(res.Completed) == 0 {
				t.Errorf("no half-built machine was completed; the cancel came too late to test resume")
			}
			for _, m := range spec.Machines {
				if f.creates[m.Name] != 1 {
					t.Errorf("%s begun %d times, want once", m.Name, f.creates[m.Name])
				}
			}
		})
	}
}

func TestApplyStartFailureNamesMachine(t *testing.T) {
	f := newFake()
	f.startErr = errors.New("no host has 16 GiB free")
	_, err := Apply(context.Background(), f, testSpec(0), ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), "start ocp4-x7k2p-bootstrap") || !strings.Contains(err.Error(), "16 GiB") {
		t.Fatalf("err = %v", err)
	}
}

func writeAssets(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const ign = `{"ignition":{"version":"3.2.0"}}`

func TestLoadAssets(t *testing.T) {
	roles := []cluster.Role{cluster.RoleBootstrap, cluster.RoleMaster}
	cases := []struct {
		name    string
		files   map[string]string
		wantErr string
		infra   string
	}{
		{name: "ok with metadata", files: map[string]string{"bootstrap.ign": ign, "master.ign": ign, "metadata.json": `{"clusterName":"ocp4","infraID":"ocp4-x7k2p"}`}, infra: "ocp4-x7k2p"},
		{name: "ok without metadata", files: map[string]string{"bootstrap.ign": ign, "master.ign": ign}},
		{name: "missing", files: map[string]string{"bootstrap.ign": ign}, wantErr: "master.ign is missing; run 'openshift-install create ignition-configs"},
		{name: "not json", files: map[string]string{"bootstrap.ign": ign, "master.ign": "ignition: {}"}, wantErr: "master.ign: not an Ignition config (not JSON"},
		{name: "spec 2", files: map[string]string{"bootstrap.ign": `{"ignition":{"version":"2.2.0"}}`, "master.ign": ign}, wantErr: "bootstrap.ign: Ignition spec 2.2.0"},
		{name: "no version", files: map[string]string{"bootstrap.ign": `{"storage":{}}`, "master.ign": ign}, wantErr: "no ignition.version"},
		{name: "too big", files: map[string]string{"bootstrap.ign": ign, "master.ign": strings.Repeat(" ", maxAssetSize+1)}, wantErr: "larger than"},
		{name: "bad metadata", files: map[string]string{"bootstrap.ign": ign, "master.ign": ign, "metadata.json": "{"}, wantErr: "metadata.json is not the installer's"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := LoadAssets(writeAssets(t, tc.files), roles)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.InfraID != tc.infra || string(a.Ignition[cluster.RoleMaster]) != ign {
				t.Errorf("assets = %+v", a)
			}
		})
	}
}

func TestBuildSpec(t *testing.T) {
	cfg, err := cluster.Parse([]byte(`
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}
nodes:
- {name: worker-0, role: worker, ips: [192.168.126.20]}
- {name: master-0, role: master, ips: [192.168.126.10], mac: "52:54:00:00:00:10"}
- {name: bootstrap, role: bootstrap}
provision:
  platform: libvirt
  sizes: {worker: {cpus: 6}}
`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := LoadAssets(writeAssets(t, map[string]string{"bootstrap.ign": ign, "master.ign": ign, "worker.ign": ign, "metadata.json": `{"infraID":"ocp4-x7k2p"}`}), Roles(cfg))
	if err != nil {
		t.Fatal(err)
	}
	s, err := BuildSpec(cfg, a, Image{Path: "/img"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range s.Machines {
		got = append(got, fmt.Sprintf("%s/%s/%d/%d/%d", m.Name, m.Role, m.CPUs, m.MemoryMiB, m.DiskGiB))
	}
	want := "[ocp4-x7k2p-bootstrap/bootstrap/4/16384/120 ocp4-x7k2p-master-0/master/4/16384/120 ocp4-x7k2p-worker-0/worker/6/8192/120]"
	if fmt.Sprint(got) != want {
		t.Errorf("machines %v\nwant %s", got, want)
	}
	if s.Machines[1].MAC.String() != "52:54:00:00:00:10" || s.Machines[2].MAC.String() != cluster.DeriveMAC(cfg.Cluster, "worker-0").String() {
		t.Errorf("MACs %s %s", s.Machines[1].MAC, s.Machines[2].MAC)
	}
	if !strings.HasSuffix(s.Machines[0].IgnitionSource, "bootstrap.ign") {
		t.Errorf("source %q", s.Machines[0].IgnitionSource)
	}

	cfg.Provision.InfraID = strings.Repeat("x", 60)
	if _, err := BuildSpec(cfg, a, Image{}); err == nil || !strings.Contains(err.Error(), "longer than 63") {
		t.Errorf("long name: err = %v", err)
	}
	cfg.Provision = nil
	if _, err := BuildSpec(cfg, a, Image{}); err == nil || !strings.Contains(err.Error(), "no provision section") {
		t.Errorf("no section: err = %v", err)
	}
}

// TestInfraID pins the order the mark is taken from: provision.infraID,
// then the installer's metadata.json, then the cluster name (all destroy
// knows without the assets).
func TestInfraID(t *testing.T) {
	for _, tc := range []struct {
		config, assets string
		noAssets       bool
		want           string
	}{
		{config: "ocp4-cfg", assets: "ocp4-x7k2p", want: "ocp4-cfg"},
		{assets: "ocp4-x7k2p", want: "ocp4-x7k2p"},
		{want: "ocp4"},
		{config: "ocp4-cfg", noAssets: true, want: "ocp4-cfg"},
		{noAssets: true, want: "ocp4"},
	} {
		cfg := &cluster.Config{Cluster: cluster.Cluster{Name: "ocp4"}, Provision: &cluster.Provision{InfraID: tc.config}}
		a := &Assets{InfraID: tc.assets}
		if tc.noAssets {
			a = nil
		}
		if got := InfraID(cfg, a); got != tc.want {
			t.Errorf("InfraID(provision.infraID %q, metadata.json %q, assets %v) = %q, want %q", tc.config, tc.assets, !tc.noAssets, got, tc.want)
		}
	}
	if got := InfraID(&cluster.Config{Cluster: cluster.Cluster{Name: "ocp4"}}, nil); got != "ocp4" {
		t.Errorf("InfraID without a provision section = %q", got)
	}
}

func TestWaitAddresses(t *testing.T) {
	f := newFake()
	spec := testSpec(0)
	if _, err := Apply(context.Background(), f, spec, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := WaitAddresses(ctx, f, spec, time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no addresses yet: err = %v, want the deadline", err)
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		f.mu.Lock()
		for _, v := range f.vms {
			v.Addresses = []netip.Addr{netip.MustParseAddr("192.0.2.1")}
		}
		f.mu.Unlock()
	}()
	rows, _, err := WaitAddresses(context.Background(), f, spec, time.Millisecond)
	if err != nil || len(rows) != 4 || len(rows[3].VM.Addresses) != 1 {
		t.Fatalf("rows %+v err %v", rows, err)
	}
}

func TestApplyCountsOnlyWhatWasMade(t *testing.T) {
	f := newFake()
	f.imageErr = errors.New("namespaces \"nope\" not found")
	res, err := Apply(context.Background(), f, testSpec(2), ApplyOptions{})
	if err == nil {
		t.Fatal("apply succeeded without its image")
	}
	if len(res.Created)+len(res.Completed)+len(res.Started) != 0 {
		t.Errorf("nothing was made, yet the result says %+v", res)
	}

	f = newFake()
	f.failOnce["ocp4-x7k2p-master-1"] = true
	var started []string
	res, err = Apply(context.Background(), f, testSpec(2), ApplyOptions{Progress: func(e Event) {
		if e.Stage == "running" {
			t.Errorf("%s shown running before the platform said so", e.Machine)
		}
		if e.Stage == "started" {
			started = append(started, e.Machine)
		}
	}})
	if err == nil {
		t.Fatal("apply hid master-1's failure")
	}
	if len(res.Created) != 5 || slices.Contains(res.Created, "ocp4-x7k2p-master-1") || len(started) != 0 {
		t.Errorf("created %v, started %v; want the 5 others created and none started", res.Created, started)
	}
}

func TestWaitRunning(t *testing.T) {
	f := newFake()
	spec := testSpec(1)
	spec.Machines[1].IPs = []netip.Addr{netip.MustParseAddr("192.168.126.10")}
	if _, err := Apply(context.Background(), f, spec, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	// Every VM runs; master-0 reports the wrong address, master-1 none.
	f.mu.Lock()
	for _, v := range f.vms {
		v.Power = PowerRunning
		v.Addresses = []netip.Addr{netip.MustParseAddr("10.0.0.9")}
	}
	f.vms["ocp4-x7k2p-master-0"].Addresses = []netip.Addr{netip.MustParseAddr("10.0.0.7")}
	f.vms["ocp4-x7k2p-master-1"].Addresses = nil
	f.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var lines []string
	_, err := WaitRunning(ctx, f, spec, 5*time.Millisecond, func(e Event) { lines = append(lines, e.Machine+": "+e.Stage) })
	if err == nil {
		t.Fatal("wait succeeded with two VMs not ready")
	}
	for _, want := range []string{"ocp4-x7k2p-master-0 (running at 10.0.0.7, expected 192.168.126.10)", "ocp4-x7k2p-master-1 (running, no address yet)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "bootstrap") {
		t.Errorf("error names a ready VM: %v", err)
	}
	if len(lines) != len(spec.Machines) {
		t.Errorf("progress lines %q; want one per machine (states did not change)", lines)
	}

	f.mu.Lock()
	f.vms["ocp4-x7k2p-master-0"].Addresses = []netip.Addr{netip.MustParseAddr("192.168.126.10")}
	f.vms["ocp4-x7k2p-master-1"].Addresses = []netip.Addr{netip.MustParseAddr("10.0.0.8")}
	f.mu.Unlock()
	if _, err := WaitRunning(context.Background(), f, spec, 5*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
}

func TestApplyImageStagesSayWhoFetches(t *testing.T) {
	for _, tt := range []struct {
		img  Image
		want string
	}{
		{Image{Path: "/cache/rhcos.qcow2", URL: "https://example.test/rhcos.qcow2"}, "image ready"},
		{Image{URL: "https://example.test/rhcos.qcow2"}, "image import begun on the platform"},
	} {
		spec := testSpec(0)
		spec.Image = tt.img
		var stages []string
		if _, err := Apply(context.Background(), newFake(), spec, ApplyOptions{NoStart: true, Progress: func(e Event) {
			if e.Machine == "" {
				stages = append(stages, e.Stage)
			}
		}}); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(stages, tt.want) {
			t.Errorf("image %+v: stages %q, want %q", tt.img, stages, tt.want)
		}
	}
}

// TestDestroyNodes: only the named nodes' VMs go, matched by their mark or,
// without one, by name; ready may refuse before anything is removed.
func TestDestroyNodes(t *testing.T) {
	f := newFake()
	spec := testSpec(2)
	if _, err := Apply(context.Background(), f, spec, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	f.vms["ocp4-x7k2p-bootstrap"].Node = "" // a mark without the node: matched by name
	refused := errors.New("not yet")
	if lines, err := DestroyNodes(context.Background(), f, spec.InfraID, []string{"bootstrap"}, func([]VM) error { return refused }); !errors.Is(err, refused) || len(lines) != 0 || len(f.vms) != 6 {
		t.Fatalf("refused: %v %v, %d VMs left", lines, err, len(f.vms))
	}
	lines, err := DestroyNodes(context.Background(), f, spec.InfraID, []string{"bootstrap"}, func(vms []VM) error {
		if len(vms) != 6 {
			return fmt.Errorf("ready saw %d VMs", len(vms))
		}
		return nil
	})
	if err != nil || !slices.Equal(lines, []string{"vm ocp4-x7k2p-bootstrap"}) {
		t.Fatalf("DestroyNodes: %v %v", lines, err)
	}
	if len(f.vms) != 5 || f.vms["ocp4-x7k2p-master-0"] == nil || f.vms["ocp4-x7k2p-worker-1"] == nil {
		t.Errorf("left %v", f.vms)
	}
	if lines, err := DestroyNodes(context.Background(), f, spec.InfraID, []string{"bootstrap"}, nil); err != nil || len(lines) != 0 {
		t.Errorf("second run: %v %v, want nothing to do", lines, err)
	}
}
