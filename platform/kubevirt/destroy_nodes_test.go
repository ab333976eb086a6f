package kubevirt

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/platform"
)

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
