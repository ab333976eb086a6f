package ovirt

import (
	"context"
	"testing"
)

func TestPrepareImageReusesFinishedUpload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	spec := testSpec(t, 0)
	ctx := context.Background()
	// Simulate a run killed after the upload reached the builder VM.
	if _, err := e.p.ensureTag(ctx, infraID); err != nil {
		t.Fatal(err)
	}
	disk, err := e.p.upload(ctx, spec, func(int64, int64) {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.createBuilder(ctx, mark{InfraID: infraID, Image: spec.Image.SHA256}, disk); err != nil {
		t.Fatal(err)
	}
	var calls []int64
	if err := e.p.PrepareImage(ctx, spec, func(d, _ int64) { calls = append(calls, d) }); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0] != spec.Image.Size {
		t.Errorf("uploaded again: progress %v", calls)
	}
	if got := e.inventory(t); got.Templates != 2 || got.VMs != 0 || got.Disks != 1 {
		t.Errorf("inventory %+v", got)
	}
}

func TestPrepareImageReplacesOtherImage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	spec := testSpec(t, 0)
	ctx := context.Background()
	var last int64
	if err := e.p.PrepareImage(ctx, spec, func(d, _ int64) { last = d }); err != nil {
		t.Fatal(err)
	}
	if last != spec.Image.Size {
		t.Errorf("progress ended at %d of %d", last, spec.Image.Size)
	}
	spec.Image = fakeQCOW2(t, "v2")
	if err := e.p.PrepareImage(ctx, spec, nil); err != nil {
		t.Fatal(err)
	}
	tpl, err := e.p.findTemplate(ctx, infraID)
	if err != nil || tpl == nil {
		t.Fatal(tpl, err)
	}
	if m, _ := parseMark(tpl.Description()); m.Image != spec.Image.SHA256 {
		t.Errorf("template still for the old image: %q", tpl.Description())
	}
	if got := e.inventory(t); got.Templates != 2 || got.Disks != 1 {
		t.Errorf("inventory %+v", got)
	}
}
