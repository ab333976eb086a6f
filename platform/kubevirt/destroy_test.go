package kubevirt

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/platform"
)

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

// TestDestroyBootstrapOnly: `provision destroy --bootstrap` through the
// engine removes the bootstrap's VM, root DataVolume, PVC and Ignition
// Secret; every other VM and its objects, and the golden image, stay as
// they were.
func TestDestroyBootstrapOnly(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	p, _ := newProvider(t, ns, nil)
	c := kube.c
	spec := testSpec()
	ctx := context.Background()
	applyAll(t, p, spec, false)
	// What CDI would make for each VM: its root DataVolume and that
	// volume's PVC, owned in a chain as on a real cluster.
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
	before := snapshot(t, c, ns)

	lines, err := platform.DestroyNodes(ctx, p, testInfraID, []string{"bootstrap"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	boot := spec.Machines[0]
	if !slices.Contains(lines, "virtualmachine "+ns+"/"+boot.Name) || !slices.Contains(lines, "secret "+ns+"/"+SecretName(boot)) {
		t.Errorf("lines %v", lines)
	}
	after := snapshot(t, c, ns)
	for k, rv := range before {
		gone := k == "vm/"+boot.Name || k == "dv/"+RootDiskName(boot) || k == "secret/"+SecretName(boot)
		switch got, ok := after[k]; {
		case gone && ok:
			t.Errorf("%s left", k)
		case !gone && (!ok || got != rv):
			t.Errorf("%s changed: resourceVersion %s -> %q", k, rv, got)
		}
	}
	var pvcs corev1.PersistentVolumeClaimList
	if err := c.List(ctx, &pvcs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, pvc := range pvcs.Items {
		if pvc.Name == RootDiskName(boot) && pvc.DeletionTimestamp == nil {
			t.Errorf("the bootstrap's PVC %s left", pvc.Name)
		}
	}
	if len(pvcs.Items) < len(spec.Machines)-1 {
		t.Errorf("%d PVCs left, want the other %d", len(pvcs.Items), len(spec.Machines)-1)
	}
	vms, err := p.List(ctx, testInfraID)
	if err != nil || len(vms) != len(spec.Machines)-1 {
		t.Errorf("after: %d VMs (%v), want %d", len(vms), err, len(spec.Machines)-1)
	}
	if lines, err := platform.DestroyNodes(ctx, p, testInfraID, []string{"bootstrap"}, nil); err != nil || len(lines) != 0 {
		t.Errorf("again: %v %v", lines, err)
	}
}
