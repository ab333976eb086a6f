package ovirt

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"

	"appliance/platform"
)

func TestInterruptedApplyResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	spec := testSpec(t, 2)

	// 1. Killed during the upload.
	ctx, cancel := context.WithCancel(context.Background())
	err := e.p.PrepareImage(ctx, spec, func(done, total int64) {
		if done > total/2 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("upload not interrupted: %v", err)
	}

	// 2. Killed in the middle of the Creates.
	ctx, cancel = context.WithCancel(context.Background())
	var once sync.Once
	err = apply(ctx, e.p, spec, 8, func(m platform.Machine, s string) {
		if s == "nic" { // the first VM to get this far stops them all
			once.Do(cancel)
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("apply not interrupted: %v", err)
	}
	vms, err := e.p.List(context.Background(), infraID)
	if err != nil {
		t.Fatal(err)
	}
	incomplete := 0
	for _, v := range vms {
		if !v.Complete {
			incomplete++
		}
	}
	if incomplete == 0 {
		t.Fatal("interruption left nothing incomplete; test does not test resume")
	}
	t.Logf("after interruption: %d VMs, %d incomplete", len(vms), incomplete)

	// 3. A new process finishes the job.
	p2, _ := NewWithClient(context.Background(), e.mock, e.opts, nil)
	if err := apply(context.Background(), p2, spec, 8, nil); err != nil {
		t.Fatal(err)
	}
	got := e.inventory(t)
	n := len(spec.Machines)
	// One template with its disk, one disk and NIC and tag per VM, masters and workers in their groups.
	want := inventory{VMs: n, Templates: 2, Disks: n + 1, NICs: n, Tags: 1, Groups: 2, VMTags: n, GroupMembers: 5}
	if got != want {
		t.Errorf("after resume:\n%+v\nwant\n%+v", got, want)
	}
	vms, _ = p2.List(context.Background(), infraID)
	for _, v := range vms {
		if !v.Complete {
			t.Errorf("%s incomplete after resume", v.Name)
		}
	}
	if lines, err := p2.Destroy(context.Background(), infraID); err != nil {
		t.Fatal(err, lines)
	}
	if got := e.inventory(t); got != (inventory{Templates: 1}) {
		t.Errorf("after destroy: %+v", got)
	}
}

func TestForeignVMWithOurNameIsNotAdopted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	spec := noResize(testSpec(t, 2))
	blank, _ := e.mock.GetBlankTemplate()
	name := spec.Machines[len(spec.Machines)-1].Name
	if _, err := e.mock.CreateVM(ovirtclient.ClusterID(e.opts.ClusterID), blank.ID(), name, nil); err != nil {
		t.Fatal(err)
	}
	err := apply(context.Background(), e.p, spec, 8, nil)
	if err == nil || !strings.Contains(err.Error(), "not part of cluster") {
		t.Fatalf("err = %v", err)
	}
	if _, err := e.p.Destroy(context.Background(), infraID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mock.GetVMByName(name); err != nil {
		t.Errorf("foreign VM removed: %v", err)
	}
}

func TestNoAffinity(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *Options) { o.Affinity.Disabled = true })
	spec := noResize(testSpec(t, 1))
	if err := apply(context.Background(), e.p, spec, 8, nil); err != nil {
		t.Fatal(err)
	}
	if got := e.inventory(t); got.Groups != 0 {
		t.Errorf("groups created: %+v", got)
	}
}
