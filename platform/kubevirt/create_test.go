package kubevirt

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/platform"
)

func TestResumeAfterInterruption(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	p, _ := newProvider(t, ns, nil)
	c := kube.c
	spec := testSpec()
	ctx := context.Background()
	if err := p.PrepareImage(ctx, spec, nil); err != nil {
		t.Fatal(err)
	}
	// Killed after master-0's Secret, before its VM.
	if err := p.ensureSecret(ctx, BuildSecret(spec, spec.Machines[1], p.opts), testInfraID); err != nil {
		t.Fatal(err)
	}
	// master-1 built, but its Secret lost (deleted by hand).
	if err := p.Create(ctx, spec, spec.Machines[2], nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, BuildSecret(spec, spec.Machines[2], p.opts)); err != nil {
		t.Fatal(err)
	}
	vms, err := p.List(ctx, testInfraID)
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != 1 || vms[0].Complete {
		t.Fatalf("list after interruption = %+v", vms)
	}
	plan := platform.Diff(spec, vms)
	if plan.Items[2].Action != platform.ActionComplete {
		t.Errorf("plan for master-1 = %s", plan.Items[2].Action)
	}

	// Ignition regenerated meanwhile: the Secret is brought up to date.
	spec.Machines[1].Ignition = []byte(`{"ignition":{"version":"3.2.0"},"new":true}`)
	res := applyAll(t, p, spec, false)
	if len(res.Created) != 5 || len(res.Completed) != 1 || len(res.Started) != 6 {
		t.Errorf("resumed apply: %+v", res)
	}
	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ocp4-x7k2p-master-0-ignition"}, sec); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sec.Data["userdata"], spec.Machines[1].Ignition) {
		t.Errorf("secret not updated: %q", sec.Data["userdata"])
	}
	vms, err = p.List(ctx, testInfraID)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vms {
		if !v.Complete {
			t.Errorf("still incomplete: %+v", v)
		}
	}
	if n := len(snapshot(t, c, ns)); n != 13 {
		t.Errorf("%d objects, want 13", n)
	}
}

// TestApplyInterruptedByCancel stops an apply while its creates are in
// flight, then resumes it: nothing is made twice and everything is made.
func TestApplyInterruptedByCancel(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	p, _ := newProvider(t, ns, nil)
	spec := testSpec()
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	_, err := platform.Apply(ctx, p, spec, platform.ApplyOptions{Parallel: 2, Progress: func(e platform.Event) {
		if e.Stage == "virtual machine" && n.Add(1) == 2 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted apply: %v; want context.Canceled", err)
	}
	res := applyAll(t, p, spec, false)
	if got := len(res.Created) + len(res.Completed) + len(res.Existing); got != 6 || len(res.Started) != 6 {
		t.Errorf("resumed apply: %+v", res)
	}
	if n := len(snapshot(t, kube.c, ns)); n != 13 {
		t.Errorf("%d objects after resume, want 13", n)
	}
}
