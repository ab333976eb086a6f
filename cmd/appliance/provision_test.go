package main

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"

	"appliance/internal/cluster"
	"appliance/platform"
)

func TestPrintPlanAndStatus(t *testing.T) {
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

func TestProgressPlainLines(t *testing.T) {
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
