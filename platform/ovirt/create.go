package ovirt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"

	"appliance/platform"
)

const gib = 1 << 30

// nicName is the machine NIC's name (scoped per VM on an engine).
const nicName = "nic1"

// osType makes the engine present the hardware RHCOS expects.
const osType = "rhcos_x64"

// Affinity group priorities: the control plane's spread matters more.
const (
	controlPlanePriority = 5
	computePriority      = 3
)

// Create clones m's VM from the template, or finishes one an earlier call
// left: disk grown to DiskGiB, one NIC on the vNIC profile with m.MAC, the
// cluster tag, the role's affinity group, and finally the "complete"
// comment. Ignition goes into the initialization custom script (the engine
// hands it to the image's config drive). The VM is not started.
func (p *Provider) Create(ctx context.Context, spec *platform.Spec, m platform.Machine, stage func(string)) error {
	if stage == nil {
		stage = func(string) {}
	}
	if err := p.create(ctx, spec, m, stage); err != nil {
		return p.s.err(fmt.Errorf("ovirt: create %s: %w", m.Name, err))
	}
	return nil
}

func (p *Provider) create(ctx context.Context, spec *platform.Spec, m platform.Machine, stage func(string)) error {
	infraID := spec.InfraID
	if m.CPUs <= 0 || m.MemoryMiB <= 0 || m.DiskGiB <= 0 {
		return fmt.Errorf("machine needs CPUs, memory and disk (got %d CPUs, %d MiB, %d GiB)", m.CPUs, m.MemoryMiB, m.DiskGiB)
	}
	if len(m.MAC) != 6 {
		return errors.New("machine has no MAC address")
	}
	e := p.eng(ctx)
	vm, vmMark, err := p.findVM(ctx, infraID, m.Name)
	if err != nil {
		return err
	}
	if vm != nil && (vmMark.Node != m.Node || vmMark.Role != string(m.Role)) {
		return fmt.Errorf("VM %s exists for node %q role %q, not node %q role %q", m.Name, vmMark.Node, vmMark.Role, m.Node, m.Role)
	}
	if vm != nil && vm.Comment() == completeComment {
		stage("exists")
		return nil
	}
	if vm == nil {
		stage("clone")
		if vm, err = p.clone(ctx, spec, m); err != nil {
			return err
		}
	} else {
		p.log.Info("resuming VM", "vm", m.Name)
	}

	steps := []struct {
		name string
		fn   func(context.Context, *platform.Spec, platform.Machine, ovirtclient.VM) error
	}{
		{"disk", p.ensureDisk},
		{"nic", p.ensureNIC},
		{"tag", p.ensureVMTag},
		{"affinity", p.ensureAffinity},
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		stage(s.name)
		if err := s.fn(ctx, spec, m, vm); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := e.UpdateVM(vm.ID(), ovirtclient.UpdateVMParams().MustWithComment(completeComment)); err != nil {
		return fmt.Errorf("mark complete: %w", err)
	}
	stage("created")
	p.log.Info("created VM", "vm", m.Name, "mac", m.MAC.String())
	return nil
}

// clone creates the VM from the template in one call that already carries
// the ownership mark, the size, the OS type and the Ignition config, so a
// VM that exists at all is recognisable as ours.
func (p *Provider) clone(ctx context.Context, spec *platform.Spec, m platform.Machine) (ovirtclient.VM, error) {
	e := p.eng(ctx)
	tpl, err := p.findTemplate(ctx, spec.InfraID)
	if err != nil {
		return nil, err
	}
	if tpl == nil || tpl.Status() != ovirtclient.TemplateStatusOK {
		return nil, fmt.Errorf("template %s is not ready (run PrepareImage first)", templateName(spec.InfraID))
	}
	atts, err := e.ListTemplateDiskAttachments(tpl.ID())
	if err != nil {
		return nil, fmt.Errorf("template disks: %w", err)
	}
	var disks []ovirtclient.OptionalVMDiskParameters
	for _, a := range atts {
		d, err := ovirtclient.NewBuildableVMDiskParameters(a.DiskID())
		if err != nil {
			return nil, err
		}
		disks = append(disks, d.MustWithStorageDomainID(ovirtclient.StorageDomainID(p.opts.StorageDomainID)))
	}
	vmMark := mark{InfraID: spec.InfraID, Node: m.Node, Role: string(m.Role)}
	params := ovirtclient.NewCreateVMParams().
		MustWithDescription(vmMark.String()).
		MustWithCPUParameters(uint(m.CPUs), 1, 1).
		MustWithMemory(int64(m.MemoryMiB)<<20).
		MustWithVMType(ovirtclient.VMTypeServer).
		MustWithInitializationParameters(string(m.Ignition), m.Node).
		MustWithClone(true).
		MustWithDisks(disks).
		WithOS(ovirtclient.NewVMOSParameters().MustWithType(osType))
	vm, err := e.CreateVM(ovirtclient.ClusterID(p.opts.ClusterID), tpl.ID(), m.Name, params)
	if err != nil {
		return nil, fmt.Errorf("clone from template %s: %w", tpl.Name(), err)
	}
	return vm, nil
}

// ensureDisk grows the boot disk to DiskGiB once the clone has released it.
func (p *Provider) ensureDisk(ctx context.Context, _ *platform.Spec, m platform.Machine, vm ovirtclient.VM) error {
	e := p.eng(ctx)
	atts, err := e.ListDiskAttachments(vm.ID())
	if err != nil {
		return err
	}
	if len(atts) == 0 {
		return errors.New("VM has no disk (template without disk?)")
	}
	a := atts[0]
	for _, x := range atts {
		if x.Bootable() {
			a = x
			break
		}
	}
	if err := p.waitDiskOK(ctx, a.DiskID()); err != nil {
		return err
	}
	d, err := e.GetDisk(a.DiskID())
	if err != nil {
		return err
	}
	want := uint64(m.DiskGiB) * gib
	if d.ProvisionedSize() >= want {
		return nil
	}
	if _, err := e.UpdateDisk(d.ID(), ovirtclient.UpdateDiskParams().MustWithProvisionedSize(want)); err != nil {
		return fmt.Errorf("grow disk to %d GiB: %w", m.DiskGiB, err)
	}
	return p.waitDiskOK(ctx, d.ID())
}

// ensureNIC gives the VM exactly the NIC we want: created when missing,
// corrected when an earlier run or a person changed its MAC or profile.
func (p *Provider) ensureNIC(ctx context.Context, _ *platform.Spec, m platform.Machine, vm ovirtclient.VM) error {
	e := p.eng(ctx)
	profile := ovirtclient.VNICProfileID(p.opts.VNICProfileID)
	nics, err := e.ListNICs(vm.ID())
	if err != nil {
		return err
	}
	if len(nics) == 0 {
		_, err := e.CreateNIC(vm.ID(), profile, nicName, ovirtclient.CreateNICParams().MustWithMac(m.MAC.String()))
		return err
	}
	n := nics[0]
	mac, _ := net.ParseMAC(n.Mac())
	if bytes.Equal(mac, m.MAC) && n.VNICProfileID() == profile {
		return nil
	}
	_, err = e.UpdateNIC(vm.ID(), n.ID(), ovirtclient.UpdateNICParams().
		MustWithMac(m.MAC.String()).MustWithVNICProfileID(profile))
	return err
}

// ensureVMTag tags the VM "<infraID>" once.
func (p *Provider) ensureVMTag(ctx context.Context, spec *platform.Spec, _ platform.Machine, vm ovirtclient.VM) error {
	tagID, err := p.ensureTag(ctx, spec.InfraID)
	if err != nil {
		return err
	}
	e := p.eng(ctx)
	tags, err := e.ListVMTags(vm.ID())
	if err != nil {
		return err
	}
	if slices.ContainsFunc(tags, func(t ovirtclient.Tag) bool { return t.ID() == tagID }) {
		return nil
	}
	return e.AddTagToVM(vm.ID(), tagID)
}

// ensureAffinity puts masters into "<infraID>-controlplane" and workers
// into "<infraID>-compute" (negative VM affinity); bootstrap in none.
func (p *Provider) ensureAffinity(ctx context.Context, spec *platform.Spec, m platform.Machine, vm ovirtclient.VM) error {
	name := groupName(spec.InfraID, string(m.Role))
	if p.opts.Affinity.Disabled || name == "" {
		return nil
	}
	prio := ovirtclient.AffinityGroupPriority(computePriority)
	if m.Role == "master" {
		prio = controlPlanePriority
	}
	id, err := p.ensureGroup(ctx, spec.InfraID, name, prio)
	if err != nil {
		return err
	}
	e := p.eng(ctx)
	cluster := ovirtclient.ClusterID(p.opts.ClusterID)
	ag, err := e.GetAffinityGroup(cluster, id)
	if err != nil {
		return fmt.Errorf("affinity group %s: %w", name, err)
	}
	if slices.Contains(ag.VMIDs(), vm.ID()) {
		return nil
	}
	if err := e.AddVMToAffinityGroup(cluster, vm.ID(), id); err != nil {
		return fmt.Errorf("add to affinity group %s: %w", name, err)
	}
	return nil
}

// ensureGroup returns the affinity group named name, creating it once.
func (p *Provider) ensureGroup(ctx context.Context, infraID, name string, prio ovirtclient.AffinityGroupPriority) (ovirtclient.AffinityGroupID, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.groups[name]; ok {
		return id, nil
	}
	e := p.eng(ctx)
	cluster := ovirtclient.ClusterID(p.opts.ClusterID)
	groups, err := e.ListAffinityGroups(cluster)
	if err != nil {
		return "", fmt.Errorf("list affinity groups: %w", err)
	}
	for _, ag := range groups {
		if ag.Name() != name {
			continue
		}
		if gm, ok := parseMark(ag.Description()); !ok || gm.InfraID != infraID {
			return "", fmt.Errorf("affinity group %s exists but was not created by appliance provision (description %q)", name, ag.Description())
		}
		p.groups[name] = ag.ID()
		return ag.ID(), nil
	}
	enforcing := !p.opts.Affinity.Soft
	ag, err := e.CreateAffinityGroup(cluster, name, ovirtclient.CreateAffinityGroupParams().
		MustWithDescription(mark{InfraID: infraID}.String()).
		MustWithPriority(prio).
		MustWithEnforcing(enforcing).
		MustWithVMsRuleParameters(true, ovirtclient.AffinityNegative, enforcing))
	if err != nil {
		return "", fmt.Errorf("create affinity group %s: %w", name, err)
	}
	p.log.Info("created affinity group", "group", name, "enforcing", enforcing)
	p.groups[name] = ag.ID()
	return ag.ID(), nil
}
