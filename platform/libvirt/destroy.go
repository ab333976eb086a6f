package libvirt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	golibvirt "github.com/digitalocean/go-libvirt"

	"appliance/platform"
)

// destroyParallel bounds how many domains Destroy removes at once.
const destroyParallel = 8

// Destroy removes infraID's marked domains and exactly the volumes their
// marks list: each node domain is stopped, its volumes deleted, then it is
// undefined; the image marker and the base image go last, and only when no
// node domain of infraID remains. Domains and volumes without our mark are
// never touched, whatever their names.
func (p *Provider) Destroy(ctx context.Context, infraID string) ([]string, error) {
	if infraID == "" {
		return nil, errors.New("libvirt: destroy: infraID is empty")
	}
	_, view, err := p.allMarked()
	if err != nil {
		return nil, err
	}
	var lines []string
	var errs []error
	steps := planDestroy(view, infraID)
	// Node domains are independent: stop and remove them side by side
	// (stopping a busy qemu takes seconds); the image marker waits for all.
	var nodes, images []destroyStep
	for _, s := range steps {
		if s.Kind == kindImage {
			images = append(images, s)
		} else {
			nodes = append(nodes, s)
		}
	}
	results := make([]struct {
		lines []string
		err   error
	}, len(nodes))
	var wg sync.WaitGroup
	sem := make(chan struct{}, destroyParallel)
	for i, s := range nodes {
		if ctx.Err() != nil {
			results[i].err = ctx.Err()
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i].lines, results[i].err = p.destroyOne(s)
		}()
	}
	wg.Wait()
	nodeFailed := false
	for _, r := range results {
		lines = append(lines, r.lines...)
		if r.err != nil {
			errs = append(errs, r.err)
			nodeFailed = true
		}
	}
	for _, s := range images {
		if err := ctx.Err(); err != nil {
			return lines, errors.Join(append(errs, err)...)
		}
		if nodeFailed {
			errs = append(errs, fmt.Errorf("libvirt: destroy: kept %s and the base image: node domains remain", s.Domain))
			continue
		}
		if left, err := p.nodesLeft(infraID); err != nil {
			errs = append(errs, err)
			continue
		} else if left > 0 {
			errs = append(errs, fmt.Errorf("libvirt: destroy: kept %s and the base image: %d node domains of %s appeared meanwhile", s.Domain, left, infraID))
			continue
		}
		got, err := p.destroyOne(s)
		lines = append(lines, got...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return lines, errors.Join(errs...)
}

func (p *Provider) nodesLeft(infraID string) (int, error) {
	_, view, err := p.allMarked()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range view {
		if !d.Foreign && d.Mark.InfraID == infraID && d.Mark.Kind == kindNode {
			n++
		}
	}
	return n, nil
}

// destroyOne stops a domain, deletes its volumes, then undefines it, so an
// interruption leaves each remaining volume listed by a remaining domain.
func (p *Provider) destroyOne(s destroyStep) ([]string, error) {
	var lines []string
	dom, found, err := p.lookupDomain(s.Domain)
	if err != nil || !found {
		return nil, err
	}
	state, _, err := p.l.DomainGetState(dom, 0)
	if err != nil && !isCode(err, golibvirt.ErrNoDomain) {
		return nil, fmt.Errorf("libvirt: destroy %s: state: %w", s.Domain, err)
	}
	if err == nil && golibvirt.DomainState(state) != golibvirt.DomainShutoff {
		if err := p.l.DomainDestroy(dom); err != nil && !isCode(err, golibvirt.ErrOperationInvalid) {
			return nil, fmt.Errorf("libvirt: stop %s: %w", s.Domain, err)
		}
		lines = append(lines, "stopped domain "+s.Domain)
	}
	for _, v := range s.Volumes {
		deleted, err := p.deleteVolIfExists(v.Pool, v.Name)
		if err != nil {
			return lines, err
		}
		if deleted {
			lines = append(lines, fmt.Sprintf("deleted volume %s/%s", v.Pool, v.Name))
		}
	}
	flags := golibvirt.DomainUndefineManagedSave | golibvirt.DomainUndefineSnapshotsMetadata | golibvirt.DomainUndefineNvram
	if err := p.l.DomainUndefineFlags(dom, flags); err != nil && !isCode(err, golibvirt.ErrNoDomain) {
		// Some drivers (test:///default) refuse flags they have no use for.
		if err2 := p.l.DomainUndefine(dom); err2 != nil && !isCode(err2, golibvirt.ErrNoDomain) {
			return lines, fmt.Errorf("libvirt: undefine %s: %w", s.Domain, err)
		}
	}
	lines = append(lines, "undefined domain "+s.Domain)
	return lines, nil
}

// DestroyVMs removes the node domains named by vms that carry infraID's
// mark, each with exactly the volumes its mark lists (its overlay and its
// Ignition volume); the base image and its marker stay for the others.
func (p *Provider) DestroyVMs(ctx context.Context, infraID string, vms []platform.VM) ([]string, error) {
	if infraID == "" {
		return nil, errors.New("libvirt: destroy: infraID is empty")
	}
	_, view, err := p.allMarked()
	if err != nil {
		return nil, err
	}
	var lines []string
	var errs []error
	for _, s := range planDestroy(view, infraID) {
		if s.Kind != kindNode || !slices.ContainsFunc(vms, func(v platform.VM) bool { return v.Name == s.Domain }) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return lines, errors.Join(append(errs, err)...)
		}
		got, err := p.destroyOne(s)
		lines = append(lines, got...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return lines, errors.Join(errs...)
}
