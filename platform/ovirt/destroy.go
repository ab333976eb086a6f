package ovirt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"
	"golang.org/x/sync/errgroup"

	"appliance/platform"
)

// Destroy removes the cluster's VMs (with their disks and NICs), affinity
// groups, template, leftover image upload and tag, in that order, and
// nothing without the cluster's mark.
func (p *Provider) Destroy(ctx context.Context, infraID string) ([]string, error) {
	if infraID == "" {
		// As libvirt and KubeVirt refuse it: the image disks are found by
		// the name "<infraID>-rhcos-image", which an empty ID makes anyone's.
		return nil, errors.New("ovirt: destroy: empty infra ID")
	}
	lines, err := p.destroy(ctx, infraID)
	slices.Sort(lines)
	if err != nil {
		return lines, p.s.err(fmt.Errorf("ovirt: destroy %s: %w", infraID, err))
	}
	return lines, nil
}

// DestroyVMs removes the VMs among vms that carry infraID's mark or tag,
// each powered off and removed with its disks (its Ignition is in its
// initialization, gone with it). The template, base image disk, affinity
// groups and tag stay for the VMs left.
func (p *Provider) DestroyVMs(ctx context.Context, infraID string, vms []platform.VM) ([]string, error) {
	owned, err := p.ownedVMs(ctx, infraID)
	if err != nil {
		return nil, p.s.err(fmt.Errorf("ovirt: destroy %s: %w", infraID, err))
	}
	var (
		mu    sync.Mutex
		lines []string
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.opts.Workers)
	for _, o := range owned {
		if o.m.Role == roleBuilder || !slices.ContainsFunc(vms, func(v platform.VM) bool { return v.Name == o.vm.Name() }) {
			continue
		}
		g.Go(func() error {
			if err := p.removeVM(gctx, o.vm); err != nil {
				return err
			}
			mu.Lock()
			lines = append(lines, "vm "+o.vm.Name())
			mu.Unlock()
			p.log.Info("removed", "object", "vm "+o.vm.Name())
			return nil
		})
	}
	err = g.Wait()
	slices.Sort(lines)
	if err != nil {
		return lines, p.s.err(fmt.Errorf("ovirt: destroy %s: %w", infraID, err))
	}
	return lines, nil
}

func (p *Provider) destroy(ctx context.Context, infraID string) ([]string, error) {
	e := p.eng(ctx)
	vms, err := p.ownedVMs(ctx, infraID)
	if err != nil {
		return nil, err
	}
	var (
		mu    sync.Mutex
		lines []string
	)
	add := func(s string) {
		mu.Lock()
		lines = append(lines, s)
		mu.Unlock()
		p.log.Info("removed", "object", s)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.opts.Workers)
	for _, o := range vms {
		g.Go(func() error {
			if err := p.removeVM(gctx, o.vm); err != nil {
				return err
			}
			add("vm " + o.vm.Name())
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return lines, err
	}

	groups, err := e.ListAffinityGroups(ovirtclient.ClusterID(p.opts.ClusterID))
	if err != nil {
		return lines, fmt.Errorf("list affinity groups: %w", err)
	}
	for _, ag := range groups {
		if m, ok := parseMark(ag.Description()); !ok || m.InfraID != infraID {
			continue
		}
		if err := e.RemoveAffinityGroup(ag.ClusterID(), ag.ID()); err != nil && !notFound(err) {
			return lines, fmt.Errorf("remove affinity group %s: %w", ag.Name(), err)
		}
		add("affinity-group " + ag.Name())
	}
	p.mu.Lock()
	clear(p.groups)
	p.mu.Unlock()

	tpl, err := p.findTemplate(ctx, infraID)
	if err != nil {
		return lines, err
	}
	if tpl != nil {
		if err := p.wait(ctx, "template "+tpl.Name()+" unlock", func() (bool, error) {
			t, err := e.GetTemplate(tpl.ID())
			if notFound(err) {
				return true, nil
			}
			return err == nil && t.Status() != ovirtclient.TemplateStatusLocked, err
		}); err != nil {
			return lines, err
		}
		if err := e.RemoveTemplate(tpl.ID()); err != nil && !notFound(err) {
			return lines, fmt.Errorf("remove template %s: %w", tpl.Name(), err)
		}
		add("template " + tpl.Name())
	}

	n, err := p.removeImageDisks(ctx, infraID)
	for range n {
		add("disk " + imageAlias(infraID))
	}
	if err != nil {
		return lines, err
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.tags, infraID)
	tagID, ok, err := p.findTag(ctx, infraID)
	if err != nil || !ok {
		return lines, err
	}
	if err := e.RemoveTag(tagID); err != nil && !notFound(err) {
		return lines, fmt.Errorf("remove tag %s: %w", infraID, err)
	}
	lines = append(lines, "tag "+infraID)
	return lines, nil
}

// removeVM powers vm off if needed and removes it with its disks.
func (p *Provider) removeVM(ctx context.Context, vm ovirtclient.VM) error {
	e := p.eng(ctx)
	if vm.Status() != ovirtclient.VMStatusDown {
		if err := e.StopVM(vm.ID(), true); err != nil && !notFound(err) {
			return fmt.Errorf("stop VM %s: %w", vm.Name(), err)
		}
		if err := p.wait(ctx, "VM "+vm.Name()+" power off", func() (bool, error) {
			v, err := e.GetVM(vm.ID())
			if notFound(err) {
				return true, nil
			}
			return err == nil && v.Status() == ovirtclient.VMStatusDown, err
		}); err != nil {
			return err
		}
	}
	// A disk still locked by a clone or resize makes the engine refuse the
	// removal for a moment: wait for the disks first.
	if err := p.waitDisksUnlocked(ctx, vm.ID()); err != nil && !notFound(err) {
		return err
	}
	if err := e.RemoveVM(vm.ID()); err != nil && !notFound(err) {
		return fmt.Errorf("remove VM %s: %w", vm.Name(), err)
	}
	return nil
}

// waitDisksUnlocked waits until every disk attached to vm is unlocked.
func (p *Provider) waitDisksUnlocked(ctx context.Context, id ovirtclient.VMID) error {
	e := p.eng(ctx)
	atts, err := e.ListDiskAttachments(id)
	if err != nil {
		return err
	}
	for _, a := range atts {
		if err := p.waitDiskOK(ctx, a.DiskID()); err != nil && !notFound(err) {
			return err
		}
	}
	return nil
}
