//go:build bench

package dhcp

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// TestBenchDHCP compares the appliance with dnsmasq on one lab: time to
// lease for dhclient and udhcpc (median of 9), and perfdhcp at rising
// rates (DORA exchanges per second, 200 clients, pool on): the first rate
// with drops.
func TestBenchDHCP(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "dhcpb"})
	n0, n1, n2 := lab.Nodes[0], lab.Nodes[1], lab.Nodes[2]
	flushAddrs(t, n1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	pool := cluster.Range{Start: netip.MustParseAddr("192.168.126.20"), End: netip.MustParseAddr("192.168.126.250")}
	rates := []int{50, 100, 200, 400, 800, 1600}

	type result struct {
		dhclient, udhcpc time.Duration
		wire             time.Duration  // DISCOVER → ACK on the wire, median over all client runs
		perf             map[int]string // rate → "sent/recv"
		firstDrop        int
	}
	measure := func(clients bool) result {
		r := result{perf: map[int]string{}}
		if clients {
			tcpdump, err := n1.Start(ctx, "tcpdump", "-i", "eth0", "-n", "-tt", "-l", "-v", "udp port 67 or udp port 68")
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(5 * time.Second); !strings.Contains(tcpdump.Output(), "listening on"); {
				if time.Now().After(deadline) {
					t.Fatalf("tcpdump did not start:\n%s", tcpdump.Output())
				}
				time.Sleep(20 * time.Millisecond)
			}
			r.dhclient = median(t, 9, func(i int) time.Duration {
				d := filepath.Join(dir, fmt.Sprintf("dhc%d-%d", time.Now().UnixNano(), i))
				os.MkdirAll(d, 0o755)
				script := clientScript(t, d)
				start := time.Now()
				p, err := n1.Start(ctx, "dhclient", "-d", "-1", "-sf", script,
					"-lf", filepath.Join(d, "lease"), "-pf", filepath.Join(d, "pid"), "eth0")
				if err != nil {
					t.Fatal(err)
				}
				waitEnv(t, d, "BOUND", 20*time.Second)
				el := time.Since(start)
				p.Kill()
				p.Wait()
				return el
			})
			r.udhcpc = median(t, 9, func(i int) time.Duration {
				d := filepath.Join(dir, fmt.Sprintf("udh%d-%d", time.Now().UnixNano(), i))
				os.MkdirAll(d, 0o755)
				script := clientScript(t, d)
				start := time.Now()
				if out, err := n1.Run(ctx, "udhcpc", "-f", "-q", "-n", "-i", "eth0", "-s", script, "-t", "5", "-T", "1"); err != nil {
					t.Fatalf("udhcpc: %v\n%s", err, out)
				}
				return time.Since(start)
			})
			// Stop before perfdhcp floods the capture.
			time.Sleep(200 * time.Millisecond)
			tcpdump.Stop(time.Second)
			r.wire = wireMedian(tcpdump.Output())
		}
		for _, rate := range rates {
			out, _ := n2.Run(ctx, "perfdhcp", "-4", "-r", strconv.Itoa(rate), "-R", "200", "-p", "4", "-W", "1000000", "-l", "eth0")
			sent, recv := perfCounts(out)
			if sent == 0 {
				t.Logf("perfdhcp output:\n%s", out)
			}
			r.perf[rate] = fmt.Sprintf("%d/%d", recv, sent)
			if r.firstDrop == 0 && (sent == 0 || recv < sent) {
				r.firstDrop = rate
			}
		}
		return r
	}

	// The appliance.
	o := labOptions(filepath.Join(dir, "leases.json"))
	o.Pool = pool
	o.ProbeTimeout = DefaultProbeTimeout // ARP-probe new pool addresses, as dnsmasq pings them
	_, stop := startServer(t, n0, o)
	app := measure(true)
	stop()

	// dnsmasq, same reservation, pool and lease time; then again without
	// its ICMP check of new addresses.
	dnsmasq := func(leases string, extra ...string) *netlab.Process {
		args := append([]string{"--no-daemon", "--port=0", "--conf-file=/dev/null",
			"--interface=eth0", "--bind-interfaces", "--dhcp-authoritative",
			"--dhcp-range=192.168.126.20,192.168.126.250,10m",
			"--dhcp-host=52:54:00:7e:00:11,192.168.126.51,worker-0",
			"--dhcp-option=option:router,192.168.126.1", "--dhcp-option=option:dns-server,192.168.126.10,192.168.126.11",
			"--domain=ocp4.example.com", "--dhcp-leasefile=" + filepath.Join(dir, leases),
			"--pid-file=" + filepath.Join(dir, leases+".pid"), "--log-facility=-"}, extra...)
		p, err := n0.Start(ctx, "dnsmasq", args...)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		return p
	}
	p := dnsmasq("dnsmasq.leases")
	dm := measure(true)
	p.Stop(2 * time.Second)
	p = dnsmasq("dnsmasq-noping.leases", "--no-ping")
	dmNoPing := measure(false)
	p.Stop(2 * time.Second)

	var b strings.Builder
	b.WriteString("\n| measure | appliance | dnsmasq | appliance/dnsmasq | dnsmasq --no-ping |\n|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| dhclient time to lease (median of 9) | %v | %v | %.2f | |\n", app.dhclient.Round(time.Millisecond), dm.dhclient.Round(time.Millisecond), float64(app.dhclient)/float64(dm.dhclient))
	fmt.Fprintf(&b, "| server response on the wire: DISCOVER→OFFER + REQUEST→ACK (median, both clients) | %v | %v | %.2f | |\n", app.wire.Round(time.Microsecond), dm.wire.Round(time.Microsecond), float64(app.wire)/float64(dm.wire))
	fmt.Fprintf(&b, "| udhcpc time to lease (median of 9) | %v | %v | %.2f | |\n", app.udhcpc.Round(time.Millisecond), dm.udhcpc.Round(time.Millisecond), float64(app.udhcpc)/float64(dm.udhcpc))
	for _, rate := range rates {
		fmt.Fprintf(&b, "| perfdhcp %d DORA/s, 4 s: ACKs/DISCOVERs | %s | %s | | %s |\n", rate, app.perf[rate], dm.perf[rate], dmNoPing.perf[rate])
	}
	fmt.Fprintf(&b, "| first rate with drops | %s | %s | | %s |\n", rateStr(app.firstDrop), rateStr(dm.firstDrop), rateStr(dmNoPing.firstDrop))
	t.Log(b.String())
}

var tsRe = regexp.MustCompile(`^(\d+)\.(\d{6}) IP`)

// wireMedian parses `tcpdump -tt -v` output and returns the median server
// response time of an exchange: DISCOVER→OFFER plus REQUEST→ACK, leaving
// out the client's own delays.
func wireMedian(out string) time.Duration {
	var ts time.Time
	var disc, offer, req time.Time
	var ds []time.Duration
	for _, line := range strings.Split(out, "\n") {
		if m := tsRe.FindStringSubmatch(line); m != nil {
			sec, _ := strconv.ParseInt(m[1], 10, 64)
			usec, _ := strconv.ParseInt(m[2], 10, 64)
			ts = time.Unix(sec, usec*1000)
			continue
		}
		_, typ, ok := strings.Cut(line, "DHCP-Message (53), length 1: ")
		if !ok {
			continue
		}
		switch strings.TrimSpace(typ) {
		case "Discover":
			disc = ts
		case "Offer":
			offer = ts
		case "Request":
			req = ts
		case "ACK":
			if !disc.IsZero() && !offer.IsZero() && !req.IsZero() {
				ds = append(ds, offer.Sub(disc)+ts.Sub(req))
			}
			disc, offer, req = time.Time{}, time.Time{}, time.Time{}
		}
	}
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func rateStr(r int) string {
	if r == 0 {
		return "none up to 1600/s"
	}
	return strconv.Itoa(r) + "/s"
}

func median(t *testing.T, n int, f func(int) time.Duration) time.Duration {
	var ds []time.Duration
	for i := range n {
		ds = append(ds, f(i))
	}
	slices.Sort(ds)
	return ds[n/2]
}

var perfRe = regexp.MustCompile(`(?s)Statistics for: DISCOVER-OFFER.*?sent packets: (\d+).*?received packets: (\d+).*?Statistics for: REQUEST-ACK.*?sent packets: (\d+).*?received packets: (\d+)`)

// perfCounts extracts from perfdhcp's report the DISCOVERs sent and the
// ACKs received: a full exchange is one of each.
func perfCounts(out string) (sent, acked int) {
	m := perfRe.FindStringSubmatch(out)
	if m == nil {
		return 0, 0
	}
	sent, _ = strconv.Atoi(m[1])
	acked, _ = strconv.Atoi(m[4])
	return sent, acked
}
