package ovirt

import (
	"context"
	"fmt"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"
)

// findTemplate returns the template "<infraID>-rhcos" if it exists; it
// must carry our mark.
func (p *Provider) findTemplate(ctx context.Context, infraID string) (ovirtclient.Template, error) {
	name := templateName(infraID)
	t, err := p.eng(ctx).GetTemplateByName(name)
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up template %s: %w", name, err)
	}
	if m, ok := parseMark(t.Description()); !ok || m.InfraID != infraID {
		return nil, fmt.Errorf("template %s exists but was not created by appliance provision for %s (description %q)", name, infraID, t.Description())
	}
	return t, nil
}

// waitTemplate waits until the template is usable and has its disk.
func (p *Provider) waitTemplate(ctx context.Context, id ovirtclient.TemplateID) error {
	e := p.eng(ctx)
	err := p.wait(ctx, "template "+string(id)+" creation", func() (bool, error) {
		t, err := e.GetTemplate(id)
		if err != nil {
			return false, err
		}
		switch t.Status() {
		case ovirtclient.TemplateStatusOK:
			return true, nil
		case ovirtclient.TemplateStatusIllegal:
			return false, fmt.Errorf("template %s became illegal", t.Name())
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	atts, err := e.ListTemplateDiskAttachments(id)
	if err != nil {
		return fmt.Errorf("template %s disks: %w", id, err)
	}
	if len(atts) == 0 {
		return fmt.Errorf("template %s has no disk", id)
	}
	return nil
}

// builderMemory sizes the temporary VM the template is made from; it never
// runs, but the template inherits it as a default.
const builderMemory = 2 << 30

// createBuilder makes the temporary VM (OS type rhcos_x64, so the template
// inherits it) and attaches the uploaded disk as its boot disk.
func (p *Provider) createBuilder(ctx context.Context, want mark, disk ovirtclient.Disk) (ovirtclient.VM, error) {
	e := p.eng(ctx)
	blank, err := e.GetBlankTemplate()
	if err != nil {
		return nil, fmt.Errorf("blank template: %w", err)
	}
	bm := want
	bm.Role = roleBuilder
	params := ovirtclient.NewCreateVMParams().
		MustWithDescription(bm.String()).
		MustWithMemory(builderMemory).
		MustWithVMType(ovirtclient.VMTypeServer).
		WithOS(ovirtclient.NewVMOSParameters().MustWithType(osType))
	name := builderName(want.InfraID)
	vm, err := e.CreateVM(ovirtclient.ClusterID(p.opts.ClusterID), blank.ID(), name, params)
	if err != nil {
		return nil, fmt.Errorf("create VM %s: %w", name, err)
	}
	if _, err := e.CreateDiskAttachment(vm.ID(), disk.ID(), ovirtclient.DiskInterfaceVirtIOSCSI,
		ovirtclient.CreateDiskAttachmentParams().MustWithBootable(true).MustWithActive(true)); err != nil {
		return nil, fmt.Errorf("attach image disk to %s: %w", name, err)
	}
	return vm, nil
}

// reusableBuilder returns the temporary VM left by an interrupted run if it
// is for the same image and its disk is attached (attached only after a
// finished upload).
func (p *Provider) reusableBuilder(ctx context.Context, want mark) (ovirtclient.VM, error) {
	vm, m, err := p.findVM(ctx, want.InfraID, builderName(want.InfraID))
	if err != nil || vm == nil {
		return nil, err
	}
	if m.Role != roleBuilder || m.Image != want.Image {
		return nil, nil
	}
	atts, err := p.eng(ctx).ListDiskAttachments(vm.ID())
	if err != nil || len(atts) == 0 {
		return nil, err
	}
	for _, a := range atts {
		if err := p.waitDiskOK(ctx, a.DiskID()); err != nil {
			return nil, err
		}
	}
	return vm, nil
}

// removeBuilder removes the temporary VM and the disk attached to it.
func (p *Provider) removeBuilder(ctx context.Context, infraID string) error {
	vm, m, err := p.findVM(ctx, infraID, builderName(infraID))
	if err != nil || vm == nil {
		return err
	}
	if m.Role != roleBuilder {
		return fmt.Errorf("VM %s is not the image builder (role %q)", vm.Name(), m.Role)
	}
	return p.removeVM(ctx, vm)
}
