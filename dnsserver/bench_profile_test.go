//go:build bench

package dnsserver

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"

	"appliance/internal/cluster"
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
