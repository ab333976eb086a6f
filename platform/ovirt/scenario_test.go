package ovirt

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"

	"appliance/platform"
)

func TestApplyListDestroy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.foreign(t)
	before := e.inventory(t)
	spec := testSpec(t, 2)
	ctx := context.Background()

	var mu sync.Mutex
	stages := map[string][]string{}
	if err := apply(ctx, e.p, spec, 8, func(m platform.Machine, s string) {
		mu.Lock()
		stages[m.Node] = append(stages[m.Node], s)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if got := stages["master-1"]; !slices.Equal(got, []string{"clone", "disk", "nic", "tag", "affinity", "created"}) {
		t.Errorf("stages of master-1: %v", got)
	}

	// Template.
	tpl, err := e.mock.GetTemplateByName(infraID + "-rhcos")
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Status() != ovirtclient.TemplateStatusOK || tpl.Description() != (mark{InfraID: infraID, Image: spec.Image.SHA256}).String() {
		t.Errorf("template %s %q", tpl.Status(), tpl.Description())
	}
	if atts, _ := tpl.ListDiskAttachments(); len(atts) != 1 {
		t.Errorf("template disks: %d", len(atts))
	}
	if _, err := e.mock.GetVMByName(builderName(infraID)); err == nil {
		t.Error("image builder VM left behind")
	}

	// VMs.
	tagID, ok, err := e.p.findTag(ctx, infraID)
	if err != nil || !ok {
		t.Fatalf("tag: %v %v", ok, err)
	}
	groups := map[string]ovirtclient.AffinityGroup{}
	ags, _ := e.mock.ListAffinityGroups(ovirtclient.ClusterID(e.opts.ClusterID))
	for _, g := range ags {
		groups[g.Name()] = g
	}
	for _, m := range spec.Machines {
		vm, err := e.mock.GetVMByName(m.Name)
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if topo := vm.CPU().Topo(); topo.Cores() != uint(m.CPUs) || topo.Sockets() != 1 || topo.Threads() != 1 {
			t.Errorf("%s CPU %d/%d/%d", m.Name, topo.Sockets(), topo.Cores(), topo.Threads())
		}
		if vm.Memory() != int64(m.MemoryMiB)<<20 {
			t.Errorf("%s memory %d", m.Name, vm.Memory())
		}
		if vm.OS().Type() != "rhcos_x64" {
			t.Errorf("%s OS %s", m.Name, vm.OS().Type())
		}
		if vm.Initialization().CustomScript() != string(m.Ignition) || vm.Initialization().HostName() != m.Node {
			t.Errorf("%s init %q %q", m.Name, vm.Initialization().CustomScript(), vm.Initialization().HostName())
		}
		if vm.Status() != ovirtclient.VMStatusDown {
			t.Errorf("%s started by Create: %s", m.Name, vm.Status())
		}
		if vm.Comment() != completeComment {
			t.Errorf("%s comment %q", m.Name, vm.Comment())
		}
		atts, _ := vm.ListDiskAttachments()
		if len(atts) != 1 {
			t.Fatalf("%s disks %d", m.Name, len(atts))
		}
		d, _ := e.mock.GetDisk(atts[0].DiskID())
		if want := uint64(max(m.DiskGiB, 16)) << 30; d.ProvisionedSize() != want {
			t.Errorf("%s disk %d, want %d", m.Name, d.ProvisionedSize(), want)
		}
		if !slices.Contains(d.StorageDomainIDs(), ovirtclient.StorageDomainID(e.opts.StorageDomainID)) {
			t.Errorf("%s disk on %v", m.Name, d.StorageDomainIDs())
		}
		nics, _ := vm.ListNICs()
		if len(nics) != 1 || !strings.EqualFold(nics[0].Mac(), m.MAC.String()) || string(nics[0].VNICProfileID()) != e.opts.VNICProfileID {
			t.Errorf("%s NICs %v", m.Name, nics)
		}
		tags, _ := vm.ListTags()
		if len(tags) != 1 || tags[0].ID() != tagID {
			t.Errorf("%s tags %v", m.Name, tags)
		}
		for name, g := range groups {
			in := slices.Contains(g.VMIDs(), vm.ID())
			want := name == groupName(infraID, string(m.Role))
			if in != want {
				t.Errorf("%s in group %s: %v", m.Name, name, in)
			}
		}
	}
	for _, n := range []string{infraID + "-controlplane", infraID + "-compute"} {
		g, ok := groups[n]
		if !ok {
			t.Fatalf("group %s missing", n)
		}
		if !g.Enforcing() || !g.VMsRule().Enforcing() || g.VMsRule().Affinity() != ovirtclient.AffinityNegative || !g.VMsRule().Enabled() {
			t.Errorf("group %s not negative enforcing", n)
		}
	}

	// List.
	vms, err := e.p.List(ctx, infraID)
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != len(spec.Machines) {
		t.Fatalf("List: %d VMs", len(vms))
	}
	for _, v := range vms {
		i := slices.IndexFunc(spec.Machines, func(m platform.Machine) bool { return m.Name == v.Name })
		if i < 0 || v.Node != spec.Machines[i].Node || !v.Complete || v.Power != platform.PowerStopped ||
			v.MAC.String() != spec.Machines[i].MAC.String() || len(v.Addresses) != 0 {
			t.Errorf("List: %+v", v)
		}
	}

	// Re-run: nothing new.
	after := e.inventory(t)
	var progressCalls int
	if err := e.p.PrepareImage(ctx, spec, func(d, total int64) { progressCalls++ }); err != nil {
		t.Fatal(err)
	}
	if progressCalls != 1 {
		t.Errorf("re-run PrepareImage reported %d progress calls, want 1 (nothing uploaded)", progressCalls)
	}
	if err := apply(ctx, e.p, spec, 8, nil); err != nil {
		t.Fatal(err)
	}
	if again := e.inventory(t); again != after {
		t.Errorf("re-run changed the inventory:\n%+v\n%+v", after, again)
	}
	// A fresh provider (a new process) sees the same.
	p2, _ := NewWithClient(ctx, e.mock, e.opts, nil)
	if err := apply(ctx, p2, spec, 8, nil); err != nil {
		t.Fatal(err)
	}
	if again := e.inventory(t); again != after {
		t.Errorf("re-run in new provider changed the inventory:\n%+v\n%+v", after, again)
	}

	// Destroy leaves exactly the foreign objects.
	lines, err := e.p.Destroy(ctx, infraID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("destroy:\n%s", strings.Join(lines, "\n"))
	if len(lines) != len(spec.Machines)+2+1+1 {
		t.Errorf("destroy lines: %v", lines)
	}
	if got := e.inventory(t); got != before {
		t.Errorf("after destroy:\n%+v\nwant (foreign only)\n%+v", got, before)
	}
	for _, n := range []string{infraID + "-master-0-old", "ocp4-x7k2q-master-0", infraID + "-rhcos-builder-x"} {
		if _, err := e.mock.GetVMByName(n); err != nil {
			t.Errorf("foreign VM %s: %v", n, err)
		}
	}
	// Destroy again: nothing to do, no error.
	if lines, err := e.p.Destroy(ctx, infraID); err != nil || len(lines) != 0 {
		t.Errorf("second destroy: %v %v", lines, err)
	}
}
