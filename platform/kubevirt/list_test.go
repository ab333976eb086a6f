package kubevirt

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/platform"
)

func TestPowerAndStatus(t *testing.T) {
	halted, always := kubevirtv1.RunStrategyHalted, kubevirtv1.RunStrategyAlways
	tests := []struct {
		printable kubevirtv1.VirtualMachinePrintableStatus
		rs        *kubevirtv1.VirtualMachineRunStrategy
		want      platform.Power
	}{
		{kubevirtv1.VirtualMachineStatusRunning, &always, platform.PowerRunning},
		{kubevirtv1.VirtualMachineStatusStopped, &halted, platform.PowerStopped},
		{kubevirtv1.VirtualMachineStatusPaused, &always, platform.PowerPaused},
		{kubevirtv1.VirtualMachineStatusProvisioning, &always, platform.PowerStarting},
		{kubevirtv1.VirtualMachineStatusCrashLoopBackOff, &always, platform.PowerUnknown},
		{"", &halted, platform.PowerStopped},
		{"", &always, platform.PowerStarting},
	}
	for _, tt := range tests {
		vm := &kubevirtv1.VirtualMachine{}
		vm.Spec.RunStrategy = tt.rs
		vm.Status.PrintableStatus = tt.printable
		if got := power(vm); got != tt.want {
			t.Errorf("%q/%s: %s, want %s", tt.printable, *tt.rs, got, tt.want)
		}
	}

	spec := testSpec()
	vm := BuildVirtualMachine(spec, spec.Machines[1], testOptions())
	vmi := &kubevirtv1.VirtualMachineInstance{}
	vmi.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{
		{Name: "nic0", IP: "192.168.126.10", IPs: []string{"192.168.126.10", "fd00::10/64", "junk"}},
		{Name: "other", IPs: []string{"10.0.0.1"}},
	}
	v := vmStatus(vm, vmi, map[string]bool{"ocp4-x7k2p-master-0-ignition": true})
	if v.Node != "master-0" || v.MAC.String() != "52:54:00:7e:00:10" || !v.Complete || v.Power != platform.PowerStopped {
		t.Errorf("status = %+v", v)
	}
	if len(v.Addresses) != 2 || v.Addresses[0].String() != "192.168.126.10" || v.Addresses[1].String() != "fd00::10" {
		t.Errorf("addresses = %v", v.Addresses)
	}
	if v := vmStatus(vm, nil, nil); v.Complete || len(v.Addresses) != 0 {
		t.Errorf("without secret/instance: %+v", v)
	}
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
