package ovirt

import (
	"context"
	"slices"
	"strings"
	"testing"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"

	"appliance/platform"
)

func TestDestroyFindsByTagOrMark(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	cid := ovirtclient.ClusterID(e.opts.ClusterID)
	blank, _ := e.mock.GetBlankTemplate()
	tagID, err := e.p.ensureTag(ctx, infraID)
	if err != nil {
		t.Fatal(err)
	}
	// Tagged by another tool for this cluster, without our description.
	tagged, err := e.mock.CreateVM(cid, blank.ID(), "tagged-by-hand", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.mock.AddTagToVM(tagged.ID(), tagID); err != nil {
		t.Fatal(err)
	}
	// Ours by description only (killed before tagging).
	if _, err := e.mock.CreateVM(cid, blank.ID(), infraID+"-worker-9", ovirtclient.NewCreateVMParams().
		MustWithDescription(mark{InfraID: infraID, Node: "worker-9", Role: "worker"}.String())); err != nil {
		t.Fatal(err)
	}
	// Another cluster's, and an unmarked one with our prefix.
	if _, err := e.mock.CreateVM(cid, blank.ID(), "ocp4-other-master-0", ovirtclient.NewCreateVMParams().
		MustWithDescription(mark{InfraID: "ocp4-other", Node: "master-0", Role: "master"}.String())); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mock.CreateVM(cid, blank.ID(), infraID+"-master-7", nil); err != nil {
		t.Fatal(err)
	}
	vms, err := e.p.List(ctx, infraID)
	if err != nil || len(vms) != 2 {
		t.Fatalf("List: %v %v", vms, err)
	}
	lines, err := e.p.Destroy(ctx, infraID)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"tag " + infraID, "vm " + infraID + "-worker-9", "vm tagged-by-hand"}
	if !slices.Equal(lines, want) {
		t.Errorf("destroy: %v, want %v", lines, want)
	}
	left, _ := e.mock.ListVMs()
	var names []string
	for _, v := range left {
		names = append(names, v.Name())
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"ocp4-other-master-0", infraID + "-master-7"}) {
		t.Errorf("left: %v", names)
	}
}

// TestDestroyBootstrapOnly: `provision destroy --bootstrap` through the
// engine removes the bootstrap VM with its disk, NIC and tag link; the
// masters and workers keep running (or starting, in the mock), and the template, image disk, tag and
// affinity groups stay.
func TestDestroyBootstrapOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *Options) { o.Affinity.Soft = true }) // the mock has one host
	ctx := context.Background()
	spec := noResize(testSpec(t, 2))
	if _, err := platform.Apply(ctx, e.p, spec, platform.ApplyOptions{Parallel: 4}); err != nil {
		t.Fatal(err)
	}
	before := e.inventory(t)
	boot := spec.Machines[0].Name
	vm, err := e.mock.GetVMByName(boot)
	if err != nil {
		t.Fatal(err)
	}
	atts, _ := e.mock.ListDiskAttachments(vm.ID())

	lines, err := platform.DestroyNodes(ctx, e.p, infraID, []string{"bootstrap"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lines, []string{"vm " + boot}) {
		t.Errorf("lines %v", lines)
	}
	after := e.inventory(t)
	want := before
	want.VMs--
	want.NICs--
	want.VMTags--
	want.Disks -= len(atts)
	if after.GroupMembers != before.GroupMembers { // the engine drops a removed VM from its groups
		want.GroupMembers = after.GroupMembers
	}
	if after != want || len(atts) == 0 {
		t.Errorf("after destroy --bootstrap:\n%+v\nwant\n%+v (the bootstrap had %d disks)", after, want, len(atts))
	}
	vms, err := e.p.List(ctx, infraID)
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != len(spec.Machines)-1 {
		t.Errorf("%d VMs left, want %d", len(vms), len(spec.Machines)-1)
	}
	for _, v := range vms {
		if v.Name == boot || (v.Power != platform.PowerRunning && v.Power != platform.PowerStarting) {
			t.Errorf("%s is %s after destroy --bootstrap", v.Name, v.Power)
		}
	}
	if lines, err := platform.DestroyNodes(ctx, e.p, infraID, []string{"bootstrap"}, nil); err != nil || len(lines) != 0 {
		t.Errorf("again: %v %v", lines, err)
	}
}

// An empty infra ID is refused before anything is listed or removed: every
// name and mark the provider owns starts with it.
func TestEmptyInfraIDRefused(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.p.Destroy(ctx, ""); err == nil || !strings.Contains(err.Error(), "empty infra ID") {
		t.Errorf("Destroy(\"\") = %v, want a refusal", err)
	}
	if _, err := e.p.List(ctx, ""); err == nil || !strings.Contains(err.Error(), "empty infra ID") {
		t.Errorf("List(\"\") = %v, want a refusal", err)
	}
	if _, err := e.p.DestroyVMs(ctx, "", nil); err == nil || !strings.Contains(err.Error(), "empty infra ID") {
		t.Errorf("DestroyVMs(\"\") = %v, want a refusal", err)
	}
}
