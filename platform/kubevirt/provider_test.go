package kubevirt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"appliance/platform"
)

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
func snapshot(t *testing.T, c client.Client, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	ctx := context.Background()
	var vms kubevirtv1.VirtualMachineList
	var dvs cdiv1.DataVolumeList
	var secs corev1.SecretList
	for _, l := range []client.ObjectList{&vms, &dvs, &secs} {
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
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

// seed creates objs as other programs would have: a DataVolume's status is
// written after the create (status subresource, as CDI does), and a PVC
// loses the protection finalizer the API server adds, whose controller
// does not run here (it would hold every PVC's deletion forever).
func seed(t *testing.T, objs ...client.Object) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		o = o.DeepCopyObject().(client.Object)
		var status cdiv1.DataVolumeStatus
		dv, isDV := o.(*cdiv1.DataVolume)
		if isDV {
			status = dv.Status
		}
		if err := kube.c.Create(ctx, o); err != nil {
			t.Fatalf("seed %T %s: %v", o, o.GetName(), err)
		}
		if isDV && status.Phase != "" {
			dv.Status = status
			if err := kube.c.Status().Update(ctx, dv); err != nil {
				t.Fatalf("seed status of %s: %v", dv.Name, err)
			}
		}
		if pvc, ok := o.(*corev1.PersistentVolumeClaim); ok && len(pvc.Finalizers) > 0 {
			pvc.Finalizers = nil
			if err := kube.c.Update(ctx, pvc); err != nil {
				t.Fatalf("seed %s without finalizers: %v", pvc.Name, err)
			}
		}
	}
}

// testPVC is a claim as CDI would make it.
func testPVC(ns, name string, labels map[string]string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: gib(1)}},
		},
	}
}

func TestApplyCreatesClusterObjects(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	p, _ := newProvider(t, ns, func(o *Options) { o.Network = ns + "/machine-net" })
	c := kube.c
	spec := testSpec()
	ctx := context.Background()

	res := applyAll(t, p, spec, true)
	if len(res.Created) != 6 {
		t.Fatalf("created %v", res.Created)
	}
	objs := snapshot(t, c, ns)
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

	// The golden image as the API server stored it.
	dv := &cdiv1.DataVolume{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ocp4-x7k2p-rhcos"}, dv); err != nil {
		t.Fatal(err)
	}
	if dv.Spec.Source.HTTP.URL != spec.Image.URL || dv.Labels[LabelInfraID] != testInfraID {
		t.Errorf("golden = %+v", dv)
	}
	if q := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]; q.String() != "17Gi" {
		t.Errorf("golden size %s", q.String())
	}

	// One VM read back from the API server: nothing pruned on the way.
	vm := &kubevirtv1.VirtualMachine{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ocp4-x7k2p-master-1"}, vm); err != nil {
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
		"networkName: " + ns + "/machine-net",
		"    - bridge: {}\n",
		"secretRef:\n            name: ocp4-x7k2p-master-1-ignition",
		"pvc:\n          name: ocp4-x7k2p-rhcos\n          namespace: " + ns,
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
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ocp4-x7k2p-bootstrap-ignition"}, sec); err != nil {
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
	if after := snapshot(t, c, ns); !mapsEqual(after, objs) {
		t.Errorf("re-run changed objects:\nbefore %v\nafter  %v", objs, after)
	}
}

// TestStrictCreates proves the provider's client is strict: a field the
// CRD does not know fails the create instead of vanishing.
func TestStrictCreates(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	p, _ := newProvider(t, ns, nil)
	spec := testSpec()
	vm := BuildVirtualMachine(spec, spec.Machines[1], p.opts)
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(vm)
	if err != nil {
		t.Fatal(err)
	}
	ifc := u["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["domain"].(map[string]any)["devices"].(map[string]any)["interfaces"].([]any)[0].(map[string]any)
	ifc["macAdress"] = ifc["macAddress"] // misspelt
	obj := &unstructured.Unstructured{Object: u}
	obj.SetAPIVersion("kubevirt.io/v1")
	obj.SetKind("VirtualMachine")
	err = p.c.Create(context.Background(), obj)
	if err == nil || !strings.Contains(err.Error(), `unknown field "spec.template.spec.domain.devices.interfaces[0].macAdress"`) {
		t.Fatalf("create with a misspelt field: %v; want a strict-decoding refusal", err)
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
	t.Parallel()
	ns := newNamespace(t)
	p, _ := newProvider(t, ns, nil)
	c := kube.c
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
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ocp4-x7k2p-master-0-ignition"}, sec); err != nil {
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
	if n := len(snapshot(t, c, ns)); n != 13 {
		t.Errorf("%d objects, want 13", n)
	}
}

// TestApplyInterruptedByCancel stops an apply while its creates are in
// flight, then resumes it: nothing is made twice and everything is made.
func TestApplyInterruptedByCancel(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	p, _ := newProvider(t, ns, nil)
	spec := testSpec()
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	_, err := platform.Apply(ctx, p, spec, platform.ApplyOptions{Parallel: 2, Progress: func(e platform.Event) {
		if e.Stage == "virtual machine" && n.Add(1) == 2 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted apply: %v; want context.Canceled", err)
	}
	res := applyAll(t, p, spec, false)
	if got := len(res.Created) + len(res.Completed) + len(res.Existing); got != 6 || len(res.Started) != 6 {
		t.Errorf("resumed apply: %+v", res)
	}
	if n := len(snapshot(t, kube.c, ns)); n != 13 {
		t.Errorf("%d objects after resume, want 13", n)
	}
}

func TestStart(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	p, _ := newProvider(t, ns, nil)
	c := kube.c
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
	key := client.ObjectKey{Namespace: ns, Name: m.Name}
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
	// Started is not running: KubeVirt has not said so.
	vms, err := p.List(ctx, testInfraID)
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != 1 || vms[0].Power != platform.PowerStarting {
		t.Errorf("just started: %+v; want starting", vms)
	}

	// KubeVirt running it reports power and addresses.
	vm.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusRunning
	if err := c.Status().Update(ctx, vm); err != nil {
		t.Fatal(err)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: ns, Labels: vm.Spec.Template.ObjectMeta.Labels},
		Spec: vm.Spec.Template.Spec}
	vmi.Status.Phase = kubevirtv1.Running
	vmi.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: "nic0", IPs: []string{"192.168.126.11/24"}}}
	if err := c.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	vms, err = p.List(ctx, testInfraID)
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != 1 || vms[0].Power != platform.PowerRunning || len(vms[0].Addresses) != 1 || vms[0].Addresses[0].String() != "192.168.126.11" {
		t.Errorf("list = %+v", vms)
	}

	// A VM someone switched to the older `running` field ends with the run
	// strategy alone (KubeVirt refuses both).
	m2 := spec.Machines[4]
	old := BuildVirtualMachine(spec, m2, p.opts)
	yes := true
	old.Spec.RunStrategy, old.Spec.Running = nil, &yes
	seed(t, old)
	if err := p.Start(ctx, spec, m2); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(old), vm); err != nil {
		t.Fatal(err)
	}
	if vm.Spec.Running != nil || vm.Spec.RunStrategy == nil || *vm.Spec.RunStrategy != kubevirtv1.RunStrategyAlways {
		t.Errorf("running %v, runStrategy %v; want runStrategy Always alone", vm.Spec.Running, vm.Spec.RunStrategy)
	}

	// RerunOnFailure when asked.
	ns2 := newNamespace(t)
	p2, _ := newProvider(t, ns2, func(o *Options) { o.RunStrategy = kubevirtv1.RunStrategyRerunOnFailure })
	if err := p2.Create(ctx, spec, m, nil); err != nil {
		t.Fatal(err)
	}
	if err := p2.Start(ctx, spec, m); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns2, Name: m.Name}, vm); err != nil {
		t.Fatal(err)
	}
	if *vm.Spec.RunStrategy != kubevirtv1.RunStrategyRerunOnFailure {
		t.Errorf("runStrategy = %s", *vm.Spec.RunStrategy)
	}
}

// foreign returns objects that look like ours by name but are not: another
// cluster's, or unlabelled, and one of ours in another namespace.
func foreign(ns, elsewhere string) []client.Object {
	spec := testSpec()
	opts := Options{Namespace: ns, Network: "machine-net", StorageClass: "fast"}.withDefaults()
	other := map[string]string{LabelInfraID: "ocp4-x7k2p-old"}
	old := BuildVirtualMachine(spec, spec.Machines[1], opts)
	old.Name, old.Labels = "ocp4-x7k2p-master-0-old", other
	bare := BuildVirtualMachine(spec, spec.Machines[5], opts)
	bare.Name, bare.Labels = "ocp4-x7k2p-worker-9", nil
	dv := BuildGoldenDataVolume(spec, opts, 16)
	dv.Name, dv.Labels = "ocp4-x7k2p-rhcos-old", other
	return []client.Object{
		old, bare, dv,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ocp4-x7k2p-master-0-ignition-backup", Namespace: ns, Labels: other}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ocp4-x7k2p-pull-secret", Namespace: ns}},
		testPVC(ns, "ocp4-x7k2p-data", nil),
		// Ours by label but in another namespace: not in scope.
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ocp4-x7k2p-master-0-ignition", Namespace: elsewhere, Labels: map[string]string{LabelInfraID: testInfraID}}},
	}
}

// TestDestroyRemovesExactlyOurs runs destroy with the garbage collector at
// work: the VMs go in the foreground, after the disks KubeVirt made for
// them (here made by the test, owned by their VM as KubeVirt owns them).
func TestDestroyRemovesExactlyOurs(t *testing.T) {
	t.Parallel()
	ns, elsewhere := newNamespace(t), newNamespace(t)
	seed(t, foreign(ns, elsewhere)...)
	p, _ := newProvider(t, ns, nil)
	c := kube.c
	spec := testSpec()
	ctx := context.Background()
	applyAll(t, p, spec, false)

	// What KubeVirt and CDI would make: a root DataVolume owned by each VM
	// (blocking its foreground deletion) and the DataVolume's PVC.
	for _, m := range spec.Machines {
		vm := &kubevirtv1.VirtualMachine{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: m.Name}, vm); err != nil {
			t.Fatal(err)
		}
		tmpl := vm.Spec.DataVolumeTemplates[0]
		dv := &cdiv1.DataVolume{ObjectMeta: *tmpl.ObjectMeta.DeepCopy(), Spec: tmpl.Spec}
		dv.Namespace = ns
		dv.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)}
		seed(t, dv)
		if err := c.Get(ctx, client.ObjectKeyFromObject(dv), dv); err != nil {
			t.Fatal(err)
		}
		pvc := testPVC(ns, dv.Name, dv.Labels)
		pvc.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(dv, cdiv1.SchemeGroupVersion.WithKind("DataVolume"))}
		seed(t, pvc)
	}

	lines, err := p.Destroy(ctx, testInfraID)
	if err != nil {
		t.Fatal(err)
	}
	// 6 VMs, the golden and 6 root DataVolumes (unless the collector was
	// quicker), 6 Secrets, 6 PVCs (likewise).
	if n := strings.Count(strings.Join(lines, "\n"), "virtualmachine "); n != 6 {
		t.Errorf("destroy lines (%d VMs):\n%s", n, strings.Join(lines, "\n"))
	}
	if !slices.Contains(lines, "virtualmachine "+ns+"/ocp4-x7k2p-bootstrap") || !slices.Contains(lines, "datavolume "+ns+"/ocp4-x7k2p-rhcos") ||
		!slices.Contains(lines, "secret "+ns+"/ocp4-x7k2p-worker-1-ignition") {
		t.Errorf("lines = %v", lines)
	}
	for _, l := range []client.ObjectList{&kubevirtv1.VirtualMachineList{}, &cdiv1.DataVolumeList{}, &corev1.SecretList{}, &corev1.PersistentVolumeClaimList{}} {
		if err := c.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{LabelInfraID: testInfraID}); err != nil {
			t.Fatal(err)
		}
		if objs, _ := meta.ExtractList(l); len(objs) != 0 {
			t.Errorf("left after destroy: %T with %d items", l, len(objs))
		}
	}
	for _, o := range foreign(ns, elsewhere) {
		got := o.DeepCopyObject().(client.Object)
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Errorf("foreign %T %s/%s: %v", o, o.GetNamespace(), o.GetName(), err)
		} else if got.GetDeletionTimestamp() != nil {
			t.Errorf("foreign %T %s/%s is being deleted", o, o.GetNamespace(), o.GetName())
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
	t.Parallel()
	ns := newNamespace(t)
	// A VM held by a finalizer stays: destroy names it after its wait.
	spec := testSpec()
	stuck := BuildVirtualMachine(spec, spec.Machines[3], Options{Namespace: ns, Network: "machine-net"}.withDefaults())
	stuck.Finalizers = []string{"example.com/hold"}
	seed(t, stuck)
	t.Cleanup(func() {
		vm := &kubevirtv1.VirtualMachine{}
		if err := kube.c.Get(context.Background(), client.ObjectKeyFromObject(stuck), vm); err == nil {
			vm.Finalizers = nil
			_ = kube.c.Update(context.Background(), vm)
		}
	})
	p, _ := newProvider(t, ns, nil)
	p.wait = 2 * time.Second // long enough for a first look on a loaded machine
	lines, err := p.Destroy(context.Background(), testInfraID)
	if len(lines) != 1 || err == nil || !strings.Contains(err.Error(), "virtualmachine/ocp4-x7k2p-master-2") {
		t.Errorf("lines %v err %v", lines, err)
	}
}

func TestRefusesForeignObjects(t *testing.T) {
	t.Parallel()
	spec := testSpec()
	m := spec.Machines[1]
	ctx := context.Background()
	tests := []struct {
		name string
		obj  func(ns string) client.Object
		do   func(p *Provider) error
		want string
	}{
		{"VM with our name but no label",
			func(ns string) client.Object {
				vm := BuildVirtualMachine(spec, m, Options{Namespace: ns, Network: "machine-net"}.withDefaults())
				vm.Labels = nil
				return vm
			},
			func(p *Provider) error { return p.Create(ctx, spec, m, nil) }, "VirtualMachine %s/ocp4-x7k2p-master-0 exists without label"},
		{"Secret with our name, other cluster",
			func(ns string) client.Object {
				return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: m.Name + "-ignition", Namespace: ns, Labels: map[string]string{LabelInfraID: "other"}}}
			},
			func(p *Provider) error { return p.Create(ctx, spec, m, nil) }, "Secret %s/ocp4-x7k2p-master-0-ignition exists without label"},
		{"golden DataVolume of someone else",
			func(ns string) client.Object {
				dv := BuildGoldenDataVolume(spec, Options{Namespace: ns}, 16)
				dv.Labels = nil
				return dv
			},
			func(p *Provider) error { return p.PrepareImage(ctx, spec, nil) }, "DataVolume %s/ocp4-x7k2p-rhcos exists without label"},
		{"start a VM that is not ours",
			func(ns string) client.Object {
				vm := BuildVirtualMachine(spec, m, Options{Namespace: ns, Network: "machine-net"}.withDefaults())
				vm.Labels = map[string]string{LabelInfraID: "other"}
				return vm
			},
			func(p *Provider) error { return p.Start(ctx, spec, m) }, "not ours"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			obj := tt.obj(ns)
			seed(t, obj)
			p, _ := newProvider(t, ns, nil)
			before := obj.DeepCopyObject().(client.Object)
			if err := kube.c.Get(ctx, client.ObjectKeyFromObject(obj), before); err != nil {
				t.Fatal(err)
			}
			err := tt.do(p)
			want := tt.want
			if strings.Contains(want, "%s") {
				want = fmt.Sprintf(want, ns)
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %v, want %q", err, want)
			}
			after := obj.DeepCopyObject().(client.Object)
			if err := kube.c.Get(ctx, client.ObjectKeyFromObject(obj), after); err != nil {
				t.Fatal(err)
			}
			if after.GetResourceVersion() != before.GetResourceVersion() {
				t.Error("foreign object modified")
			}
		})
	}
}

func TestPrepareImage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	golden := func(ns, sha string, phase cdiv1.DataVolumePhase, progress string) *cdiv1.DataVolume {
		spec := testSpec()
		spec.Image.SHA256 = sha
		dv := BuildGoldenDataVolume(spec, Options{Namespace: ns, StorageClass: "fast"}, 16)
		dv.Status.Phase = phase
		dv.Status.Progress = cdiv1.DataVolumeProgress(progress)
		return dv
	}
	tests := []struct {
		name         string
		objs         func(ns string) []client.Object
		mut          func(*platform.Spec)
		wantSHA      string // annotation on the DataVolume after, "" for none
		wantReplaced bool
		wantProgress [2]int64
	}{
		{"creates", nil, nil, "ab12cd34", false, [2]int64{-1, -1}},
		{"reuses import in progress", func(ns string) []client.Object {
			return []client.Object{golden(ns, "ab12cd34", cdiv1.ImportInProgress, "25.00%")}
		}, nil, "ab12cd34", false, [2]int64{1 << 28, 1 << 30}},
		{"reuses finished import", func(ns string) []client.Object {
			return []client.Object{golden(ns, "ab12cd34", cdiv1.Succeeded, "100.0%")}
		}, nil, "ab12cd34", false, [2]int64{1 << 30, 1 << 30}},
		{"replaces other image", func(ns string) []client.Object {
			return []client.Object{golden(ns, "0ld", cdiv1.Succeeded, "100.0%")}
		}, nil, "ab12cd34", true, [2]int64{-1, -1}},
		{"same digest from another mirror is kept", func(ns string) []client.Object {
			return []client.Object{golden(ns, "ab12cd34", cdiv1.Succeeded, "100.0%")}
		}, func(s *platform.Spec) { s.Image.URL = "https://mirror.example.org/rhcos.qcow2" }, "ab12cd34", false, [2]int64{1 << 30, 1 << 30}},
		{"replaces failed import", func(ns string) []client.Object {
			return []client.Object{golden(ns, "ab12cd34", cdiv1.Failed, "")}
		}, nil, "ab12cd34", true, [2]int64{-1, -1}},
		{"reuses PVC left by a collected DataVolume", func(ns string) []client.Object {
			return []client.Object{testPVC(ns, "ocp4-x7k2p-rhcos", map[string]string{LabelInfraID: testInfraID})}
		}, nil, "", false, [2]int64{-1, -1}},
		{"container disk needs none", nil, func(s *platform.Spec) { s.Image = platform.Image{ContainerDisk: "quay.io/x/rhcos:1"} }, "", false, [2]int64{-1, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			if tt.objs != nil {
				seed(t, tt.objs(ns)...)
			}
			p, _ := newProvider(t, ns, nil)
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
			err := kube.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ocp4-x7k2p-rhcos"}, dv)
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
			if replaced := dv.Status.Phase == ""; replaced != tt.wantReplaced && tt.objs != nil {
				t.Errorf("replaced = %v, want %v", replaced, tt.wantReplaced)
			}
		})
	}

	t.Run("waits for the import", func(t *testing.T) {
		t.Parallel()
		// Waiting for the import follows CDI's progress to the end.
		ns := newNamespace(t)
		running := golden(ns, "ab12cd34", cdiv1.ImportInProgress, "10.0%")
		seed(t, running)
		pw, _ := newProvider(t, ns, func(o *Options) { o.WaitForImport = true })
		done := make(chan error, 1)
		go func() {
			time.Sleep(100 * time.Millisecond)
			dv := &cdiv1.DataVolume{}
			err := kube.c.Get(ctx, client.ObjectKeyFromObject(running), dv)
			if err == nil {
				dv.Status.Phase, dv.Status.Progress = cdiv1.Succeeded, "100.0%"
				err = kube.c.Status().Update(ctx, dv)
			}
			done <- err
		}()
		var seen []int64
		if err := pw.PrepareImage(ctx, testSpec(), func(d, _ int64) { seen = append(seen, d) }); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(seen) < 2 || seen[0] != (1<<30)/10 || seen[len(seen)-1] != 1<<30 {
			t.Errorf("progress %v", seen)
		}
	})

	t.Run("no password in logs", func(t *testing.T) {
		t.Parallel()
		// A mirror password in the URL stays out of logs and annotations.
		ns := newNamespace(t)
		p, logs := newProvider(t, ns, nil)
		spec := testSpec()
		spec.Image.URL = "https://user:hunter2-mirror@mirror.example.org/rhcos.qcow2"
		if err := p.PrepareImage(ctx, spec, nil); err != nil {
			t.Fatal(err)
		}
		dv := &cdiv1.DataVolume{}
		if err := kube.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ocp4-x7k2p-rhcos"}, dv); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(logs.String(), "hunter2") || strings.Contains(dv.Annotations[AnnotationImageSource], "hunter2") {
			t.Errorf("password leaked: %s / %v", logs.String(), dv.Annotations)
		}
		spec.Image.URL = ""
		if err := p.PrepareImage(ctx, spec, nil); err == nil || !strings.Contains(err.Error(), "no URL") {
			t.Errorf("no URL: %v", err)
		}
	})
}

// TestWaitRunning: apply --wait's wait on the KubeVirt provider, with the
// test writing what KubeVirt would (the VM's printable status, the
// instance and its interfaces' addresses).
func TestWaitRunning(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	p, _ := newProvider(t, ns, nil)
	spec := testSpec()
	spec.Machines = spec.Machines[:3]
	for i := range spec.Machines {
		spec.Machines[i].IPs = []netip.Addr{netip.MustParseAddr(fmt.Sprintf("192.168.126.%d", 9+i))}
	}
	applyAll(t, p, spec, false)
	ctx := context.Background()
	run := func(m platform.Machine, ip string) {
		vm := &kubevirtv1.VirtualMachine{}
		if err := kube.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: m.Name}, vm); err != nil {
			t.Fatal(err)
		}
		vm.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusRunning
		if err := kube.c.Status().Update(ctx, vm); err != nil {
			t.Fatal(err)
		}
		vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: ns, Labels: vm.Spec.Template.ObjectMeta.Labels},
			Spec: vm.Spec.Template.Spec}
		vmi.Status.Phase = kubevirtv1.Running
		if ip != "" {
			vmi.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: "nic0", IPs: []string{ip}}}
		}
		if err := kube.c.Create(ctx, vmi); err != nil {
			t.Fatal(err)
		}
	}
	run(spec.Machines[0], "192.168.126.9")
	run(spec.Machines[1], "")
	// master-1 is left as apply left it: started, not running.

	wctx, cancel := context.WithTimeout(ctx, 2*time.Second) // a first look fits even on a loaded machine
	defer cancel()
	var seen []string
	_, err := platform.WaitRunning(wctx, p, spec, 20*time.Millisecond, func(e platform.Event) { seen = append(seen, e.Machine+" "+e.Stage) })
	if err == nil {
		t.Fatal("wait succeeded with two VMs not running with their addresses")
	}
	for _, want := range []string{"ocp4-x7k2p-master-0 (running, no address yet)", "ocp4-x7k2p-master-1 (starting)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if !slices.Contains(seen, "ocp4-x7k2p-bootstrap running at 192.168.126.9") {
		t.Errorf("progress %q lacks the running bootstrap", seen)
	}
}
