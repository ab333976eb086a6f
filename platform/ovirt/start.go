package ovirt

import (
	"context"
	"errors"
	"fmt"

	"appliance/platform"
)

// Start powers m's VM on. The engine places it according to the affinity
// groups, so with enforcing groups a cluster with too few hosts refuses.
func (p *Provider) Start(ctx context.Context, spec *platform.Spec, m platform.Machine) error {
	vm, _, err := p.findVM(ctx, spec.InfraID, m.Name)
	if err == nil && vm == nil {
		err = errors.New("VM does not exist (run apply)")
	}
	if err == nil {
		switch power(vm.Status()) {
		case platform.PowerRunning, platform.PowerStarting:
			return nil
		}
		err = p.eng(ctx).StartVM(vm.ID())
	}
	if err != nil {
		return p.s.err(fmt.Errorf("ovirt: start %s: %w", m.Name, err))
	}
	p.log.Info("started VM", "vm", m.Name)
	return nil
}
