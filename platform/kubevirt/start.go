package kubevirt

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/platform"
)

// Start sets m's VM to the configured run strategy (Always by default);
// KubeVirt then starts it. A VM already set so is left alone.
func (p *Provider) Start(ctx context.Context, spec *platform.Spec, m platform.Machine) error {
	want := p.opts.RunStrategy
	// One request for the common case: a JSON patch whose first operation
	// tests our label, so a VM that is not ours is never changed. Setting
	// the value it already has changes nothing on the server.
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/labels/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(LabelInfraID), "value": spec.InfraID},
		{"op": "add", "path": "/spec/runStrategy", "value": want},
	})
	if err != nil {
		return fmt.Errorf("kubevirt: start %s: %w", m.Node, err)
	}
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: p.opts.Namespace}}
	err = p.c.Patch(ctx, vm, client.RawPatch(types.JSONPatchType, patch))
	switch {
	case err == nil && vm.Spec.Running == nil:
		p.log.Info("kubevirt: run strategy set", "vm", m.Name, "runStrategy", string(want))
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("kubevirt: start %s: no VirtualMachine %s/%s; run apply", m.Node, p.opts.Namespace, m.Name)
	}
	// Not ours, or `running` set beside the run strategy: read it to say
	// which, or to fix it.
	return p.startSlow(ctx, spec, m)
}

// startSlow is Start by reading the VM first.
func (p *Provider) startSlow(ctx context.Context, spec *platform.Spec, m platform.Machine) error {
	vm := &kubevirtv1.VirtualMachine{}
	if err := p.c.Get(ctx, p.key(m.Name), vm); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("kubevirt: start %s: no VirtualMachine %s/%s; run apply", m.Node, p.opts.Namespace, m.Name)
		}
		return p.errf("kubevirt: start %s: %w", m.Node, err)
	}
	if !ours(vm, spec.InfraID) {
		return fmt.Errorf("kubevirt: start %s: VirtualMachine %s/%s lacks label %s=%s; not ours to start", m.Node, p.opts.Namespace, m.Name, LabelInfraID, spec.InfraID)
	}
	want := p.opts.RunStrategy
	if vm.Spec.RunStrategy != nil && *vm.Spec.RunStrategy == want && vm.Spec.Running == nil {
		return nil
	}
	before := vm.DeepCopy()
	vm.Spec.RunStrategy = &want
	vm.Spec.Running = nil // the API refuses both fields set
	if err := p.c.Patch(ctx, vm, client.MergeFrom(before)); err != nil {
		return p.errf("kubevirt: start %s: set runStrategy %s: %w", m.Node, want, err)
	}
	p.log.Info("kubevirt: run strategy set", "vm", m.Name, "runStrategy", string(want))
	return nil
}
