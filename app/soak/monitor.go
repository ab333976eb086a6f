package soak

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// holderChange is a change of who carries a VIP in the kernel: what
// clients' neighbour tables end up pointing at.
type holderChange struct {
	At      time.Time `json:"at"`
	VIP     string    `json:"vip"` // "api" or "ingress"
	Holders []string  `json:"holders"`
}

// vipNames are the VIPs the soak watches, by the names the report uses.
var vipNames = []struct {
	name string
	addr netip.Addr
}{{"api", apiVIP}, {"ingress", ingressVIP}}

// holderEvery is how often the monitor reads every node's addresses.
const holderEvery = 50 * time.Millisecond

// watchHolders records every change of the VIPs' holders until ctx ends.
func watchHolders(ctx context.Context, c *cluster, rec *recorder, wg *sync.WaitGroup) {
	last := map[string][]string{"api": {"(start)"}, "ingress": {"(start)"}}
	every(ctx, wg, holderEvery, func() {
		now := time.Now()
		for _, v := range vipNames {
			hs := c.holders(v.addr)
			if !slices.Equal(hs, last[v.name]) {
				rec.addHolders(holderChange{At: now, VIP: v.name, Holders: hs})
				last[v.name] = hs
			}
		}
	})
}

// every runs do every d, in a goroutine counted in wg, until ctx ends.
func every(ctx context.Context, wg *sync.WaitGroup, d time.Duration, do func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				do()
			}
		}
	}()
}

// procSample is one reading of a node's appliance process.
type procSample struct {
	At         time.Time `json:"at"`
	Node       string    `json:"node"`
	Pid        int       `json:"pid"`
	Since      time.Time `json:"since"` // the process's start
	RSSKiB     float64   `json:"rss_kib"`
	Goroutines float64   `json:"goroutines"`
	FDs        float64   `json:"fds"`
	// Pipes are the descriptors that are pipes: the LB's splice pipes,
	// in use or kept for reuse (up to 64 a loop, by design), and
	// Sessions the LB's open sessions (two sockets each). Neither is a
	// leak when it grows: they follow the load and the VIP.
	Pipes    float64 `json:"pipes"`
	Sessions float64 `json:"lb_sessions"`
}

// otherFDs is what the descriptor slope judges: the process's descriptors
// but the LB's pipes and its sessions' sockets, which follow the load (a
// node that takes the API VIP takes its connections) and not the time.
func (s procSample) otherFDs() float64 { return s.FDs - s.Pipes - 2*s.Sessions }

// sampleProcs reads every live appliance's resident memory (/proc) and
// its goroutines and open descriptors (its /metrics: the process
// collector) every d, and checks appliance_vrrp_vip_held against the
// kernel.
func sampleProcs(ctx context.Context, c *cluster, rec *recorder, d time.Duration, wg *sync.WaitGroup) {
	every(ctx, wg, d, func() {
		for _, nd := range c.live() {
			for _, key := range c.svc.keys(nd) {
				sampleProc(c, nd, key, rec)
			}
		}
	})
}

// sampleProc reads one of nd's service processes. The appliance's own
// /metrics gives its goroutines and descriptors and its vip_held is
// checked; another program's descriptors are counted in /proc, with its
// children of the same name (keepalived's VRRP process).
func sampleProc(c *cluster, nd *node, key string, rec *recorder) {
	p := nd.proc(key)
	if p == nil {
		return
	}
	select {
	case <-p.Done():
		return
	default:
	}
	s := procSample{At: time.Now(), Node: sampleKeyName(c.svc, nd, key), Pid: p.Pid()}
	nd.mu.Lock()
	s.Since = nd.restarted
	nd.mu.Unlock()
	if !c.svc.metrics() {
		for _, pid := range procTree(p.Pid()) {
			rss, err := rssKiB(pid)
			if err != nil {
				continue
			}
			s.RSSKiB += rss
			s.FDs += float64(countFDs(pid))
		}
		if cs, ok := c.svc.(*classicServices); ok && key == "haproxy" {
			n, err := cs.haproxySessions(nd)
			if err != nil {
				return // no reading of its sessions: no judging of its descriptors
			}
			s.Sessions = n
		}
		if s.RSSKiB > 0 {
			rec.addSample(s)
		}
		return
	}
	rss, err := rssKiB(p.Pid())
	if err != nil {
		return
	}
	s.RSSKiB = rss
	code, body, err := adminGet(nd.n, "/metrics", 3*time.Second)
	if err != nil || code != 200 {
		return
	}
	m := parseMetrics(body)
	s.Goroutines, s.FDs = m["go_goroutines"], m["process_open_fds"]
	s.Pipes = float64(pipeFDs(p.Pid()))
	for key, v := range m {
		if strings.HasPrefix(key, "appliance_lb_backend_active_connections{") {
			s.Sessions += v
		}
	}
	rec.addSample(s)
	checkHeld(c, nd, m, rec)
}

// procTree is pid and its descendants running the same program.
func procTree(pid int) []int {
	comm := func(p int) string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		return strings.TrimSpace(string(b))
	}
	name := comm(pid)
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", out[i], out[i]))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil && comm(c) == name {
				out = append(out, c)
			}
		}
	}
	return out
}

// countFDs is how many descriptors a process has open.
func countFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return len(ents)
}

// checkHeld compares what nd's appliance says it holds with its kernel; a
// disagreement still there half a second later is recorded (a VIP moving
// at the instant of the scrape disagrees for a moment).
func checkHeld(c *cluster, nd *node, m map[string]float64, rec *recorder) {
	for key, v := range m {
		if !strings.HasPrefix(key, "appliance_vrrp_vip_held{") {
			continue
		}
		addr := labelOf(key, "address")
		a := apiVIP
		if addr == ingressVIP.String() {
			a = ingressVIP
		} else if addr != apiVIP.String() {
			continue
		}
		if (v == 1) == nd.holds(a) {
			continue
		}
		time.Sleep(500 * time.Millisecond)
		code, body, err := adminGet(nd.n, "/metrics", 3*time.Second)
		if err != nil || code != 200 {
			return
		}
		v2 := parseMetrics(body)[key]
		if held := nd.holds(a); (v2 == 1) != held {
			rec.mu.Lock()
			rec.heldMismatch = append(rec.heldMismatch, fmt.Sprintf("%s %s: appliance_vrrp_vip_held %v, kernel holds %v",
				time.Now().Format(time.RFC3339Nano), nd.name, v2, held))
			rec.mu.Unlock()
		}
	}
}

// parseMetrics reads Prometheus' text format into series → value.
func parseMetrics(body string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// labelOf reads a label's value from a series name.
func labelOf(series, label string) string {
	i := strings.Index(series, label+`="`)
	if i < 0 {
		return ""
	}
	rest := series[i+len(label)+2:]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return rest[:j]
}

// rssKiB is a process's resident set, from /proc.
func rssKiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// pipeFDs counts a process's descriptors that are pipes.
func pipeFDs(pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}
