package kubevirt

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/platform"
)

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
