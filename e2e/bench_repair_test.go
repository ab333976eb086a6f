//go:build bench

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// anyHolds polls every millisecond until one of nodes holds the VIP.
func anyHolds(t *testing.T, nodes []*netlab.Node, timeout time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < timeout {
		if len(holders(t, nodes, labVIP)) > 0 {
			return time.Since(start), true
		}
		time.Sleep(time.Millisecond)
	}
	return 0, false
}

type repairResult struct {
	impl             string
	vipBack, peerVIP series
	vipMissed        int // runs in which nobody held the VIP again within the timeout
}

// measureRepair deletes the master's VIP (`ip addr del`, as an operator or
// NetworkManager would) and then the master's own address, runs() times
// each, timing until a node holds the VIP again.
func measureRepair(t *testing.T, impl vrrpImpl) repairResult {
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "brep"})
	master, backup := lab.Nodes[0], lab.Nodes[1]
	res := repairResult{impl: impl.name}
	procs := map[string]*netlab.Process{}
	dumpOnFailure(t, procs)
	procs["backup"] = impl.start(t, lab, backup, 90)
	procs["master"] = impl.start(t, lab, master, 100)
	ip := func(args ...string) {
		t.Helper()
		if out, err := master.Run(context.Background(), "ip", args...); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	settle := func() {
		t.Helper()
		waitHolder(t, lab.Nodes, labVIP, 0, 30*time.Second, 1500*time.Millisecond)
	}
	for range runs() {
		settle()
		ip("addr", "del", prefixOf(lab, labVIP), "dev", "eth0")
		d, ok := anyHolds(t, lab.Nodes, 10*time.Second)
		if !ok {
			// keepalived may never notice; put it back by hand for the next run.
			res.vipMissed++
			ip("addr", "add", prefixOf(lab, labVIP), "dev", "eth0")
			continue
		}
		res.vipBack = append(res.vipBack, d)
	}
	own := master.IPv4.String()
	for range runs() {
		settle()
		ip("addr", "del", own, "dev", "eth0")
		d, ok := waitHolds(t, backup, 15*time.Second)
		if !ok {
			t.Fatalf("%s: the backup never took over after the master lost its address", impl.name)
		}
		res.peerVIP = append(res.peerVIP, d)
		ip("addr", "add", own, "dev", "eth0")
	}
	return res
}

func TestBenchVRRPRepair(t *testing.T) {
	netlabtest.RequireRoot(t)
	impls := []vrrpImpl{
		applianceImpl(cluster.DefaultAdvertInterval),
		keepalivedImpl(2, "1"),
		keepalivedImpl(3, "0.1"),
	}
	results := make([]repairResult, len(impls))
	for i, impl := range impls {
		t.Run(strings.ReplaceAll(impl.name, " ", "_"), func(t *testing.T) {
			results[i] = measureRepair(t, impl)
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nVRRP kernel-state repair, %d runs each, min / median / max\n\n", runs())
	fmt.Fprintln(&b, "| implementation | VIP deleted on the master: held again after | runs never repaired | master's own address deleted: backup holds the VIP after |")
	fmt.Fprintln(&b, "|---|---|---|---|")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %d | %s |\n", r.impl, r.vipBack, r.vipMissed, r.peerVIP)
	}
	fmt.Fprintln(&b, "\nRatios of medians (keepalived ÷ appliance; above 1× means the appliance is faster):")
	for _, k := range results[1:] {
		fmt.Fprintf(&b, "- vs %s: VIP repair %s, peer takeover %s\n", k.impl,
			ratio(results[0].vipBack, k.vipBack), ratio(results[0].peerVIP, k.peerVIP))
	}
	t.Log(b.String())
}
