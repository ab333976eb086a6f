package dhcp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vishvananda/netlink"
	"go.uber.org/goleak"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// childEnv makes the test binary a standalone DHCP server (for kill -9).
const childEnv = "APPLIANCE_DHCP_TEST_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	// No goroutine may outlive the tests (the server awaits what it starts);
	// netlab's spawner lives as long as the process by design.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("appliance/internal/netlab.StartCommand.func1.1"))
}

// runChild serves the lab network on eth0 with the pool on; spec is the
// lease file path.
func runChild(leaseFile string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	o := labOptions(leaseFile)
	o.Pool = cluster.Range{Start: netip.MustParseAddr("192.168.126.100"), End: netip.MustParseAddr("192.168.126.250")}
	s, err := New(o, nil, log)
	if err != nil {
		log.Error("new", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fmt.Println("READY")
	if err := s.Run(ctx); err != nil {
		log.Error("run", "err", err)
		return 1
	}
	return 0
}

// Lab layout: n0 runs the server (192.168.126.10), n1 is a bare client
// (its static address removed) for dhclient/udhcpc, n2 keeps 192.168.126.12
// and runs nclient4 and the garbage sender.
var (
	labNet     = netip.MustParsePrefix("192.168.126.0/24")
	n1Reserved = netip.MustParseAddr("192.168.126.51")
	n2Reserved = netip.MustParseAddr("192.168.126.12")
)

func labOptions(leaseFile string) Options {
	return Options{
		Interface:     "eth0",
		Network:       labNet,
		Router:        netip.MustParseAddr("192.168.126.1"),
		DNS:           []netip.Addr{netip.MustParseAddr("192.168.126.10"), netip.MustParseAddr("192.168.126.11")},
		Domain:        "ocp4.example.com",
		SearchDomains: []string{"ocp4.example.com"},
		LeaseTime:     10 * time.Minute,
		LeaseFile:     leaseFile,
		ProbeTimeout:  -1,
		Reservations: []Reservation{
			{MAC: net.HardwareAddr{0x52, 0x54, 0x00, 0x7e, 0x00, 0x11}, IP: n1Reserved, Hostname: "worker-0"},
			{MAC: net.HardwareAddr{0x52, 0x54, 0x00, 0x7e, 0x00, 0x12}, IP: n2Reserved, Hostname: "worker-1"},
		},
		Excluded: []netip.Addr{netip.MustParseAddr("192.168.126.5"), netip.MustParseAddr("192.168.126.6")},
	}
}

// startServer runs a server inside node until the returned stop is called.
func startServer(t *testing.T, node *netlab.Node, o Options) (*Server, func()) {
	t.Helper()
	var s *Server
	err := node.Do(func() error {
		var err error
		s, err = New(o, NewMetrics(nil), slog.New(slog.NewTextHandler(io.Discard, nil)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server run: %v", err)
		}
	}
	t.Cleanup(stop)
	return s, stop
}

func flushAddrs(t *testing.T, node *netlab.Node) {
	t.Helper()
	h, err := node.Handle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(node.Iface)
	if err != nil {
		t.Fatal(err)
	}
	as, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if err := h.AddrDel(l, &a); err != nil {
			t.Fatal(err)
		}
	}
}

// clientScript writes the environment of each invocation to DIR/env.N.
func clientScript(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "script.sh")
	s := "#!/bin/sh\nenv > \"" + dir + "/env.$$.${reason:-$1}\"\nexit 0\n"
	if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitEnv waits for a script run whose file name ends in suffix and returns
// its variables.
func waitEnv(t *testing.T, dir, suffix string, timeout time.Duration) map[string]string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ms, _ := filepath.Glob(filepath.Join(dir, "env.*."+suffix))
		if len(ms) > 0 {
			time.Sleep(50 * time.Millisecond) // let the script finish writing
			b, err := os.ReadFile(ms[0])
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{}
			for _, line := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					env[k] = v
				}
			}
			return env
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s script run within %v", suffix, timeout)
	return nil
}

func TestNetnsClients(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "dhcp"})
	n0, n1, n2 := lab.Nodes[0], lab.Nodes[1], lab.Nodes[2]
	flushAddrs(t, n1)
	dir := t.TempDir()
	srv, _ := startServer(t, n0, labOptions(filepath.Join(dir, "leases.json")))
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	t.Run("dhclient", func(t *testing.T) {
		d := t.TempDir()
		script := clientScript(t, d)
		p, err := n1.Start(ctx, "dhclient", "-d", "-1", "-v", "-sf", script,
			"-lf", filepath.Join(d, "lease"), "-pf", filepath.Join(d, "pid"), "eth0")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Kill()
		env := waitEnv(t, d, "BOUND", 15*time.Second)
		want := map[string]string{
			"new_ip_address":          n1Reserved.String(),
			"new_subnet_mask":         "255.255.255.0",
			"new_routers":             "192.168.126.1",
			"new_domain_name_servers": "192.168.126.10 192.168.126.11",
			"new_host_name":           "worker-0",
			"new_domain_name":         "ocp4.example.com",
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("%s = %q, want %q\n%s", k, env[k], v, p.Output())
			}
		}
	})

	t.Run("udhcpc", func(t *testing.T) {
		d := t.TempDir()
		script := clientScript(t, d)
		out, err := n1.Run(ctx, "udhcpc", "-f", "-q", "-n", "-i", "eth0", "-s", script, "-t", "5", "-T", "1", "-O", "search")
		if err != nil {
			t.Fatalf("udhcpc: %v\n%s", err, out)
		}
		env := waitEnv(t, d, "bound", time.Second)
		want := map[string]string{
			"ip": n1Reserved.String(), "subnet": "255.255.255.0", "router": "192.168.126.1",
			"dns": "192.168.126.10 192.168.126.11", "hostname": "worker-0", "domain": "ocp4.example.com",
		}
		for k, v := range want {
			if strings.TrimSpace(env[k]) != v {
				t.Errorf("%s = %q, want %q", k, env[k], v)
			}
		}
	})

	t.Run("unknown MAC gets nothing without pool", func(t *testing.T) {
		err := n2.Do(func() error {
			c, err := nclient4.New("eth0", nclient4.WithHWAddr(net.HardwareAddr{2, 0, 0, 0, 0, 1}),
				nclient4.WithTimeout(300*time.Millisecond), nclient4.WithRetry(2))
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := c.Request(ctx); err == nil {
				return fmt.Errorf("unknown MAC got a lease")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if srv.Metrics().Drops(DropUnknownClient) == 0 {
			t.Error("unknown-client drop not counted")
		}
	})

	t.Run("malformed packets dropped and counted", func(t *testing.T) {
		before := srv.Metrics().Drops(DropMalformed)
		err := n2.Do(func() error {
			c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(192, 168, 126, 10), Port: ServerPort})
			if err != nil {
				return err
			}
			defer c.Close()
			good := msg(dhcpv4.MessageTypeDiscover, net.HardwareAddr{0x52, 0x54, 0x00, 0x7e, 0x00, 0x12}).ToBytes()
			for _, b := range [][]byte{{1}, good[:100], append(good[:236:236], 1, 2, 3, 4), make([]byte, 400)} {
				if _, err := c.Write(b); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for srv.Metrics().Drops(DropMalformed)-before < 4 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := srv.Metrics().Drops(DropMalformed) - before; got != 4 {
			t.Errorf("malformed drops %v, want 4", got)
		}
	})

	st := srv.Status()
	if len(st.Reserved) != 2 || st.Reserved[0].Hostname != "worker-0" || st.Reserved[0].LastAck == nil {
		t.Errorf("status does not show worker-0's ACK: %+v", st.Reserved)
	}
}

// TestNetnsRenewAcrossRestart: a reserved client renews after the server
// restarted with its lease file gone; a pool client renews after a restart
// with its lease file kept, and its lease is still on record.
func TestNetnsRenewAcrossRestart(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "dhcpre"})
	n0, n2 := lab.Nodes[0], lab.Nodes[2]
	dir := t.TempDir()
	o := labOptions(filepath.Join(dir, "leases.json"))
	o.Reservations = o.Reservations[:1] // n2's MAC is a pool client here
	o.Pool = cluster.Range{Start: netip.MustParseAddr("192.168.126.12"), End: netip.MustParseAddr("192.168.126.12")}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, stop := startServer(t, n0, o)
	var c *nclient4.Client
	if err := n2.Do(func() error {
		var err error
		c, err = nclient4.New("eth0", nclient4.WithTimeout(time.Second), nclient4.WithRetry(3))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lease, err := c.Request(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := addr(lease.ACK.YourIPAddr); got != n2Reserved {
		t.Fatalf("pool lease %v, want %v", got, n2Reserved)
	}
	stop()
	srv, stop2 := startServer(t, n0, o)
	if ls := srv.Store().Leases(); len(ls) != 1 || ls[0].IP != n2Reserved {
		t.Fatalf("leases after restart: %+v", ls)
	}
	renewed, err := c.Renew(ctx, lease)
	if err != nil {
		t.Fatalf("renew after restart: %v", err)
	}
	if addr(renewed.ACK.YourIPAddr) != n2Reserved {
		t.Fatalf("renewed %v", renewed.ACK.YourIPAddr)
	}
	// The address is now a reservation and the lease file is gone: the
	// reservation alone is the authority.
	stop2()
	if err := os.Remove(o.LeaseFile); err != nil {
		t.Fatal(err)
	}
	o2 := labOptions(o.LeaseFile)
	startServer(t, n0, o2)
	renewed, err = c.Renew(ctx, renewed)
	if err != nil {
		t.Fatalf("renew of the reserved address with no lease record: %v", err)
	}
	if addr(renewed.ACK.YourIPAddr) != n2Reserved || renewed.ACK.HostName() != "worker-1" {
		t.Fatalf("renewed %v host %q", renewed.ACK.YourIPAddr, renewed.ACK.HostName())
	}
}

// TestNetnsKill9: a stream of clients while the server is killed with
// SIGKILL and restarted: every ACKed lease is in the file after the kill, and
// no address is ever ACKed to two clients.
func TestNetnsKill9(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "dhcpk9"})
	n0, n2 := lab.Nodes[0], lab.Nodes[2]
	dir := t.TempDir()
	lf := filepath.Join(dir, "leases.json")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	start := func() *netlab.Process {
		p, err := n0.Start(ctx, "env", childEnv+"="+lf, os.Args[0], "-test.run=^$")
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(p.Output(), "READY") {
			if time.Now().After(deadline) {
				t.Fatalf("child not ready:\n%s", p.Output())
			}
			time.Sleep(20 * time.Millisecond)
		}
		return p
	}
	var mu sync.Mutex                // guards acked and owner
	acked := map[string]netip.Addr{} // MAC → address
	owner := map[netip.Addr]string{}
	request := func(i int) {
		mac := net.HardwareAddr{2, 0, 0, 0, byte(i >> 8), byte(i)}
		var lease *nclient4.Lease
		err := n2.Do(func() error {
			c, err := nclient4.New("eth0", nclient4.WithHWAddr(mac), nclient4.WithTimeout(200*time.Millisecond), nclient4.WithRetry(1))
			if err != nil {
				return err
			}
			defer c.Close()
			lease, _ = c.Request(ctx)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if lease == nil {
			return // in flight during the kill
		}
		ip := addr(lease.ACK.YourIPAddr)
		mu.Lock()
		defer mu.Unlock()
		if o, dup := owner[ip]; dup && o != mac.String() {
			t.Errorf("%v ACKed to %s and %s", ip, o, mac)
		}
		owner[ip], acked[mac.String()] = mac.String(), ip
	}
	checkFile := func() {
		b, err := os.ReadFile(lf)
		if err != nil {
			t.Fatal(err)
		}
		var f leaseFile
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatalf("lease file after kill: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		inFile := map[string]netip.Addr{}
		seen := map[netip.Addr]bool{}
		for _, l := range f.Leases {
			if seen[l.IP] {
				t.Errorf("%v twice in the lease file", l.IP)
			}
			seen[l.IP] = true
			inFile[l.MACText] = l.IP
		}
		for mac, ip := range acked {
			if inFile[mac] != ip {
				t.Errorf("ACKed lease %s→%v lost (file has %v)", mac, ip, inFile[mac])
			}
		}
	}
	// Three rounds: four concurrent client streams, the server killed with
	// SIGKILL at a different moment each time, the file checked, restarted.
	next := 0
	var nmu sync.Mutex
	for round, after := range []time.Duration{300 * time.Millisecond, 500 * time.Millisecond, 700 * time.Millisecond} {
		p := start()
		killAt := time.Now().Add(after)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for time.Now().Before(killAt.Add(200 * time.Millisecond)) {
					nmu.Lock()
					i := next
					next++
					nmu.Unlock()
					request(i)
				}
			})
		}
		time.Sleep(time.Until(killAt))
		p.Kill()
		p.Wait()
		wg.Wait()
		checkFile()
		t.Logf("round %d: %d leases acknowledged so far", round, len(acked))
	}
	if len(acked) < 10 {
		t.Fatalf("only %d leases acknowledged", len(acked))
	}
	// After a last restart, clients from before the kills get their
	// addresses back (their leases survived).
	p := start()
	for j := range 5 {
		mac := net.HardwareAddr{2, 0, 0, 0, byte(j >> 8), byte(j)}.String()
		before, had := acked[mac]
		request(j)
		if had && acked[mac] != before {
			t.Errorf("%s had %v, now %v", mac, before, acked[mac])
		}
	}
	p.Stop(2 * time.Second)
	checkFile()
}

// TestNetnsPool: with the pool on, an unknown MAC gets a pool address; an
// address that answers ARP (n2's static .12) is skipped after the probe and
// stays out of the pool.
func TestNetnsPool(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "dhcppool"})
	n0, n1 := lab.Nodes[0], lab.Nodes[1]
	flushAddrs(t, n1)
	o := labOptions("")
	// Generous: on a loaded 2-core machine the busy node may answer ARP late;
	// the behaviour is under test here, the timing in make bench.
	o.ProbeTimeout = time.Second
	busy, free := netip.MustParseAddr("192.168.126.12"), netip.MustParseAddr("192.168.126.13")
	o.Reservations = o.Reservations[:0]
	o.Pool = cluster.Range{Start: busy, End: free}
	srv, _ := startServer(t, n0, o)
	// Ask for the busy address: the server must probe it, find it in use,
	// and offer the free one on the retry.
	if got := leaseAsking(t, n1, busy); got != free {
		t.Fatalf("leased %v, want %v (the busy %v answered ARP)", got, free, busy)
	}
	if srv.Metrics().Drops(DropProbeConflict) != 1 {
		t.Errorf("probe conflicts %v, want 1", srv.Metrics().Drops(DropProbeConflict))
	}
	if l, ok := srv.Store().ByIP(busy); !ok || !l.Declined {
		t.Errorf("busy address not marked: %+v", l)
	}
}

// TestNetnsTwoServers: reservations are answered identically by both
// servers; the pool only by the one whose ServePool says so.
func TestNetnsTwoServers(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "dhcp2"})
	n0, n1, n2 := lab.Nodes[0], lab.Nodes[1], lab.Nodes[2]
	o := labOptions("")
	o.Pool = cluster.Range{Start: netip.MustParseAddr("192.168.126.100"), End: netip.MustParseAddr("192.168.126.150")}
	oa, ob := o, o
	oa.ServePool = func() bool { return true }
	ob.ServePool = func() bool { return false }
	a, _ := startServer(t, n0, oa)
	b, _ := startServer(t, n1, ob)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := n2.Do(func() error {
		c, err := nclient4.New("eth0", nclient4.WithTimeout(time.Second), nclient4.WithRetry(3))
		if err != nil {
			return err
		}
		defer c.Close()
		// n2's own MAC is reserved (192.168.126.12, worker-1).
		if _, err := c.Request(ctx); err != nil {
			return fmt.Errorf("reserved: %w", err)
		}
		u, err := nclient4.New("eth0", nclient4.WithHWAddr(net.HardwareAddr{2, 0, 0, 0, 9, 9}), nclient4.WithTimeout(time.Second), nclient4.WithRetry(3))
		if err != nil {
			return err
		}
		defer u.Close()
		l, err := u.Request(ctx)
		if err != nil {
			return fmt.Errorf("pool: %w", err)
		}
		if sid := addr(l.ACK.ServerIdentifier()); sid != n0.IPv4.Addr() {
			return fmt.Errorf("pool lease from %v, want %v", sid, n0.IPv4.Addr())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for b.Metrics().Replies("OFFER") < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if a.Metrics().Replies("OFFER") != 2 || b.Metrics().Replies("OFFER") != 1 {
		t.Errorf("offers: pool holder %v (want 2), standby %v (want 1: the reservation)",
			a.Metrics().Replies("OFFER"), b.Metrics().Replies("OFFER"))
	}
	if b.Metrics().Drops(DropUnknownClient) == 0 {
		t.Error("standby answered or ignored the pool client without counting it")
	}
	if len(b.Store().Leases()) != 0 {
		t.Errorf("standby holds leases: %+v", b.Store().Leases())
	}
}

// TestNetnsSocketReopens: a receive socket that fails is opened again, so
// the server never stays up deaf.
func TestNetnsSocketReopens(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "dhcpreo"})
	n0, n1 := lab.Nodes[0], lab.Nodes[1]
	flushAddrs(t, n1)
	s := runInNode(t, n0, labOptions(""))
	lease := func() netip.Addr {
		t.Helper()
		got, err := leaseFrom(n1, time.Second, 5)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := lease(); got != n1Reserved {
		t.Fatalf("leased %v, want %v", got, n1Reserved)
	}
	s.conn.Load().Close() // the socket fails under the reader
	if got := lease(); got != n1Reserved {
		t.Fatalf("after the socket failed: leased %v, want %v", got, n1Reserved)
	}
	if n := testutil.ToFloat64(s.metrics.reopens); n != 1 {
		t.Errorf("socket re-opens %v, want 1", n)
	}
}

// TestNetnsFollowsBridge: the node's address moves from eth0 onto a bridge
// with eth0 as its port, as NetworkManager does for OVN-Kubernetes's br-ex.
// The server bound to eth0 then hears nothing; SetInterface moves it and
// clients get their leases again.
func TestNetnsFollowsBridge(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "dhcpbr"})
	n0, n1 := lab.Nodes[0], lab.Nodes[1]
	flushAddrs(t, n1)
	s := runInNode(t, n0, labOptions(""))
	lease := func() (netip.Addr, error) { return leaseFrom(n1, 500*time.Millisecond, 3) }
	if got, err := lease(); err != nil || got != n1Reserved {
		t.Fatalf("before the move: leased %v (%v), want %v", got, err, n1Reserved)
	}
	moveToBridge(t, n0)
	if got, err := lease(); err == nil {
		t.Fatalf("a server bound to the bridge port still answered (%v): the test does not reproduce the move", got)
	}
	if err := s.SetInterface("br-ex"); err != nil {
		t.Fatal(err)
	}
	if got, err := lease(); err != nil || got != n1Reserved {
		t.Fatalf("after SetInterface(br-ex): leased %v (%v), want %v", got, err, n1Reserved)
	}
	if st := s.Status(); st.Interface != "br-ex" {
		t.Errorf("status interface %q, want br-ex", st.Interface)
	}
	if n := testutil.ToFloat64(s.metrics.reopens); n != 0 {
		t.Errorf("the move counted %v socket failures, want 0", n)
	}
}

// TestNetnsProberFollowsBridge: the ARP prober moves with the server, and
// still finds a squatter on the pool from the bridge.
func TestNetnsProberFollowsBridge(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "dhcpprb"})
	n0, n1 := lab.Nodes[0], lab.Nodes[1]
	flushAddrs(t, n1)
	o := labOptions("")
	o.ProbeTimeout = time.Second // generous, as in TestNetnsPool
	busy, free := netip.MustParseAddr("192.168.126.12"), netip.MustParseAddr("192.168.126.13")
	o.Reservations = nil
	o.Pool = cluster.Range{Start: busy, End: free}
	s := runInNode(t, n0, o)
	moveToBridge(t, n0)
	if err := s.SetInterface("br-ex"); err != nil {
		t.Fatal(err)
	}
	if got := s.prober.interfaceName(); got != "br-ex" {
		t.Fatalf("prober on %s after the move, want br-ex", got)
	}
	if got := leaseAsking(t, n1, busy); got != free {
		t.Fatalf("leased %v, want %v: the prober on br-ex did not hear the busy %v", got, free, busy)
	}
	if s.Metrics().Drops(DropProbeConflict) != 1 {
		t.Errorf("probe conflicts %v, want 1", s.Metrics().Drops(DropProbeConflict))
	}
}

// leaseAsking runs a DHCP exchange from n's eth0 that asks for want and
// returns the address acknowledged.
func leaseAsking(t *testing.T, n *netlab.Node, want netip.Addr) netip.Addr {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var lease *nclient4.Lease
	err := n.Do(func() error {
		c, err := nclient4.New("eth0", nclient4.WithTimeout(time.Second), nclient4.WithRetry(3))
		if err != nil {
			return err
		}
		defer c.Close()
		offer, err := c.DiscoverOffer(ctx, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip4(want))))
		if err != nil {
			return err
		}
		lease, err = c.RequestFromOffer(ctx, offer)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return addr(lease.ACK.YourIPAddr)
}

// moveToBridge moves n's address from eth0 onto a new bridge br-ex with
// eth0 as its port, as NetworkManager does for OVN-Kubernetes.
func moveToBridge(t *testing.T, n *netlab.Node) {
	t.Helper()
	for _, c := range [][]string{
		{"ip", "link", "add", "br-ex", "type", "bridge"},
		{"ip", "link", "set", "br-ex", "address", "52:54:00:7e:00:10"},
		{"ip", "link", "set", "eth0", "master", "br-ex"},
		{"ip", "addr", "flush", "dev", "eth0"},
		{"ip", "addr", "add", "192.168.126.10/24", "dev", "br-ex"},
		{"ip", "link", "set", "br-ex", "up"},
	} {
		netlabtest.Run(t, n, c[0], c[1:]...)
	}
}

// inNode wraps open so that its socket is opened inside n.
func inNode[T any](n *netlab.Node, open func(iface string) (T, error)) func(string) (T, error) {
	return func(iface string) (T, error) {
		var c T
		err := n.Do(func() error {
			var err error
			c, err = open(iface)
			return err
		})
		return c, err
	}
}

// runInNode runs a server with options o in node n until the test ends;
// its sockets, re-opened or moved from Run's goroutine, belong in n too.
func runInNode(t *testing.T, n *netlab.Node, o Options) *Server {
	t.Helper()
	var s *Server
	if err := n.Do(func() error {
		var err error
		s, err = New(o, NewMetrics(nil), slog.New(slog.NewTextHandler(io.Discard, nil)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s.listen = inNode(n, listen)
	s.dialARP = inNode(n, dialARP)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server run: %v", err)
		}
	})
	return s
}

// leaseFrom runs a DHCP exchange from n's eth0 and returns the address
// acknowledged.
func leaseFrom(n *netlab.Node, timeout time.Duration, retries int) (netip.Addr, error) {
	var got netip.Addr
	err := n.Do(func() error {
		c, err := nclient4.New("eth0", nclient4.WithTimeout(timeout), nclient4.WithRetry(retries))
		if err != nil {
			return err
		}
		defer c.Close()
		l, err := c.Request(context.Background())
		if err != nil {
			return err
		}
		got = addr(l.ACK.YourIPAddr)
		return nil
	})
	return got, err
}
