package kubevirt

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clienttesting "k8s.io/client-go/testing"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	"appliance/platform"
)

// newFake returns a provider on a fake API server holding objs.
func newFake(t *testing.T, opts Options, objs ...client.Object) (*Provider, client.Client, *bytes.Buffer) {
	t.Helper()
	s, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	// A plain tracker: the default one tracks managed fields through a
	// type converter that panics on the uint64 in VMI status.
	tracker := clienttesting.NewObjectTracker(s, serializer.NewCodecFactory(s).UniversalDecoder())
	c := fake.NewClientBuilder().WithScheme(s).WithObjectTracker(tracker).WithObjects(objs...).Build()
	var logs bytes.Buffer
	p, err := NewWithClient(c, opts, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	p.poll, p.wait = time.Millisecond, time.Second
	return p, c, &logs
}

// applyAll runs the engine's Apply, which calls PrepareImage, Create and
// Start as `appliance provision apply` does.
func applyAll(t *testing.T, p *Provider, spec *platform.Spec, noStart bool) *platform.Result {
	t.Helper()
	res, err := platform.Apply(context.Background(), p, spec, platform.ApplyOptions{Parallel: 4, NoStart: noStart})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return res
}

// snapshot maps kind/name to resourceVersion for every object in ns.
func snapshot(t *testing.T, c client.Client) map[string]string {
	t.Helper()
	out := map[string]string{}
	ctx := context.Background()
	var vms kubevirtv1.VirtualMachineList
	var dvs cdiv1.DataVolumeList
	var secs corev1.SecretList
	for _, l := range []client.ObjectList{&vms, &dvs, &secs} {
		if err := c.List(ctx, l, client.InNamespace("ocp")); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range vms.Items {
		out["vm/"+o.Name] = o.ResourceVersion
	}
	for _, o := range dvs.Items {
		out["dv/"+o.Name] = o.ResourceVersion
	}
	for _, o := range secs.Items {
		out["secret/"+o.Name] = o.ResourceVersion
	}
	return out
}

func TestApplyCreatesClusterObjects(t *testing.T) {
	p, c, _ := newFake(t, Options{Namespace: "ocp", Network: "ocp/machine-net", StorageClass: "fast"})
	spec := testSpec()
	ctx := context.Background()

	res := applyAll(t, p, spec, true)
	if len(res.Created) != 6 {
		t.Fatalf("created %v", res.Created)
	}
	objs := snapshot(t, c)
	if len(objs) != 6+6+1 {
		t.Errorf("objects = %v", objs)
	}
	for _, m := range spec.Machines {
		for _, k := range []string{"vm/" + m.Name, "secret/" + m.Name + "-ignition"} {
			if _, ok := objs[k]; !ok {
				t.Errorf("missing %s", k)
			}
		}
	}

	// The golden image as the cluster receives it.
	dv := &cdiv1.DataVolume{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ocp", Name: "ocp4-x7k2p-rhcos"}, dv); err != nil {
		t.Fatal(err)
	}
	if dv.Spec.Source.HTTP.URL != spec.Image.URL || dv.Labels[LabelInfraID] != testInfraID {
		t.Errorf("golden = %+v", dv)
	}
	if q := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]; q.String() != "17Gi" {
		t.Errorf("golden size %s", q.String())
	}

	// One VM read back from the API and serialised as a cluster stores it.
	vm := &kubevirtv1.VirtualMachine{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ocp", Name: "ocp4-x7k2p-master-1"}, vm); err != nil {
		t.Fatal(err)
	}
	vm.APIVersion, vm.Kind = "kubevirt.io/v1", "VirtualMachine"
	b, err := yaml.Marshal(vm)
	if err != nil {
		t.Fatal(err)
	}
	y := string(b)
	for _, want := range []string{
		"runStrategy: Halted",
		"macAddress: 52:54:00:7e:00:11",
		"networkName: ocp/machine-net",
		"    - bridge: {}\n",
		"secretRef:\n            name: ocp4-x7k2p-master-1-ignition",
		"pvc:\n          name: ocp4-x7k2p-rhcos\n          namespace: ocp",
		"storage: 120Gi",
		"storageClassName: fast",
		"appliance.io/infra-id: ocp4-x7k2p",
		"appliance.io/node: master-1",
		"appliance.io/role: master",
		"podAntiAffinity:\n          preferredDuringSchedulingIgnoredDuringExecution:",
		"topologyKey: kubernetes.io/hostname",
		"hostname: master-1",
		"cores: 4",
		"guest: 16Gi",
	} {
		if !strings.Contains(y, want) {
			t.Errorf("VM YAML lacks %q:\n%s", want, y)
			break
		}
	}

	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ocp", Name: "ocp4-x7k2p-bootstrap-ignition"}, sec); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sec.Data["userdata"], spec.Machines[0].Ignition) || sec.Labels[LabelRole] != "bootstrap" {
		t.Errorf("bootstrap secret = %v %q", sec.Labels, sec.Data["userdata"])
	}

	// List sees them all, halted, with MACs and node names.
	vms, err := p.List(ctx, testInfraID)
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != 6 {
		t.Fatalf("list = %+v", vms)
	}
	for _, v := range vms {
		if !v.Complete || v.Power != platform.PowerStopped || v.Node == "" || len(v.MAC) != 6 {
			t.Errorf("listed %+v", v)
		}
	}

	// Re-running changes nothing: no object created or rewritten.
	res = applyAll(t, p, spec, true)
	if len(res.Created)+len(res.Completed) != 0 || len(res.Existing) != 6 {
		t.Errorf("second apply: %+v", res)
	}
	for _, m := range spec.Machines {
		if err := p.Create(ctx, spec, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.PrepareImage(ctx, spec, nil); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, c); !mapsEqual(after, objs) {
		t.Errorf("re-run changed objects:\nbefore %v\nafter  %v", objs, after)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestResumeAfterInterruption(t *testing.T) {
	p, c, _ := newFake(t, Options{Namespace: "ocp", Network: "machine-net"})
	spec := testSpec()
	ctx := context.Background()
	if err := p.PrepareImage(ctx, spec, nil); err != nil {
		t.Fatal(err)
	}
	// Killed after master-0's Secret, before its VM.
	if err := p.ensureSecret(ctx, BuildSecret(spec, spec.Machines[1], p.opts), testInfraID); err != nil {
		t.Fatal(err)
	}
	// master-1 built, but its Secret lost (deleted by hand).
	if err := p.Create(ctx, spec, spec.Machines[2], nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, BuildSecret(spec, spec.Machines[2], p.opts)); err != nil {
		t.Fatal(err)
	}
	vms, err := p.List(ctx, testInfraID)
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != 1 || vms[0].Complete {
		t.Fatalf("list after interruption = %+v", vms)
	}
	plan := platform.Diff(spec, vms)
	if plan.Items[2].Action != platform.ActionComplete {
		t.Errorf("plan for master-1 = %s", plan.Items[2].Action)
	}

	// Ignition regenerated meanwhile: the Secret is brought up to date.
	spec.Machines[1].Ignition = []byte(`{"ignition":{"version":"3.2.0"},"new":true}`)
	res := applyAll(t, p, spec, false)
	if len(res.Created) != 5 || len(res.Completed) != 1 || len(res.Started) != 6 {
		t.Errorf("resumed apply: %+v", res)
	}
	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ocp", Name: "ocp4-x7k2p-master-0-ignition"}, sec); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sec.Data["userdata"], spec.Machines[1].Ignition) {
		t.Errorf("secret not updated: %q", sec.Data["userdata"])
	}
	vms, err = p.List(ctx, testInfraID)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vms {
		if !v.Complete {
			t.Errorf("still incomplete: %+v", v)
		}
	}
	if n := len(snapshot(t, c)); n != 13 {
		t.Errorf("%d objects, want 13", n)
	}
}

func TestStart(t *testing.T) {
	p, c, _ := newFake(t, Options{Namespace: "ocp", Network: "machine-net"})
	spec := testSpec()
	ctx := context.Background()
	m := spec.Machines[3]
	if err := p.Start(ctx, spec, m); err == nil || !strings.Contains(err.Error(), "run apply") {
		t.Errorf("start before create: %v", err)
	}
	if err := p.Create(ctx, spec, m, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx, spec, m); err != nil {
		t.Fatal(err)
	}
	vm := &kubevirtv1.VirtualMachine{}
	key := client.ObjectKey{Namespace: "ocp", Name: m.Name}
	if err := c.Get(ctx, key, vm); err != nil {
		t.Fatal(err)
	}
	if vm.Spec.RunStrategy == nil || *vm.Spec.RunStrategy != kubevirtv1.RunStrategyAlways {
		t.Errorf("runStrategy = %v", vm.Spec.RunStrategy)
	}
	rv := vm.ResourceVersion
	if err := p.Start(ctx, spec, m); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, vm); err != nil {
		t.Fatal(err)
	}
	if vm.ResourceVersion != rv {
		t.Errorf("second start rewrote the VM")
	}

	// A cluster running it reports power and addresses.
	vm.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusRunning
	if err := c.Update(ctx, vm); err != nil {
		t.Fatal(err)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: "ocp", Labels: vm.Spec.Template.ObjectMeta.Labels}}
	vmi.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: "nic0", IPs: []string{"192.168.126.11"}}}
	if err := c.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	vms, err := p.List(ctx, testInfraID)
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != 1 || vms[0].Power != platform.PowerRunning || len(vms[0].Addresses) != 1 || vms[0].Addresses[0].String() != "192.168.126.11" {
		t.Errorf("list = %+v", vms)
	}

	// RerunOnFailure when asked.
	p2, c2, _ := newFake(t, Options{Namespace: "ocp", Network: "machine-net", RunStrategy: kubevirtv1.RunStrategyRerunOnFailure})
	if err := p2.Create(ctx, spec, m, nil); err != nil {
		t.Fatal(err)
	}
	if err := p2.Start(ctx, spec, m); err != nil {
		t.Fatal(err)
	}
	if err := c2.Get(ctx, key, vm); err != nil {
		t.Fatal(err)
	}
	if *vm.Spec.RunStrategy != kubevirtv1.RunStrategyRerunOnFailure {
		t.Errorf("runStrategy = %s", *vm.Spec.RunStrategy)
	}
}

// foreign returns objects that look like ours by name but are not: another
// cluster's, or unlabelled.
func foreign() []client.Object {
	other := map[string]string{LabelInfraID: "ocp4-x7k2p-old"}
	return []client.Object{
		&kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "ocp4-x7k2p-master-0-old", Namespace: "ocp", Labels: other}},
		&kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "ocp4-x7k2p-worker-9", Namespace: "ocp"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ocp4-x7k2p-master-0-ignition-backup", Namespace: "ocp", Labels: other}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ocp4-x7k2p-pull-secret", Namespace: "ocp"}},
		&cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "ocp4-x7k2p-rhcos-old", Namespace: "ocp", Labels: other}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "ocp4-x7k2p-data", Namespace: "ocp"}},
		// Ours by label but in another namespace: not in scope.
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ocp4-x7k2p-master-0-ignition", Namespace: "elsewhere", Labels: map[string]string{LabelInfraID: testInfraID}}},
	}
}

func TestDestroyRemovesExactlyOurs(t *testing.T) {
	p, c, _ := newFake(t, Options{Namespace: "ocp", Network: "machine-net"}, foreign()...)
	spec := testSpec()
	ctx := context.Background()
	applyAll(t, p, spec, false)
	// A PVC CDI made for a root disk, labelled like its DataVolume.
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "ocp4-x7k2p-master-0-rootdisk", Namespace: "ocp", Labels: map[string]string{LabelInfraID: testInfraID}}}
	if err := c.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}

	lines, err := p.Destroy(ctx, testInfraID)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 6+1+6+1 {
		t.Errorf("destroy lines (%d):\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !slices.Contains(lines, "virtualmachine ocp/ocp4-x7k2p-bootstrap") || !slices.Contains(lines, "datavolume ocp/ocp4-x7k2p-rhcos") {
		t.Errorf("lines = %v", lines)
	}
	vms, err := p.List(ctx, testInfraID)
	if err != nil || len(vms) != 0 {
		t.Errorf("after destroy: %v %v", vms, err)
	}
	for _, o := range foreign() {
		got := o.DeepCopyObject().(client.Object)
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Errorf("foreign %T %s/%s: %v", o, o.GetNamespace(), o.GetName(), err)
		}
	}
	// Destroying again is a no-op.
	lines, err = p.Destroy(ctx, testInfraID)
	if err != nil || len(lines) != 0 {
		t.Errorf("second destroy: %v %v", lines, err)
	}
	if _, err := p.Destroy(ctx, ""); err == nil {
		t.Error("destroy with empty infra ID accepted")
	}
}

func TestDestroyWaitsForTerminating(t *testing.T) {
	// A VM held by a finalizer stays: destroy reports it after its wait.
	stuck := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{
		Name: "ocp4-x7k2p-master-2", Namespace: "ocp",
		Labels:     map[string]string{LabelInfraID: testInfraID},
		Finalizers: []string{"example.com/hold"},
	}}
	p, _, _ := newFake(t, Options{Namespace: "ocp", Network: "machine-net"}, stuck)
	p.wait = 50 * time.Millisecond
	lines, err := p.Destroy(context.Background(), testInfraID)
	if len(lines) != 1 || err == nil || !strings.Contains(err.Error(), "ocp4-x7k2p-master-2") {
		t.Errorf("lines %v err %v", lines, err)
	}
}

func TestRefusesForeignObjects(t *testing.T) {
	spec := testSpec()
	m := spec.Machines[1]
	ctx := context.Background()
	tests := []struct {
		name string
		obj  client.Object
		do   func(p *Provider) error
		want string
	}{
		{"VM with our name but no label",
			&kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: "ocp"}},
			func(p *Provider) error { return p.Create(ctx, spec, m, nil) }, "VirtualMachine ocp/ocp4-x7k2p-master-0 exists without label"},
		{"Secret with our name, other cluster",
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: m.Name + "-ignition", Namespace: "ocp", Labels: map[string]string{LabelInfraID: "other"}}},
			func(p *Provider) error { return p.Create(ctx, spec, m, nil) }, "Secret ocp/ocp4-x7k2p-master-0-ignition exists without label"},
		{"golden DataVolume of someone else",
			&cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "ocp4-x7k2p-rhcos", Namespace: "ocp"}},
			func(p *Provider) error { return p.PrepareImage(ctx, spec, nil) }, "DataVolume ocp/ocp4-x7k2p-rhcos exists without label"},
		{"start a VM that is not ours",
			&kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: "ocp"}},
			func(p *Provider) error { return p.Start(ctx, spec, m) }, "not ours"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c, _ := newFake(t, Options{Namespace: "ocp", Network: "machine-net"}, tt.obj)
			before := tt.obj.DeepCopyObject().(client.Object)
			if err := c.Get(ctx, client.ObjectKeyFromObject(tt.obj), before); err != nil {
				t.Fatal(err)
			}
			err := tt.do(p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			after := tt.obj.DeepCopyObject().(client.Object)
			if err := c.Get(ctx, client.ObjectKeyFromObject(tt.obj), after); err != nil {
				t.Fatal(err)
			}
			if after.GetResourceVersion() != before.GetResourceVersion() {
				t.Error("foreign object modified")
			}
		})
	}
}

func TestPrepareImage(t *testing.T) {
	ctx := context.Background()
	golden := func(sha string, phase cdiv1.DataVolumePhase, progress string) *cdiv1.DataVolume {
		spec := testSpec()
		spec.Image.SHA256 = sha
		dv := BuildGoldenDataVolume(spec, testOptions(), 16)
		dv.Status.Phase = phase
		dv.Status.Progress = cdiv1.DataVolumeProgress(progress)
		return dv
	}
	tests := []struct {
		name         string
		objs         []client.Object
		mut          func(*platform.Spec)
		wantSHA      string // annotation on the DataVolume after, "" for none
		wantReplaced bool
		wantProgress [2]int64
	}{
		{"creates", nil, nil, "ab12cd34", false, [2]int64{0, 0}},
		{"reuses import in progress", []client.Object{golden("ab12cd34", cdiv1.ImportInProgress, "25.00%")}, nil, "ab12cd34", false, [2]int64{1 << 28, 1 << 30}},
		{"reuses finished import", []client.Object{golden("ab12cd34", cdiv1.Succeeded, "100.0%")}, nil, "ab12cd34", false, [2]int64{1 << 30, 1 << 30}},
		{"replaces other image", []client.Object{golden("0ld", cdiv1.Succeeded, "100.0%")}, nil, "ab12cd34", true, [2]int64{0, 0}},
		{"same digest from another mirror is kept", []client.Object{golden("ab12cd34", cdiv1.Succeeded, "100.0%")}, func(s *platform.Spec) { s.Image.URL = "https://mirror.example.org/rhcos.qcow2" }, "ab12cd34", false, [2]int64{1 << 30, 1 << 30}},
		{"replaces failed import", []client.Object{golden("ab12cd34", cdiv1.Failed, "")}, nil, "ab12cd34", true, [2]int64{0, 0}},
		{"reuses PVC left by a collected DataVolume", []client.Object{&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
			Name: "ocp4-x7k2p-rhcos", Namespace: "ocp", Labels: map[string]string{LabelInfraID: testInfraID}}}}, nil, "", false, [2]int64{-1, -1}},
		{"container disk needs none", nil, func(s *platform.Spec) { s.Image = platform.Image{ContainerDisk: "quay.io/x/rhcos:1"} }, "", false, [2]int64{-1, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c, _ := newFake(t, Options{Namespace: "ocp", Network: "machine-net", StorageClass: "fast"}, tt.objs...)
			spec := testSpec()
			if tt.mut != nil {
				tt.mut(spec)
			}
			prog := [2]int64{-1, -1}
			if err := p.PrepareImage(ctx, spec, func(d, tot int64) { prog = [2]int64{d, tot} }); err != nil {
				t.Fatal(err)
			}
			if prog != tt.wantProgress {
				t.Errorf("progress %v, want %v", prog, tt.wantProgress)
			}
			dv := &cdiv1.DataVolume{}
			err := c.Get(ctx, client.ObjectKey{Namespace: "ocp", Name: "ocp4-x7k2p-rhcos"}, dv)
			if tt.wantSHA == "" {
				if err == nil {
					t.Errorf("unexpected DataVolume %+v", dv.ObjectMeta)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if dv.Annotations[AnnotationImageSHA256] != tt.wantSHA {
				t.Errorf("sha annotation %q", dv.Annotations[AnnotationImageSHA256])
			}
			if replaced := dv.Status.Phase == ""; replaced != tt.wantReplaced && len(tt.objs) > 0 {
				t.Errorf("replaced = %v, want %v", replaced, tt.wantReplaced)
			}
		})
	}

	// Waiting for the import follows CDI's progress to the end.
	running := BuildGoldenDataVolume(testSpec(), testOptions(), 16)
	running.Status.Phase, running.Status.Progress = cdiv1.ImportInProgress, "10.0%"
	pw, cw, _ := newFake(t, Options{Namespace: "ocp", Network: "machine-net", WaitForImport: true}, running)
	go func() {
		time.Sleep(20 * time.Millisecond)
		dv := &cdiv1.DataVolume{}
		if err := cw.Get(ctx, client.ObjectKeyFromObject(running), dv); err == nil {
			dv.Status.Phase, dv.Status.Progress = cdiv1.Succeeded, "100.0%"
			_ = cw.Update(ctx, dv)
		}
	}()
	var seen []int64
	if err := pw.PrepareImage(ctx, testSpec(), func(d, _ int64) { seen = append(seen, d) }); err != nil {
		t.Fatal(err)
	}
	if len(seen) < 2 || seen[0] != (1<<30)/10 || seen[len(seen)-1] != 1<<30 {
		t.Errorf("progress %v", seen)
	}

	// A mirror password in the URL stays out of logs and annotations.
	p, c, logs := newFake(t, Options{Namespace: "ocp", Network: "machine-net"})
	spec := testSpec()
	spec.Image.URL = "https://user:hunter2-mirror@mirror.example.org/rhcos.qcow2"
	if err := p.PrepareImage(ctx, spec, nil); err != nil {
		t.Fatal(err)
	}
	dv := &cdiv1.DataVolume{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ocp", Name: "ocp4-x7k2p-rhcos"}, dv); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "hunter2") || strings.Contains(dv.Annotations[AnnotationImageSource], "hunter2") {
		t.Errorf("password leaked: %s / %v", logs.String(), dv.Annotations)
	}

	spec.Image.URL = ""
	if err := p.PrepareImage(ctx, spec, nil); err == nil || !strings.Contains(err.Error(), "no URL") {
		t.Errorf("no URL: %v", err)
	}
}
