//go:build bench

package dnsserver

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/exepages"
)

// TestBenchDNSProfile serves the bench's query mix in process under dnsperf
// and reports where the CPU goes and the allocations per query. Run the test
// binary pinned (taskset -c 1) with BENCH_DNS_PROFILE=cpu.out to keep the
// profile; dnsperf runs on CPU 0 as in TestBenchDNS. BENCH_DNS_FORWARDED=1
// asks forwarded names (served from the cache) instead of cluster names,
// BENCH_DNS_NOFAST=1 turns the fast path off. BENCH_DNS_RATE=N sends N
// queries a second instead of as many as it answers, and reports the CPU
// time a query costs at that rate (a node's load, where the cost is mostly
// waking up for each packet).
func TestBenchDNSProfile(t *testing.T) {
	port, qfile := benchInProcess(t)
	runDNSPerf(t, port, qfile, 1, 0, false)

	if out := os.Getenv("BENCH_DNS_PROFILE"); out != "" {
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	rate, _ := strconv.Atoi(os.Getenv("BENCH_DNS_RATE"))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0 := procCPU(os.Getpid())
	qps, _, _, _ := runDNSPerf(t, port, qfile, benchSecs, rate, false)
	cpu := procCPU(os.Getpid()) - cpu0
	runtime.ReadMemStats(&after)
	n := qps * benchSecs
	t.Logf("%.0f qps; %.1f µs of CPU, %.1f allocations, %.0f bytes allocated per query; %d GCs", qps, cpu/n*1e6,
		float64(after.Mallocs-before.Mallocs)/n, float64(after.TotalAlloc-before.TotalAlloc)/n, after.NumGC-before.NumGC)
}

// benchInProcess starts a server for the bench's cluster in this process
// and writes the query mix (BENCH_DNS_FORWARDED, BENCH_DNS_NOFAST as in
// TestBenchDNSProfile); it returns the server's port and the query file.
func benchInProcess(t *testing.T) (int, string) {
	cfg := testConfig()
	cfg.Nodes = nil
	cfg.Network.UpstreamDNS = []netip.AddrPort{startAuthUpstream(t).addr}
	for name, ip := range benchNodes {
		cfg.Nodes = append(cfg.Nodes, cluster.Node{Name: name, Role: cluster.RoleMaster, IPs: []netip.Addr{netip.MustParseAddr(ip)}})
	}
	_, addr := startServer(t, cfg, cluster.NewState(cfg), Options{NoFastPath: os.Getenv("BENCH_DNS_NOFAST") != ""})
	_, portS, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portS)
	qfile := filepath.Join(t.TempDir(), "queries")
	queries := benchQueries()
	if os.Getenv("BENCH_DNS_FORWARDED") != "" {
		queries = benchForwardedQueries()
	}
	writeFile(t, qfile, queries)
	return port, qfile
}

// TestBenchDNSReleaseCost: what the hourly release of the binary's pages
// (internal/exepages, run by every service) costs a DNS server at a node's
// rate. The server runs in this process (the test binary's pages are the
// ones released); each pair of 1 s runs at 1,000 q/s is one without a
// release before it and one right after a release, and reports the minor
// page faults and the CPU time of the process over the run.
func TestBenchDNSReleaseCost(t *testing.T) {
	port, qfile := benchInProcess(t)
	runDNSPerf(t, port, qfile, 2, nodeRate, false)
	minflt := func() int64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return ru.Minflt
	}
	var b strings.Builder
	b.WriteString("\n| run | released before | minor faults | CPU |\n|---|---|---|---|\n")
	for i := range 3 {
		for _, release := range []bool{false, true} {
			released := int64(0)
			if release {
				var err error
				if released, err = exepages.Release(); err != nil {
					t.Fatal(err)
				}
			}
			f0, c0 := minflt(), procCPUTime(os.Getpid())
			runDNSPerf(t, port, qfile, 1, nodeRate, false)
			fmt.Fprintf(&b, "| %d | %.1f MiB | %d | %v |\n", i+1, float64(released)/(1<<20), minflt()-f0,
				time.Duration(procCPUTime(os.Getpid())-c0).Round(10*time.Microsecond))
		}
	}
	t.Logf("1 s at %d q/s (cluster names), the server in process:%s", nodeRate, b.String())
}
