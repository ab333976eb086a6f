//go:build bench

package dnsserver

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"appliance/internal/netlab/netlabtest"
)

// openShiftCorefile is OpenShift's on-prem CoreDNS configuration for the
// test cluster: templates for api, api-int and *.apps, hosts for the nodes,
// cache 30, forward to the upstream.
const openShiftCorefile = `. {
    errors
    bufsize 512
    health %s
    forward . %s {
        policy sequential
    }
    cache 30
    reload
    template IN A ocp4.example.com {
        match .*.apps.ocp4.example.com
        answer "{{ .Name }} 60 in A 192.168.126.6"
        fallthrough
    }
    template IN AAAA ocp4.example.com {
        match .*.apps.ocp4.example.com
        fallthrough
    }
    template IN A ocp4.example.com {
        match ^api.ocp4.example.com
        answer "{{ .Name }} 60 in A 192.168.126.5"
        fallthrough
    }
    template IN AAAA ocp4.example.com {
        match ^api.ocp4.example.com
        fallthrough
    }
    template IN A ocp4.example.com {
        match ^api-int.ocp4.example.com
        answer "{{ .Name }} 60 in A 192.168.126.5"
        fallthrough
    }
    template IN AAAA ocp4.example.com {
        match ^api-int.ocp4.example.com
        fallthrough
    }
    hosts {
%s        fallthrough
    }
}
`

var benchNodes = map[string]string{
	"master-0": "192.168.126.10", "master-1": "192.168.126.11", "master-2": "192.168.126.12",
	"worker-0": "192.168.126.20", "worker-1": "192.168.126.21",
}

// benchQueries is the query mix: cluster names, PTR and forwarded names.
func benchQueries() string {
	var b strings.Builder
	for _, q := range []string{
		"api.ocp4.example.com A", "api-int.ocp4.example.com A", "api-int.ocp4.example.com A",
		"console-openshift-console.apps.ocp4.example.com A", "oauth-openshift.apps.ocp4.example.com A",
		"oauth-openshift.apps.ocp4.example.com AAAA",
		"master-0.ocp4.example.com A", "master-1.ocp4.example.com A", "worker-0.ocp4.example.com A",
		"master-2 A", "10.126.168.192.in-addr.arpa PTR",
		"quay.io A", "registry.redhat.io A", "www.example.org A",
	} {
		b.WriteString(q + "\n")
	}
	return b.String()
}

type benchResult struct {
	name         string
	qps          float64
	lost         int
	p50, p99     time.Duration
	rss, peakRSS int // KiB
	maxQPS       float64
	maxLost      int
}

func TestBenchDNS(t *testing.T) {
	for _, tool := range []string{"dnsperf", "dnsmasq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed: %v", tool, err)
		}
	}
	dir := t.TempDir()
	up := startUpstream(t, "192.0.2.53")
	qfile := filepath.Join(dir, "queries")
	writeFile(t, qfile, benchQueries())

	// Build both binaries.
	app := filepath.Join(dir, "appliance")
	if out, err := exec.Command("go", "build", "-o", app, "appliance/cmd/appliance").CombinedOutput(); err != nil {
		t.Fatalf("build appliance: %v\n%s", err, out)
	}
	// Stock CoreDNS, every plugin, built from the module cache with its own
	// go.mod (its full dependency set is not in this module's go.sum; the
	// first build downloads it through the module proxy).
	modDir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/coredns/coredns").Output()
	if err != nil {
		t.Fatalf("locate coredns: %v", err)
	}
	coredns := filepath.Join(dir, "coredns")
	build := exec.Command("go", "build", "-o", coredns, ".")
	build.Dir = strings.TrimSpace(string(modDir))
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build coredns: %v\n%s", err, out)
	}

	var hosts strings.Builder
	var yamlNodes strings.Builder
	var dnsmasqArgs []string
	names := make([]string, 0, len(benchNodes))
	for n := range benchNodes {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		ip := benchNodes[n]
		fmt.Fprintf(&hosts, "        %s %s %s.ocp4.example.com\n", ip, n, n)
		fmt.Fprintf(&yamlNodes, "  - {name: %s, role: master, ips: [%s]}\n", n, ip)
		dnsmasqArgs = append(dnsmasqArgs, fmt.Sprintf("--host-record=%s,%s.ocp4.example.com,%s", n, n, ip))
	}

	servers := []struct {
		name  string
		start func(port int) *exec.Cmd
	}{
		{"appliance", func(port int) *exec.Cmd {
			cfg := filepath.Join(dir, "appliance.yaml")
			writeFile(t, cfg, fmt.Sprintf("cluster: {name: ocp4, baseDomain: example.com}\nnetwork:\n  machineCIDR: 192.168.126.0/24\n  apiVIPs: [192.168.126.5]\n  ingressVIPs: [192.168.126.6]\n  upstreamDNS: [%q]\nnodes:\n%s", up.addr.String(), yamlNodes.String()))
			return exec.Command(app, "dns", "--config", cfg, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--admin-listen", "127.0.0.1:0", "--log-level", "warn")
		}},
		{"coredns (OpenShift Corefile)", func(port int) *exec.Cmd {
			cf := filepath.Join(dir, "Corefile")
			writeFile(t, cf, fmt.Sprintf(openShiftCorefile, netlabtest.FreeLoopbackAddr(t), up.addr.String(), hosts.String()))
			return exec.Command(coredns, "-conf", cf, "-dns.port", strconv.Itoa(port), "-quiet")
		}},
		{"dnsmasq", func(port int) *exec.Cmd {
			args := []string{"--no-daemon", "--port", strconv.Itoa(port), "--listen-address=127.0.0.1", "--bind-interfaces",
				"--no-resolv", "--no-hosts", "--pid-file=", "--user=root", "--cache-size=1000",
				"--server=" + up.addr.Addr().String() + "#" + strconv.Itoa(int(up.addr.Port())),
				"--address=/apps.ocp4.example.com/192.168.126.6",
				"--host-record=api.ocp4.example.com,192.168.126.5", "--host-record=api-int.ocp4.example.com,192.168.126.5"}
			return exec.Command("dnsmasq", append(args, dnsmasqArgs...)...)
		}},
	}
	const rate, secs, rounds = 10000, 5, 3
	type running struct {
		name string
		port int
		cmd  *exec.Cmd
		runs []benchResult
	}
	var procs []*running
	for _, s := range servers {
		if only := os.Getenv("BENCH_DNS_ONLY"); only != "" && !strings.HasPrefix(s.name, only) {
			continue
		}
		addr := netlabtest.FreeLoopbackAddr(t)
		_, portS, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(portS)
		cmd := s.start(port)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		waitDNS(t, addr)
		// Warm the caches.
		runDNSPerf(t, port, qfile, 1, rate, false)
		procs = append(procs, &running{name: s.name, port: port, cmd: cmd})
	}
	// Interleave the servers over several rounds and keep the median of
	// each figure: this machine is shared, and one slow second would
	// otherwise decide a ratio.
	for range rounds {
		for _, p := range procs {
			var r benchResult
			r.qps, r.lost, r.p50, r.p99 = runDNSPerf(t, p.port, qfile, secs, rate, true)
			r.maxQPS, r.maxLost, _, _ = runDNSPerf(t, p.port, qfile, secs, 0, false)
			p.runs = append(p.runs, r)
		}
	}
	var results []benchResult
	for _, p := range procs {
		r := benchResult{name: p.name}
		r.qps = median(p.runs, func(x benchResult) float64 { return x.qps })
		r.maxQPS = median(p.runs, func(x benchResult) float64 { return x.maxQPS })
		r.p50 = time.Duration(median(p.runs, func(x benchResult) float64 { return float64(x.p50) }))
		r.p99 = time.Duration(median(p.runs, func(x benchResult) float64 { return float64(x.p99) }))
		for _, x := range p.runs {
			r.lost += x.lost
		}
		r.rss, r.peakRSS = procRSS(p.cmd.Process.Pid)
		results = append(results, r)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\nDNS: dnsperf -c 1 -T 1 on loopback, %d s at %d qps for latency, then %d s unlimited (-q 100), %d interleaved rounds, medians; query mix of %d names (cluster, PTR, forwarded+cached)\n\n", secs, rate, secs, rounds, strings.Count(benchQueries(), "\n"))
	b.WriteString("| server | qps @ fixed rate | lost | p50 | p99 | max qps | RSS after | peak RSS |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %.0f | %d | %v | %v | %.0f | %d MiB | %d MiB |\n", r.name, r.qps, r.lost, r.p50, r.p99, r.maxQPS, r.rss/1024, r.peakRSS/1024)
	}
	a := results[0]
	for _, r := range results[min(1, len(results)):] {
		fmt.Fprintf(&b, "\nappliance / %s: max qps %.2fx, p50 %.2fx, p99 %.2fx, peak RSS %.2fx", r.name,
			a.maxQPS/r.maxQPS, float64(a.p50)/float64(r.p50), float64(a.p99)/float64(r.p99), float64(a.peakRSS)/float64(r.peakRSS))
	}
	t.Log(b.String())
}

func waitDNS(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	c := &dns.Client{Timeout: 500 * time.Millisecond}
	for {
		m := new(dns.Msg)
		m.SetQuestion("api.ocp4.example.com.", dns.TypeA)
		if r, _, err := c.Exchange(m, addr); err == nil && len(r.Answer) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not answer", addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var (
	qpsRE  = regexp.MustCompile(`Queries per second:\s+([0-9.]+)`)
	lostRE = regexp.MustCompile(`Queries lost:\s+([0-9]+)`)
)

// runDNSPerf runs dnsperf and returns qps, lost queries and, with verbose,
// the median and 99th percentile latency of every answered query.
func runDNSPerf(t *testing.T, port int, qfile string, secs, rate int, verbose bool) (float64, int, time.Duration, time.Duration) {
	t.Helper()
	args := []string{"-s", "127.0.0.1", "-p", strconv.Itoa(port), "-d", qfile, "-l", strconv.Itoa(secs), "-c", "1", "-T", "1", "-q", "100"}
	if rate > 0 {
		args = append(args, "-Q", strconv.Itoa(rate))
	}
	if verbose {
		args = append(args, "-v")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs+30)*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "dnsperf", args...).Output()
	if err != nil {
		t.Fatalf("dnsperf: %v\n%s", err, out)
	}
	var qps float64
	var lost int
	if m := qpsRE.FindSubmatch(out); m != nil {
		qps, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	if m := lostRE.FindSubmatch(out); m != nil {
		lost, _ = strconv.Atoi(string(m[1]))
	}
	var lat []float64
	if verbose {
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) >= 5 && f[0] == ">" {
				if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
					lat = append(lat, v)
				}
			}
		}
	}
	if len(lat) == 0 {
		return qps, lost, 0, 0
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		return time.Duration(lat[int(p*float64(len(lat)-1))] * float64(time.Second)).Round(time.Microsecond)
	}
	return qps, lost, pct(0.50), pct(0.99)
}

// procRSS reads VmRSS and VmHWM (KiB) of pid.
func procRSS(pid int) (rss, peak int) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "VmRSS:" {
			rss, _ = strconv.Atoi(f[1])
		}
		if len(f) >= 2 && f[0] == "VmHWM:" {
			peak, _ = strconv.Atoi(f[1])
		}
	}
	return rss, peak
}

func median(rs []benchResult, f func(benchResult) float64) float64 {
	v := make([]float64, 0, len(rs))
	for _, r := range rs {
		v = append(v, f(r))
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}
