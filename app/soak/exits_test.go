package soak

import (
	"strings"
	"testing"
	"time"

	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// TestUnplannedExits: a process that ends on its own breaks the
// invariant, also when a fault comes to stop it afterwards; one a fault
// stops, or one still running, does not.
func TestUnplannedExits(t *testing.T) {
	l := netlabtest.New(t, netlab.Options{Nodes: 1, Name: "exits"})
	nd := &node{name: "master-0", role: roleMaster, n: l.Nodes[0], procs: map[string]*netlab.Process{}}
	c := &cluster{nodes: []*node{nd}}
	start := func(key string, args ...string) *netlab.Process {
		p, err := nd.n.Start(t.Context(), "sh", append([]string{"-c"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		nd.setProc(key, p)
		return p
	}
	start("run", "sleep 60")
	start("mcs", "sleep 60")
	if err := c.stop(nd, "mcs", true, 0); err != nil {
		t.Fatal(err)
	}
	start("router", "sleep 60")
	if err := c.stop(nd, "router", false, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if inv := c.unplannedExits(); len(inv.Violations) != 0 || inv.Checks != 3 {
		t.Fatalf("no process ended on its own, yet %d checks, violations %q", inv.Checks, inv.Violations)
	}

	<-start("apiserver", "echo panic: boom; exit 2").Done()
	if err := c.stop(nd, "apiserver", true, 0); err != nil { // the fault comes too late
		t.Fatal(err)
	}
	inv := c.unplannedExits()
	if len(inv.Violations) != 1 || !strings.Contains(inv.Violations[0], "master-0's apiserver") ||
		!strings.Contains(inv.Violations[0], "exit status 2") || !strings.Contains(inv.Violations[0], "panic: boom") {
		t.Errorf("violations %q, want the apiserver's exit with its status and output", inv.Violations)
	}
}
