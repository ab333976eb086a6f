package kubevirt

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/platform"
)

// List returns the VMs labelled with infraID, with power from the VM's
// printable status and addresses from its running instance.
func (p *Provider) List(ctx context.Context, infraID string) ([]platform.VM, error) {
	if infraID == "" {
		return nil, errors.New("kubevirt: list: empty infra ID")
	}
	sel := []client.ListOption{client.InNamespace(p.opts.Namespace), client.MatchingLabels{LabelInfraID: infraID}}
	var vms kubevirtv1.VirtualMachineList
	if err := p.c.List(ctx, &vms, sel...); err != nil {
		return nil, p.errf("kubevirt: list VirtualMachines: %w", err)
	}
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := p.c.List(ctx, &vmis, sel...); err != nil {
		return nil, p.errf("kubevirt: list VirtualMachineInstances: %w", err)
	}
	var secrets corev1.SecretList
	if err := p.c.List(ctx, &secrets, sel...); err != nil {
		return nil, p.errf("kubevirt: list Secrets: %w", err)
	}
	haveSecret := map[string]bool{}
	for _, s := range secrets.Items {
		haveSecret[s.Name] = true
	}
	instances := map[string]*kubevirtv1.VirtualMachineInstance{}
	for i := range vmis.Items {
		instances[vmis.Items[i].Name] = &vmis.Items[i]
	}
	out := make([]platform.VM, 0, len(vms.Items))
	for i := range vms.Items {
		out = append(out, vmStatus(&vms.Items[i], instances[vms.Items[i].Name], haveSecret))
	}
	slices.SortFunc(out, func(a, b platform.VM) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// vmStatus is the platform view of one VM (pure, for tests).
func vmStatus(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, haveSecret map[string]bool) platform.VM {
	v := platform.VM{Name: vm.Name, Node: vm.Labels[LabelNode], Power: power(vm), Complete: true}
	if t := vm.Spec.Template; t != nil {
		for _, ifc := range t.Spec.Domain.Devices.Interfaces {
			if ifc.Name == nicName {
				v.MAC, _ = net.ParseMAC(ifc.MacAddress)
			}
		}
		// The VM is whole when the Secret its config drive reads exists.
		for _, vol := range t.Spec.Volumes {
			if cd := vol.CloudInitConfigDrive; cd != nil && cd.UserDataSecretRef != nil && !haveSecret[cd.UserDataSecretRef.Name] {
				v.Complete = false
			}
		}
	}
	if vmi != nil {
		for _, ifc := range vmi.Status.Interfaces {
			if ifc.Name != nicName {
				continue
			}
			ips := ifc.IPs
			if len(ips) == 0 && ifc.IP != "" {
				ips = []string{ifc.IP}
			}
			for _, s := range ips {
				// Reported addresses may carry a prefix length.
				s, _, _ = strings.Cut(s, "/")
				if a, err := netip.ParseAddr(s); err == nil && !slices.Contains(v.Addresses, a) {
					v.Addresses = append(v.Addresses, a)
				}
			}
		}
	}
	return v
}

// power maps KubeVirt's printable status to a platform power state; a VM
// the controller has not looked at yet is judged by its run strategy.
func power(vm *kubevirtv1.VirtualMachine) platform.Power {
	switch vm.Status.PrintableStatus {
	case kubevirtv1.VirtualMachineStatusRunning, kubevirtv1.VirtualMachineStatusMigrating:
		return platform.PowerRunning
	case kubevirtv1.VirtualMachineStatusStopped:
		return platform.PowerStopped
	case kubevirtv1.VirtualMachineStatusPaused:
		return platform.PowerPaused
	case kubevirtv1.VirtualMachineStatusStarting, kubevirtv1.VirtualMachineStatusProvisioning,
		kubevirtv1.VirtualMachineStatusWaitingForVolumeBinding:
		return platform.PowerStarting
	case "":
		rs, err := vm.RunStrategy()
		if err != nil {
			return platform.PowerUnknown
		}
		if rs == kubevirtv1.RunStrategyHalted {
			return platform.PowerStopped
		}
		return platform.PowerStarting
	}
	return platform.PowerUnknown
}
