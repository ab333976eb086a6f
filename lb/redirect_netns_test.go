package lb

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// redirectLab is a node n0 holding the API VIPs and running the LB with its
// redirect, a master behind it, and a client node.
type redirectLab struct {
	lb      *LB
	metrics *Metrics
	n0      *netlab.Node
	client  *netlab.Node
	master  *fakeServer
	ca      *testCA
	vips    []netip.Addr
}

// newRedirectLab starts the LB in n0 (stopped when the test ends) and waits
// for its redirect. watch tunes the redirect's watcher. With local, n0 also
// runs a server of its own on :6443, which VIP clients reach while there is
// no redirect; without, they are refused then.
func newRedirectLab(t testing.TB, name string, watch WatchOptions, local bool) *redirectLab {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: name, IPv6: netip.MustParsePrefix("fd00:127::/64")})
	rl := &redirectLab{n0: lab.Nodes[0], client: lab.Nodes[2],
		vips: []netip.Addr{netip.MustParseAddr("192.168.126.250"), netip.MustParseAddr("fd00:127::250")}}
	h, err := rl.n0.Handle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	link, err := h.LinkByName(rl.n0.Iface)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rl.vips {
		bits := v.BitLen()
		if err := h.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: v.AsSlice(), Mask: net.CIDRMask(bits, bits)}, Flags: unix.IFA_F_NODAD}); err != nil {
			t.Fatal(err)
		}
	}
	m := lab.Nodes[1]
	rl.ca = newTestCA(t, m.IPv4.Addr(), rl.vips[0], rl.vips[1])
	listen1, _ := inNode(m)
	rl.master, err = startFake(t, rl.ca, "master-"+m.Name, netip.AddrPortFrom(m.IPv4.Addr(), 6443).String(), listen1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &cluster.Config{
		Network: cluster.Network{APIVIPs: rl.vips},
		Nodes:   []cluster.Node{{Name: rl.master.name, Role: cluster.RoleMaster, IPs: []netip.Addr{m.IPv4.Addr()}}},
	}
	listen0, dial0 := inNode(rl.n0)
	if local {
		if _, err := startFake(t, rl.ca, "local", ":6443", listen0); err != nil {
			t.Fatal(err)
		}
	}
	o := DefaultOptions()
	o.MCS.Disabled = true
	o.NetNS = "/run/netns/" + rl.n0.NS
	o.Listen, o.Dial = listen0, dial0
	o.Health = HealthOptions{Interval: 100 * time.Millisecond, FastInterval: 30 * time.Millisecond, Timeout: 500 * time.Millisecond, Fall: 2, Rise: 1}
	o.DrainTimeout = 200 * time.Millisecond
	rl.metrics = NewMetrics(prometheus.NewRegistry())
	rl.lb, err = New(cfg, cluster.NewState(cfg), o, rl.metrics, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	rl.lb.watch = watch
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rl.lb.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(10 * time.Second):
			t.Error("LB did not stop")
		}
		if tab := rl.table(); tab != "" {
			t.Errorf("table left after exit:\n%s", tab)
		}
		// Neither the redirect nor its repairs ever touched the root
		// namespace's nftables.
		if out, err := exec.Command("nft", "list", "table", "inet", DefaultTable).CombinedOutput(); err == nil {
			t.Errorf("a table appeared in the root namespace:\n%s", out)
		}
	})
	waitFor(t, 10*time.Second, func() bool { return strings.Count(rl.table(), "redirect to :9445") == 4 })
	return rl
}

// table is `nft list table inet appliance_lb` in n0, "" when there is none.
func (rl *redirectLab) table() string {
	out, err := rl.n0.Run(context.Background(), "nft", "list", "table", "inet", DefaultTable)
	if err != nil {
		return ""
	}
	return out
}

var counterValues = regexp.MustCompile(`counter packets \d+ bytes \d+`)

// normTable is a listing without the counters' values, which traffic
// changes.
func normTable(s string) string { return counterValues.ReplaceAllString(s, "counter") }

// get fetches /whoami from VIP:6443 as a client in node n.
func (rl *redirectLab) get(n *netlab.Node, vip netip.Addr) string {
	_, dial := inNode(n)
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: rl.ca.pool, ServerName: "api.test"},
		DialContext:       dial,
	}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(fmt.Sprintf("https://%s/whoami", netip.AddrPortFrom(vip, 6443)))
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// throughLB asserts that clients on the client node and on n0 itself reach
// the master through every VIP, so through both chains of the redirect.
func (rl *redirectLab) throughLB(t *testing.T) {
	t.Helper()
	for _, n := range []*netlab.Node{rl.client, rl.n0} {
		for _, v := range rl.vips {
			if who := rl.get(n, v); who != rl.master.name {
				t.Errorf("client on %s reached %q through %s:6443, want %s via the LB", n.Name, who, v, rl.master.name)
			}
		}
	}
}

func (rl *redirectLab) repairs(kind string) float64 {
	return testutil.ToFloat64(rl.metrics.repairs.WithLabelValues(kind))
}

// TestNetnsRedirectRepair: what an operator or nftables.service does to the
// LB's table in n0 is undone, the table comes back exactly as installed,
// and the VIPs answer through the LB again; a table the LB removed on
// purpose stays removed.
func TestNetnsRedirectRepair(t *testing.T) {
	// The periodic check is slowed down so that the monitor is what repairs.
	rl := newRedirectLab(t, "lbfix", WatchOptions{Interval: time.Minute}, true)
	installed := normTable(rl.table())
	t.Logf("installed:\n%s", installed)
	rl.throughLB(t)
	rules := func() (desired, installed float64) {
		return testutil.ToFloat64(rl.metrics.desired), testutil.ToFloat64(rl.metrics.redirect)
	}
	if d, i := rules(); d == 0 || d != i {
		t.Errorf("redirect rules desired %v, installed %v: want equal and more than 0", d, i)
	}

	total := 0
	for _, tt := range []struct {
		name, kind, found string
		cmd               []string
	}{
		{"flush ruleset", RepairTable, "deleted by someone else", []string{"flush", "ruleset"}},
		{"delete table", RepairTable, "deleted by someone else", []string{"delete", "table", "inet", DefaultTable}},
		{"delete chain", RepairChain, "chain prerouting deleted", []string{"delete", "chain", "inet", DefaultTable, "prerouting"}},
		{"flush chain", RepairRule, "2 of 4 rules missing", []string{"flush", "chain", "inet", DefaultTable, "output"}},
		{"delete rule", RepairRule, "1 of 4 rules missing", nil},
		{"foreign rule", RepairRule, "1 foreign rule", []string{"add", "rule", "inet", DefaultTable, "prerouting", "tcp", "dport", "6443", "redirect", "to", ":1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cmd == nil { // delete the first rule of output, by its handle
				out, err := rl.n0.Run(context.Background(), "nft", "-a", "list", "chain", "inet", DefaultTable, "output")
				if err != nil {
					t.Fatal(err)
				}
				m := regexp.MustCompile(`redirect to :9445 # handle (\d+)`).FindStringSubmatch(out)
				if m == nil {
					t.Fatalf("no rule handle in:\n%s", out)
				}
				tt.cmd = []string{"delete", "rule", "inet", DefaultTable, "output", "handle", m[1]}
			}
			before := rl.repairs(tt.kind)
			start := time.Now()
			if _, err := rl.n0.Run(context.Background(), "nft", tt.cmd...); err != nil {
				t.Fatal(err)
			}
			total++
			waitFor(t, 2*time.Second, func() bool { return normTable(rl.table()) == installed })
			t.Logf("table as installed again %v after nft returned", time.Since(start).Round(time.Millisecond))
			rl.throughLB(t)
			if got := rl.repairs(tt.kind); got != before+1 {
				t.Errorf("repairs{kind=%q} = %v, want %v", tt.kind, got, before+1)
			}
			last := rl.lb.Status().LastRepair
			if last == nil || last.Kind != tt.kind || !strings.Contains(last.Found, tt.found) {
				t.Errorf("status last repair = %+v, want kind %s found ...%q...", last, tt.kind, tt.found)
			}
		})
	}
	// One repair per fault: the repairs' own batches set nothing off.
	time.Sleep(300 * time.Millisecond)
	sum := rl.repairs(RepairTable) + rl.repairs(RepairChain) + rl.repairs(RepairRule)
	if int(sum) != total {
		t.Errorf("%v repairs for %d faults", sum, total)
	}

	t.Run("removed on purpose stays removed", func(t *testing.T) {
		rl.master.ready.Store(false)
		waitFor(t, 10*time.Second, func() bool { return rl.table() == "" })
		if d, i := rules(); d != 0 || i != 0 {
			t.Errorf("without a healthy backend: redirect rules desired %v, installed %v; want 0 and 0", d, i)
		}
		// Someone flushes the (empty) ruleset; a watcher that re-created
		// what the LB removed would do it now or at a periodic check.
		if _, err := rl.n0.Run(context.Background(), "nft", "flush", "ruleset"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		if tab := rl.table(); tab != "" {
			t.Errorf("the removed table came back:\n%s", tab)
		}
		if who := rl.get(rl.client, rl.vips[0]); who != "local" {
			t.Errorf("without the redirect the client reached %q, want the local server", who)
		}
		rl.master.ready.Store(true)
		waitFor(t, 10*time.Second, func() bool { return normTable(rl.table()) == installed })
		rl.throughLB(t)
	})
}

// TestNetnsRedirectPeriodicCheck: with no monitor event to go by (the
// monitor cannot tell a change it lost), the periodic check repairs.
func TestNetnsRedirectPeriodicCheck(t *testing.T) {
	rl := newRedirectLab(t, "lbchk", WatchOptions{Interval: 200 * time.Millisecond}, false)
	installed := normTable(rl.table())
	// Deleting the table from the Redirector's own thread looks like our
	// own batch to the monitor, so only the periodic check can see it.
	rl.lb.redir.mu.Lock()
	err := rl.lb.redir.remove()
	rl.lb.redir.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, func() bool { return normTable(rl.table()) == installed })
	if last := rl.lb.Status().LastRepair; last == nil || last.Trigger != triggerPeriod {
		t.Errorf("last repair %+v, want one by the %s", last, triggerPeriod)
	}
	rl.throughLB(t)
}
