package kubevirt

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"appliance/platform"
)

// Create makes m's Ignition Secret and its VirtualMachine (Halted), leaving
// alone whichever already exists with our label.
func (p *Provider) Create(ctx context.Context, spec *platform.Spec, m platform.Machine, stage func(string)) error {
	if stage == nil {
		stage = func(string) {}
	}
	if err := checkMachine(spec, m, p.opts); err != nil {
		return err
	}
	stage("ignition secret")
	if err := p.ensureSecret(ctx, BuildSecret(spec, m, p.opts), spec.InfraID); err != nil {
		return err
	}
	stage("virtual machine")
	vm := BuildVirtualMachine(spec, m, p.opts)
	err := p.c.Create(ctx, vm)
	if apierrors.IsAlreadyExists(err) {
		got := &kubevirtv1.VirtualMachine{}
		if err := p.c.Get(ctx, p.key(vm.Name), got); err != nil {
			return p.errf("kubevirt: node %s: get VirtualMachine %s: %w", m.Node, vm.Name, err)
		}
		if !ours(got, spec.InfraID) {
			return fmt.Errorf("kubevirt: node %s: VirtualMachine %s/%s exists without label %s=%s; remove it or rename the node", m.Node, p.opts.Namespace, vm.Name, LabelInfraID, spec.InfraID)
		}
		p.log.Debug("kubevirt: VirtualMachine exists", "vm", vm.Name)
		return nil
	}
	if err != nil {
		return p.errf("kubevirt: node %s: create VirtualMachine %s: %w", m.Node, vm.Name, err)
	}
	p.log.Info("kubevirt: created VirtualMachine", "vm", vm.Name, "node", m.Node, "mac", m.MAC.String())
	return nil
}

// ensureSecret creates want, or brings an existing Secret of ours up to
// date (the Ignition may have been regenerated since an interrupted run).
func (p *Provider) ensureSecret(ctx context.Context, want *corev1.Secret, infraID string) error {
	err := p.c.Create(ctx, want)
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return p.errf("kubevirt: create Secret %s: %w", want.Name, err)
	}
	got := &corev1.Secret{}
	if err := p.c.Get(ctx, p.key(want.Name), got); err != nil {
		return p.errf("kubevirt: get Secret %s: %w", want.Name, err)
	}
	if !ours(got, infraID) {
		return fmt.Errorf("kubevirt: Secret %s/%s exists without label %s=%s; remove it or rename the node", p.opts.Namespace, want.Name, LabelInfraID, infraID)
	}
	if got.Annotations[AnnotationIgnitionSHA256] == want.Annotations[AnnotationIgnitionSHA256] {
		return nil
	}
	got.Data = want.Data
	if got.Annotations == nil {
		got.Annotations = map[string]string{}
	}
	got.Annotations[AnnotationIgnitionSHA256] = want.Annotations[AnnotationIgnitionSHA256]
	if err := p.c.Update(ctx, got); err != nil {
		return p.errf("kubevirt: update Secret %s: %w", want.Name, err)
	}
	p.log.Info("kubevirt: updated Ignition secret", "secret", want.Name)
	return nil
}
