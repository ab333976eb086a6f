//go:build bench

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// `make bench` runs these: the appliance next to keepalived in the same
// topology, in one run, printed as a table of ratios for BENCHMARKS.md.

// vrrpImpl starts one VRRP speaker of a kind on a node.
type vrrpImpl struct {
	name  string
	start func(t *testing.T, lab *netlab.Lab, n *netlab.Node, prio int) *netlab.Process
}

func applianceImpl(interval time.Duration) vrrpImpl {
	return vrrpImpl{
		name: fmt.Sprintf("appliance v3 %s", interval),
		start: func(t *testing.T, lab *netlab.Lab, n *netlab.Node, prio int) *netlab.Process {
			return startApplianceQuiet(t, n, "vip", "--interface", "eth0", "--vip", prefixOf(lab, labVIP),
				"--vrid", "51", "--priority", strconv.Itoa(prio), "--advert-interval", interval.String())
		},
	}
}

func keepalivedImpl(version int, interval string) vrrpImpl {
	return vrrpImpl{
		name: fmt.Sprintf("keepalived v%d %ss", version, interval),
		start: func(t *testing.T, lab *netlab.Lab, n *netlab.Node, prio int) *netlab.Process {
			return startKeepalived(t, n, keepalivedConf{Version: version, VRID: 51, Priority: prio,
				Interval: interval, VIP: prefixOf(lab, labVIP)})
		},
	}
}

type series []time.Duration

func (s series) stats() (lo, med, hi time.Duration) {
	if len(s) == 0 {
		return
	}
	c := slices.Clone(s)
	slices.Sort(c)
	return c[0], c[len(c)/2], c[len(c)-1]
}

func (s series) String() string {
	lo, med, hi := s.stats()
	return fmt.Sprintf("%s / %s / %s", ms(lo), ms(med), ms(hi))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

type failoverResult struct {
	impl                       string
	unplanned, unplannedOutage series
	planned, plannedOutage     series
}

// waitHolds polls n every millisecond until it holds the VIP.
func waitHolds(t *testing.T, n *netlab.Node, timeout time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < timeout {
		if holds(t, n, labVIP) {
			return time.Since(start), true
		}
		time.Sleep(time.Millisecond)
	}
	return 0, false
}

func runs() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_RUNS")); err == nil && n > 0 {
		return n
	}
	return 10
}

// measureFailover runs the unplanned (link cut) and planned (SIGTERM) cases
// runs() times each for one implementation.
func measureFailover(t *testing.T, impl vrrpImpl) failoverResult {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "bfo"})
	master, backup, client := lab.Nodes[0], lab.Nodes[1], lab.Nodes[2]
	res := failoverResult{impl: impl.name}
	procs := map[string]*netlab.Process{}
	dumpOnFailure(t, procs)
	procs["backup"] = impl.start(t, lab, backup, 90)
	procs["master"] = impl.start(t, lab, master, 100)
	ping, err := client.Ping(labVIP, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer ping.Close()
	settle := func() {
		t.Helper()
		waitHolder(t, lab.Nodes[:2], labVIP, 0, 30*time.Second, 1500*time.Millisecond)
	}
	for i := 0; i < runs(); i++ {
		settle()
		t0 := time.Now()
		if err := master.LinkDown(); err != nil {
			t.Fatal(err)
		}
		d, ok := waitHolds(t, backup, 15*time.Second)
		if !ok {
			t.Fatalf("%s: backup never took over after the link cut", impl.name)
		}
		time.Sleep(500 * time.Millisecond)
		res.unplanned = append(res.unplanned, d)
		res.unplannedOutage = append(res.unplannedOutage, ping.LongestOutage(t0, time.Now(), 50*time.Millisecond))
		if err := master.LinkUp(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < runs(); i++ {
		settle()
		t0 := time.Now()
		procs["master"].Signal(syscall.SIGTERM)
		d, ok := waitHolds(t, backup, 15*time.Second)
		if !ok {
			t.Fatalf("%s: backup never took over after SIGTERM", impl.name)
		}
		time.Sleep(500 * time.Millisecond)
		res.planned = append(res.planned, d)
		res.plannedOutage = append(res.plannedOutage, ping.LongestOutage(t0, time.Now(), 50*time.Millisecond))
		procs["master"].Wait()
		procs["master"] = impl.start(t, lab, master, 100)
	}
	return res
}

func ratio(a, b series) string {
	_, ma, _ := a.stats()
	_, mb, _ := b.stats()
	switch {
	case ma == 0 && mb == 0:
		return "both none"
	case ma == 0:
		return fmt.Sprintf("none vs %s", ms(mb))
	}
	return fmt.Sprintf("%.1f×", float64(mb)/float64(ma))
}

func TestBenchVRRPFailover(t *testing.T) {
	netlabtest.RequireRoot(t)
	impls := []vrrpImpl{
		applianceImpl(cluster.DefaultAdvertInterval), // our default
		keepalivedImpl(2, "1"),                       // keepalived's default (v2, 1 s)
		applianceImpl(time.Second),                   // equal interval, 1 s
		keepalivedImpl(3, "0.1"),                     // equal interval, 100 ms
	}
	if cluster.DefaultAdvertInterval != 100*time.Millisecond {
		impls = append(impls, applianceImpl(100*time.Millisecond))
	} else {
		impls = append(impls, applianceImpl(200*time.Millisecond))
	}
	equal100 := 4
	if cluster.DefaultAdvertInterval == 100*time.Millisecond {
		equal100 = 0
	}
	results := make([]failoverResult, len(impls))
	for i, impl := range impls {
		t.Run(strings.ReplaceAll(impl.name, " ", "_"), func(t *testing.T) {
			results[i] = measureFailover(t, impl)
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nVRRP failover, %d runs each, min / median / max (time until the backup holds the VIP; client outage = longest gap in 5 ms pings)\n\n", runs())
	fmt.Fprintln(&b, "| implementation | unplanned (link cut) | client outage | planned (SIGTERM) | client outage |")
	fmt.Fprintln(&b, "|---|---|---|---|---|")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.impl, r.unplanned, r.unplannedOutage, r.planned, r.plannedOutage)
	}
	fmt.Fprintln(&b, "\nRatios of medians (keepalived ÷ appliance; above 1× means the appliance is faster):")
	pairs := [][2]int{{1, 0}, {3, equal100}, {1, 2}}
	labels := []string{"each at its default (keepalived v2 1 s vs appliance v3 " + cluster.DefaultAdvertInterval.String() + ")",
		"equal interval 100 ms", "equal interval 1 s"}
	for i, p := range pairs {
		k, a := results[p[0]], results[p[1]]
		fmt.Fprintf(&b, "- %s: unplanned %s, planned %s, client outage unplanned %s / planned %s\n", labels[i],
			ratio(a.unplanned, k.unplanned), ratio(a.planned, k.planned),
			ratio(a.unplannedOutage, k.unplannedOutage), ratio(a.plannedOutage, k.plannedOutage))
	}
	t.Log(b.String())
}

// procUsage sums RSS (kB) and CPU time of pid and its children.
func procUsage(pid int) (rssKB int, cpu time.Duration) {
	pids := []int{pid}
	if out, err := exec.Command("pgrep", "-P", strconv.Itoa(pid)).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if c, err := strconv.Atoi(f); err == nil {
				pids = append(pids, c)
			}
		}
	}
	for _, p := range pids {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p)); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(line, "VmRSS:") {
					v, _ := strconv.Atoi(strings.Fields(line)[1])
					rssKB += v
				}
			}
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p)); err == nil {
			s := string(b)
			f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
			ut, _ := strconv.Atoi(f[11])
			st, _ := strconv.Atoi(f[12])
			cpu += time.Duration(ut+st) * time.Second / 100 // USER_HZ
		}
	}
	return
}

func soakDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("BENCH_SOAK")); err == nil {
		return d
	}
	return 10 * time.Minute
}

// TestBenchVRRPSoak runs an appliance pair and a keepalived pair, each at its
// default interval, side by side for BENCH_SOAK (10 min) while stress-ng
// loads both cores, and counts false takeovers (any change of holder).
func TestBenchVRRPSoak(t *testing.T) {
	netlabtest.RequireRoot(t)
	if _, err := exec.LookPath("stress-ng"); err != nil {
		t.Fatal("stress-ng is not installed (make test-deps installs it)")
	}
	type pair struct {
		impl  vrrpImpl
		lab   *netlab.Lab
		procs []*netlab.Process
	}
	pairs := []*pair{
		{impl: applianceImpl(100 * time.Millisecond)},
		{impl: keepalivedImpl(3, "0.1")}, // keepalived at 100 ms
		{impl: applianceImpl(200 * time.Millisecond)},
		{impl: keepalivedImpl(3, "0.2")}, // keepalived at 200 ms
		{impl: keepalivedImpl(2, "1")},   // keepalived's default
	}
	// A false takeover can last a few milliseconds, below the holder
	// polling; count the backups' own reports of becoming MASTER too.
	becameMaster := func(out string) int {
		return strings.Count(out, "to=MASTER") + strings.Count(out, "Entering MASTER STATE")
	}
	for _, p := range pairs {
		p.lab = netlabtest.New(t, netlab.Options{Nodes: 2, Name: "bsoak"})
		p.procs = []*netlab.Process{p.impl.start(t, p.lab, p.lab.Nodes[0], 100), p.impl.start(t, p.lab, p.lab.Nodes[1], 90)}
		waitHolder(t, p.lab.Nodes, labVIP, 0, 30*time.Second, 2*time.Second)
	}
	d := soakDuration()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	stress := exec.CommandContext(ctx, "stress-ng", "--cpu", "2", "--cpu-load", "100", "--timeout", strconv.Itoa(int(d.Seconds())))
	if err := stress.Start(); err != nil {
		t.Fatal(err)
	}
	defer stress.Wait()
	startCPU := make([]time.Duration, len(pairs))
	startMaster := make([]int, len(pairs))
	for i, p := range pairs {
		_, startCPU[i] = procUsage(p.procs[0].Pid())
		startMaster[i] = becameMaster(p.procs[1].Output())
	}
	changes := make([]int, len(pairs))
	dual := make([]int, len(pairs))
	last := make([]string, len(pairs))
	for i := range last {
		last[i] = "n0"
	}
	for ctx.Err() == nil {
		for i, p := range pairs {
			h := holders(t, p.lab.Nodes, labVIP)
			cur := fmt.Sprint(h)
			if len(h) == 1 {
				cur = fmt.Sprintf("n%d", h[0])
			}
			if len(h) > 1 {
				dual[i]++
			}
			if cur != last[i] {
				changes[i]++
				t.Logf("%s: holder %s -> %s at %s", p.impl.name, last[i], cur, time.Now().Format(time.TimeOnly))
				last[i] = cur
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nSoak %s with stress-ng --cpu 2 (both cores at 100%%), master and backup per implementation\n\n", d)
	fmt.Fprintln(&b, "| implementation | false takeovers (backup became MASTER) | holder changes seen (50 ms polls) | samples with two holders | master RSS | master CPU over the soak |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|")
	for i, p := range pairs {
		rss, cpu := procUsage(p.procs[0].Pid())
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %.1f MiB | %s (%.2f%% of one core) |\n", p.impl.name,
			becameMaster(p.procs[1].Output())-startMaster[i], changes[i], dual[i],
			float64(rss)/1024, (cpu - startCPU[i]).Round(10*time.Millisecond), 100*float64(cpu-startCPU[i])/float64(d))
	}
	t.Log(b.String())
	// What the daemons said about each false takeover.
	for _, p := range pairs {
		for i, proc := range p.procs {
			if lines := grepLines(proc.Output(), "state changed"); strings.Count(lines, "\n") > 2 {
				t.Logf("%s n%d transitions:\n%s", p.impl.name, i, lines)
			}
		}
	}
}
