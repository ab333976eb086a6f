package main

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"appliance/app/provision"
	"appliance/internal/cluster"
	"appliance/platform"
)

func TestProvisionPrintPlanAndStatus(t *testing.T) {
	mk := func(node string, role cluster.Role, last byte, ip string) platform.Machine {
		return platform.Machine{Name: "ocp4-x7k2p-" + node, Node: node, Role: role, CPUs: 4, MemoryMiB: 16384, DiskGiB: 120,
			MAC: net.HardwareAddr{2, 0, 0, 0, 0, last}, IPs: []netip.Addr{netip.MustParseAddr(ip)}, IgnitionSource: "assets/" + string(role) + ".ign"}
	}
	spec := &platform.Spec{InfraID: "ocp4-x7k2p", Machines: []platform.Machine{
		mk("bootstrap", cluster.RoleBootstrap, 9, "192.168.126.9"),
		mk("master-0", cluster.RoleMaster, 10, "192.168.126.10"),
		mk("worker-0", cluster.RoleWorker, 20, "192.168.126.20"),
	}}
	vms := []platform.VM{
		{Name: "ocp4-x7k2p-master-0", Node: "master-0", Power: platform.PowerRunning, Complete: true,
			MAC: net.HardwareAddr{2, 0, 0, 0, 0, 10}, Addresses: []netip.Addr{netip.MustParseAddr("192.168.126.10")}},
		{Name: "ocp4-x7k2p-worker-0", Node: "worker-0", Power: platform.PowerStopped},
		{Name: "ocp4-x7k2p-worker-9", Node: "worker-9", Power: platform.PowerStopped, Complete: true},
	}
	plan := platform.Diff(spec, vms)

	var b bytes.Buffer
	printPlan(&b, plan)
	out := b.String()
	for _, want := range []string{
		"NODE", "ocp4-x7k2p-bootstrap", "02:00:00:00:00:09", "192.168.126.9", "assets/bootstrap.ign", "16384 MiB", "120 GiB",
		"to create", "exists (running)", "half-built: apply completes it",
		"1 to create, 1 to complete, 1 exist.",
		"ocp4-x7k2p-worker-9",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}

	rows, stray := make([]platform.StatusRow, len(plan.Items)), plan.Stray
	for i, it := range plan.Items {
		rows[i] = platform.StatusRow{Machine: it.Machine, VM: it.Existing}
	}
	b.Reset()
	printStatus(&b, rows, stray)
	out = b.String()
	for _, want := range []string{"absent", "running", "stopped (half-built)", "(not in appliance.yaml)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
}

func TestProvisionProgressPlainLines(t *testing.T) {
	var b bytes.Buffer
	pr := newProgress(&b, []string{"vm-a"})
	pr.event(platform.Event{Stage: "uploading image", Done: 1, Total: 10})
	pr.event(platform.Event{Stage: "uploading image", Done: 5, Total: 10})
	pr.event(platform.Event{Machine: "vm-a", Stage: "creating"})
	pr.event(platform.Event{Machine: "vm-a", Stage: "creating"})
	pr.event(platform.Event{Machine: "vm-a", Stage: "started", Finished: true})
	pr.close()
	out := b.String()
	if n := strings.Count(out, "uploading image"); n != 1 {
		t.Errorf("byte progress printed %d lines in plain mode, want 1:\n%s", n, out)
	}
	if strings.Count(out, "vm-a") != 2 || !strings.Contains(out, "started") {
		t.Errorf("want one line per stage change:\n%s", out)
	}
}

// TestProvisionApplyLines: each of apply's events prints its line, in the
// order they come, merge warnings on stderr; off a terminal the live lines
// are plain lines and a download draws nothing.
func TestProvisionApplyLines(t *testing.T) {
	var out, errOut bytes.Buffer
	a := newApplyLines(&out, &errOut)
	for _, e := range []provision.Event{
		provision.IgnitionWarning{Text: "bootstrap.ign: /etc/x is replaced"},
		provision.ServingIgnition{Role: cluster.RoleBootstrap, URL: "https://127.0.0.1:8443/config/bootstrap"},
		provision.PlatformWarning{Text: "no guest agent"},
		provision.ImageDownload{Done: 1, Total: 2},
		provision.ImageDownloaded{},
		provision.BuildStart{Machines: []string{"ocp4-bootstrap", "ocp4-master-0"}},
		provision.MachineStep{Step: provision.Step{Machine: "ocp4-bootstrap", Stage: "creating"}},
		provision.MachineStep{Step: provision.Step{Machine: "ocp4-bootstrap", Stage: "started", Finished: true}},
		provision.BuildEnd{Result: &platform.Result{Created: []string{"ocp4-bootstrap"}, Existing: []string{"ocp4-master-0"},
			Started: []string{"ocp4-bootstrap", "ocp4-master-0"}, Elapsed: 1234 * time.Millisecond}},
		provision.WaitStart{Timeout: 3 * time.Second, Machines: []string{"ocp4-bootstrap", "ocp4-master-0"}},
		provision.MachineStep{Step: provision.Step{Machine: "ocp4-master-0", Stage: "starting"}},
		provision.WaitEnd{},
		provision.AllRunning{VMs: 2},
		provision.AwaitingFetch{Roles: []cluster.Role{cluster.RoleBootstrap, cluster.RoleMaster}},
		provision.AllFetched{},
	} {
		a.event(e)
	}
	a.close()
	want := []string{
		"serving the bootstrap Ignition at https://127.0.0.1:8443/config/bootstrap (CA generated for this run, in the VM's pointer config)",
		"warning: no guest agent",
		"ocp4-bootstrap               creating",
		"ocp4-bootstrap               started",
		"1 created, 0 completed, 1 already there, 2 started in 1.2s.",
		"waiting up to 3s for every VM to run and report its address:",
		"ocp4-master-0                starting",
		"all 2 VMs running with their addresses.",
		"serving Ignition until the bootstrap, master VMs have fetched it (Ctrl-C stops)...",
		"every served Ignition config was fetched.",
	}
	rest := out.String()
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("apply output lacks %q after what came before it:\n%s", w, out.String())
		}
		rest = rest[i+len(w):]
	}
	if strings.Contains(out.String(), "replaced") || errOut.String() != "warning: bootstrap.ign: /etc/x is replaced\n" {
		t.Errorf("merge warnings: stdout\n%s\nstderr %q", out.String(), errOut.String())
	}
	if strings.Contains(out.String(), "download") || strings.Contains(out.String(), "base image") {
		t.Errorf("off a terminal, the download drew:\n%s", out.String())
	}

	out.Reset()
	a = newApplyLines(&out, &errOut)
	a.event(provision.BuildStart{Machines: []string{"ocp4-bootstrap"}})
	a.event(provision.BuildEnd{})
	a.event(provision.ServerStops{Roles: []cluster.Role{cluster.RoleBootstrap}})
	if s := out.String(); strings.Contains(s, "created,") || !strings.Contains(s, "warning: the VMs are off, and the Ignition server stops now; their pointers carry this run's CA, so destroy them before the next apply serves again\n") {
		t.Errorf("a build with no result, then --no-start with served configs:\n%s", s)
	}
}

// TestProvisionDestroyLines: destroy prints a line per removed resource,
// and what it looked for when it removed nothing.
func TestProvisionDestroyLines(t *testing.T) {
	where := "libvirt (qemu:///system, pool default)"
	hint := " (if apply read the infra ID from metadata.json, give --assets DIR)"
	for _, c := range []struct {
		name      string
		bootstrap bool
		rep       provision.DestroyReport
		err       error
		want      string
	}{
		{"removed", false, provision.DestroyReport{Removed: []string{"undefined domain e2e-master-0", "deleted volume e2e-master-0.qcow2"}, InfraID: "e2e", Where: where},
			nil, "removed undefined domain e2e-master-0\nremoved deleted volume e2e-master-0.qcow2\n"},
		{"nothing", false, provision.DestroyReport{InfraID: "e2e", Where: where}, nil, "nothing carries infra ID e2e on " + where + "\n"},
		{"nothing, no assets", false, provision.DestroyReport{InfraID: "e2e", Where: where, NoAssets: true}, nil, "nothing carries infra ID e2e on " + where + hint + "\n"},
		{"partly", false, provision.DestroyReport{Removed: []string{"undefined domain e2e-master-0"}}, errors.New("refused"), "removed undefined domain e2e-master-0\n"},
		{"failed", false, provision.DestroyReport{InfraID: "e2e"}, errors.New("refused"), ""},
		{"bootstrap removed", true, provision.DestroyReport{Nodes: []string{"bootstrap"}, Removed: []string{"undefined domain e2e-bootstrap"}, InfraID: "e2e", Where: where},
			nil, "removed undefined domain e2e-bootstrap\n"},
		{"bootstrap gone", true, provision.DestroyReport{Nodes: []string{"bootstrap", "bootstrap-1"}, InfraID: "e2e", Where: where},
			nil, "no VM of bootstrap, bootstrap-1 (infra ID e2e) on " + where + "\n"},
		{"bootstrap gone, no assets", true, provision.DestroyReport{Nodes: []string{"bootstrap"}, InfraID: "e2e", Where: where, NoAssets: true},
			nil, "no VM of bootstrap (infra ID e2e) on " + where + hint + "\n"},
		{"bootstrap refused", true, provision.DestroyReport{Nodes: []string{"bootstrap"}, InfraID: "e2e", Where: where}, errors.New("control plane is not up"), ""},
		{"no bootstrap node", true, provision.DestroyReport{InfraID: "e2e", Where: where}, nil, "appliance.yaml lists no bootstrap node: nothing to remove\n"},
	} {
		var b bytes.Buffer
		printDestroy(&b, "appliance.yaml", c.bootstrap, &c.rep, c.err)
		if b.String() != c.want {
			t.Errorf("%s: printed %q, want %q", c.name, b.String(), c.want)
		}
	}
}
