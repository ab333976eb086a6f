package libvirt

import (
	"context"
	"fmt"

	golibvirt "github.com/digitalocean/go-libvirt"

	"appliance/platform"
)

// Start powers m's domain on; a running one is left alone, a paused one
// resumed. An incomplete domain is refused: Create must finish it first.
func (p *Provider) Start(ctx context.Context, spec *platform.Spec, m platform.Machine) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dom, mk, found, err := p.nodeDomain(spec, m)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("libvirt: start %s: domain does not exist (create it first)", m.Name)
	}
	if !mk.Complete {
		return fmt.Errorf("libvirt: start %s: domain is not fully created (run apply again)", m.Name)
	}
	state, _, err := p.l.DomainGetState(dom, 0)
	if err != nil {
		return fmt.Errorf("libvirt: start %s: state: %w", m.Name, err)
	}
	switch golibvirt.DomainState(state) {
	case golibvirt.DomainRunning, golibvirt.DomainBlocked:
		return nil
	case golibvirt.DomainPaused:
		if err := p.l.DomainResume(dom); err != nil {
			return fmt.Errorf("libvirt: resume %s: %w", m.Name, err)
		}
		return nil
	}
	if err := p.l.DomainCreate(dom); err != nil {
		if isCode(err, golibvirt.ErrOperationInvalid) {
			// Started by someone else meanwhile.
			if s, _, e2 := p.l.DomainGetState(dom, 0); e2 == nil && golibvirt.DomainState(s) == golibvirt.DomainRunning {
				return nil
			}
		}
		return fmt.Errorf("libvirt: start %s: %w", m.Name, err)
	}
	return nil
}
