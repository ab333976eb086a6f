package lb

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"appliance/internal/cluster"
)

func TestRoundRobinSpreads(t *testing.T) {
	fc := newFakeCluster(t, 3)
	l := startLB(t, fc.cfg, fc.state, fastOptions(fc.port), 4)
	c := fc.client(l.Addr(PoolAPI).String())
	for range 30 {
		if _, err := whoami(c); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range fc.masters {
		if n := m.hits.Load(); n != 10 {
			t.Errorf("%s got %d of 30 requests, want 10", m.name, n)
		}
	}
	if n := fc.boot.hits.Load(); n != 0 {
		t.Errorf("bootstrap backup got %d requests while masters are up", n)
	}
}

func TestLeastConnSpreads(t *testing.T) {
	fc := newFakeCluster(t, 3)
	o := fastOptions(fc.port)
	o.Balance = LeastConnections
	l := startLB(t, fc.cfg, fc.state, o, 4)
	c := fc.client(l.Addr(PoolAPI).String())
	for range 30 {
		if _, err := whoami(c); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range fc.masters {
		if n := m.hits.Load(); n < 5 {
			t.Errorf("%s got %d of 30 sequential requests; ties must rotate", m.name, n)
		}
	}
}

func TestUnreadyBackendLeavesPool(t *testing.T) {
	fc := newFakeCluster(t, 3)
	o := fastOptions(fc.port)
	l := startLB(t, fc.cfg, fc.state, o, 4)
	c := fc.client(l.Addr(PoolAPI).String())
	victim := fc.masters[1]
	// A long-lived session on the victim, to see it closed on down.
	var held *tls.Conn
	for range 3 {
		conn, err := tls.Dial("tcp", l.Addr(PoolAPI).String(), &tls.Config{RootCAs: fc.ca.pool, ServerName: "api.test"})
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", "https://api.test/whoami", nil)
		_ = req.Write(conn)
		buf := make([]byte, 4096)
		n, _ := conn.Read(buf)
		if strings.Contains(string(buf[:n]), victim.name) {
			held = conn
			break
		}
		defer conn.Close()
	}
	if held == nil {
		t.Fatal("no session landed on the victim")
	}
	defer held.Close()

	// kube-apiserver fails /readyz but keeps accepting for a while (70 s in
	// real life); the LB must stop sending it connections anyway.
	start := time.Now()
	victim.ready.Store(false)
	bound := o.Health.RemovalBound()
	waitFor(t, 10*bound, func() bool { return l.Pool(PoolAPI).Healthy() == 3 })
	took := time.Since(start)
	t.Logf("removed after %v (bound %v)", took, bound)
	if took > 3*bound {
		t.Errorf("removal took %v, bound %v", took, bound)
	}
	_ = held.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := held.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("session on the down backend not closed: %v", err)
	}
	before := victim.hits.Load()
	for range 20 {
		if _, err := whoami(c); err != nil {
			t.Fatal(err)
		}
	}
	if n := victim.hits.Load() - before; n != 0 {
		t.Errorf("down backend got %d new requests", n)
	}
	// Back: not re-added before Rise successes, then used again.
	victim.ready.Store(true)
	waitFor(t, 10*time.Second, func() bool { return l.Pool(PoolAPI).Healthy() == 4 })
	for range 30 {
		if _, err := whoami(c); err != nil {
			t.Fatal(err)
		}
	}
	if victim.hits.Load() == before {
		t.Error("recovered backend never used again")
	}
}

func TestKilledBackendSkipped(t *testing.T) {
	fc := newFakeCluster(t, 3)
	o := fastOptions(fc.port)
	o.Health.Interval = time.Hour // the checks must not be what saves us
	o.Health.FastInterval = 10 * time.Millisecond
	l := startLB(t, fc.cfg, fc.state, o, 4)
	c := fc.client(l.Addr(PoolAPI).String())
	fc.masters[2].kill()
	for i := range 30 {
		if _, err := whoami(c); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if fc.masters[0].hits.Load()+fc.masters[1].hits.Load() != 30 {
		t.Error("requests did not all land on the live masters")
	}
}

func TestBootstrapBackup(t *testing.T) {
	fc := newFakeCluster(t, 2)
	l := startLB(t, fc.cfg, fc.state, fastOptions(fc.port), 3)
	c := fc.client(l.Addr(PoolAPI).String())
	for range 4 {
		if who, _ := whoami(c); who == "bootstrap" {
			t.Fatal("bootstrap used while masters are up")
		}
	}
	for _, m := range fc.masters {
		m.ready.Store(false)
	}
	waitFor(t, 10*time.Second, func() bool { return l.Pool(PoolAPI).Healthy() == 1 })
	if err := l.Ready(context.Background()); err != nil {
		t.Errorf("ready with only the backup up: %v", err)
	}
	for range 4 {
		if who, err := whoami(c); who != "bootstrap" {
			t.Fatalf("with every master down got %q (%v), want bootstrap", who, err)
		}
	}
	fc.masters[0].ready.Store(true)
	waitFor(t, 10*time.Second, func() bool { return l.Pool(PoolAPI).Healthy() == 2 })
	for range 4 {
		if who, _ := whoami(c); who != "master-0" {
			t.Fatalf("got %q, want master-0 back in front of the backup", who)
		}
	}
	fc.boot.ready.Store(false)
	fc.masters[0].ready.Store(false)
	waitFor(t, 10*time.Second, func() bool { return l.Ready(context.Background()) != nil })
}

func TestMCSPassthrough(t *testing.T) {
	fc := newFakeCluster(t, 2)
	l := startLB(t, fc.cfg, fc.state, fastOptions(fc.port), 3)
	waitFor(t, 5*time.Second, func() bool { return l.Pool(PoolMCS).Healthy() == 3 })
	c := fc.client(l.Addr(PoolMCS).String())
	const accept = "application/vnd.coreos.ignition+json;version=3.2.0, */*;q=0.1"
	req, _ := http.NewRequest("GET", "https://api.test/config/master", nil)
	req.Header.Set("Accept", accept)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("TLS through the LB with the test CA: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := resp.Header.Get("X-Echo-Accept"); got != accept {
		t.Errorf("Accept reached the MCS as %q, want %q", got, accept)
	}
	if !strings.Contains(string(body), `"ignition"`) {
		t.Errorf("body %q", body)
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 || resp.TLS.PeerCertificates[0].Subject.CommonName != "api.test" {
		t.Error("the backend's certificate did not reach the client")
	}
}

func TestMembershipChangeKeepsSessions(t *testing.T) {
	fc := newFakeCluster(t, 2)
	o := fastOptions(fc.port)
	o.MCS.Disabled = true
	l := startLB(t, fc.cfg, fc.state, o, 3)
	conn, err := tls.Dial("tcp", l.Addr(PoolAPI).String(), &tls.Config{RootCAs: fc.ca.pool, ServerName: "api.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	get := func() string {
		req, _ := http.NewRequest("GET", "https://api.test/whoami", nil)
		if err := req.Write(conn); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4096)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("session broken: %v", err)
		}
		return string(buf[:n])
	}
	first := get()
	owner := "master-0"
	if strings.Contains(first, "master-1") {
		owner = "master-1"
	}
	if !fc.state.RemoveMember(owner, cluster.SourceConfig) {
		t.Fatal("remove member")
	}
	waitFor(t, 5*time.Second, func() bool { return len(l.Pool(PoolAPI).Status()) == 2 })
	if !strings.Contains(get(), owner) {
		t.Error("session moved or broke on a membership change")
	}
	c := fc.client(l.Addr(PoolAPI).String())
	for range 6 {
		if who, _ := whoami(c); who == owner {
			t.Fatal("removed member still gets new connections")
		}
	}
}

// rawPool builds a proxy over plain TCP backends whose health is forced up,
// for the byte-level tests.
func rawProxy(t *testing.T, addrs []string, po ProxyOptions) (*proxy, func()) {
	t.Helper()
	po.fill()
	p := newPool("raw", RoundRobin, HealthOptions{Interval: time.Hour}, okProber{}, NewMetrics(nil), testLogger(t), nil)
	var tg []BackendTarget
	for i, a := range addrs {
		tg = append(tg, BackendTarget{Name: string(rune('a' + i)), Addr: a})
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.setTargets(ctx, tg)
	waitFor(t, 2*time.Second, func() bool { return p.Healthy() == len(addrs) })
	ln, err := keepAliveListen(po.KeepAlive)("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x := &proxy{pool: p, opts: po, ln: ln.(*net.TCPListener)}
	if err := x.start(); err != nil {
		t.Fatal(err)
	}
	stop := func() {
		cancel()
		x.stopAccepting()
		_ = ln.Close()
		x.closeAll()
		x.wg.Wait()
		p.stop()
	}
	t.Cleanup(stop)
	return x, stop
}

type okProber struct{}

func (okProber) Probe(context.Context, string) error { return nil }

// echoServer echoes until the client's FIN, then closes (half-close aware).
func echoServer(t *testing.T) string {
	return serveTCP(t, func(c net.Conn) {
		defer c.Close()
		_, _ = io.Copy(c, c)
	})
}

// serveTCP runs handle on its own goroutine for every connection to a new
// loopback listener, until the test ends.
func serveTCP(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return ln.Addr().String()
}

func TestHalfCloseAndIntegrity(t *testing.T) {
	x, _ := rawProxy(t, []string{echoServer(t)}, ProxyOptions{})
	data := make([]byte, 8<<20)
	_, _ = rand.Read(data)
	if got := echoOnce(t, x.ln.Addr().String(), data); !bytes.Equal(got, data) {
		t.Fatalf("echoed %d bytes, sent %d (or content differs)", len(got), len(data))
	}
}

// holdServer accepts and never writes or closes: an abandoned peer.
func holdServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}

func TestTimeoutsReapSessions(t *testing.T) {
	tests := []struct {
		name      string
		halfClose bool
		opts      ProxyOptions
		within    time.Duration
	}{
		{"idle", false, ProxyOptions{IdleTimeout: 200 * time.Millisecond, FinTimeout: time.Hour}, 2 * time.Second},
		{"fin after client half-close", true, ProxyOptions{IdleTimeout: time.Hour, FinTimeout: 200 * time.Millisecond}, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, _ := rawProxy(t, []string{holdServer(t)}, tt.opts)
			c, err := net.Dial("tcp", x.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if tt.halfClose {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			start := time.Now()
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, err = c.Read(make([]byte, 1))
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("session never reaped")
			}
			if d := time.Since(start); d > tt.within {
				t.Errorf("reaped after %v, want within %v", d, tt.within)
			}
			waitFor(t, 2*time.Second, func() bool { return x.active.Load() == 0 })
		})
	}
}

func TestActiveSessionNotIdle(t *testing.T) {
	// Traffic keeps a session alive well past IdleTimeout.
	x, _ := rawProxy(t, []string{echoServer(t)}, ProxyOptions{IdleTimeout: 200 * time.Millisecond})
	c, err := net.Dial("tcp", x.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4)
	for range 8 {
		time.Sleep(80 * time.Millisecond)
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("active session cut: %v", err)
		}
	}
}

func TestConnectionLimit(t *testing.T) {
	x, _ := rawProxy(t, []string{holdServer(t)}, ProxyOptions{MaxConns: 2, FinTimeout: 200 * time.Millisecond})
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", x.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	waitFor(t, 2*time.Second, func() bool { return x.active.Load() == 2 })
	// Over the limit: reset at once (the dial itself may already see it).
	if c, err := net.Dial("tcp", x.ln.Addr().String()); err == nil {
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("connection over the limit not refused: %v", err)
		}
	}
	held[0].Close()
	waitFor(t, 2*time.Second, func() bool { return x.active.Load() == 1 })
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestGracefulStopDrains(t *testing.T) {
	fc := newFakeCluster(t, 1)
	o := fastOptions(fc.port)
	o.DrainTimeout = 300 * time.Millisecond
	l, err := New(fc.cfg, fc.state, o, nil, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	waitFor(t, 5*time.Second, func() bool { return l.Pool(PoolAPI).Healthy() == 2 })
	conn, err := tls.Dial("tcp", l.Addr(PoolAPI).String(), &tls.Config{RootCAs: fc.ca.pool, ServerName: "api.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	addr := l.Addr(PoolAPI).String()
	start := time.Now()
	cancel()
	// Accepting stops at once.
	waitFor(t, 2*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the drain timeout")
	}
	if d := time.Since(start); d < o.DrainTimeout {
		t.Errorf("Run returned after %v, before the drain timeout with a session open", d)
	}
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("session left open after the drain: %v", err)
	}
}

func TestListenerKeepAliveInherited(t *testing.T) {
	ln, err := keepAliveListen(30*time.Second)("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rc, _ := a.(*net.TCPConn).SyscallConn()
	var on, idle int
	_ = rc.Control(func(fd uintptr) {
		on, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		idle, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
	})
	if on != 1 || idle != 30 {
		t.Fatalf("accepted socket: SO_KEEPALIVE %d TCP_KEEPIDLE %d, want 1 and 30 from the listener", on, idle)
	}
}

// TestSplicePath shows the bytes travel through a kernel pipe (splice), not
// a user-space buffer: with the backend not reading, the stalled copy holds
// the client's bytes in one of this process's pipes.
func TestSplicePath(t *testing.T) {
	x, _ := rawProxy(t, []string{holdServer(t)}, ProxyOptions{})
	c, err := net.Dial("tcp", x.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() { _, _ = c.Write(make([]byte, 16<<20)) }()
	waitFor(t, 5*time.Second, func() bool { return pipeBytes(t) > 0 })
}

// pipeBytes sums the unread bytes in this process's pipes.
func pipeBytes(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || !strings.HasPrefix(target, "pipe:") {
			continue
		}
		fd, _ := strconv.Atoi(e.Name())
		if n, err := unix.IoctlGetInt(fd, unix.TIOCINQ); err == nil {
			total += n
		}
	}
	return total
}

// TestLoopsStopTheLB: a loop of Run's that fails or returns while the LB
// serves ends the run's context (Run then shuts down as when its own ends)
// and its group's error names it; loops that return because the context
// ended are no error.
func TestLoopsStopTheLB(t *testing.T) {
	untilDone := func(ctx context.Context) error { <-ctx.Done(); return nil }
	broken := errors.New("monitor broken")
	for _, c := range []struct {
		name  string
		cause error // what the loop returns
		want  string
	}{
		{"returns", nil, "lb: quitter: stopped on its own"},
		{"fails", broken, "lb: quitter: monitor broken"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			lp := loops{ctx: ctx, stop: stop, log: testLogger(t)}
			var a, b errgroup.Group
			lp.start(&a, "steady", untilDone)
			lp.start(&b, "quitter", func(context.Context) error { return c.cause })
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the context outlived a loop that stopped")
			}
			if err := a.Wait(); err != nil {
				t.Errorf("the loop stopped by the other: %v", err)
			}
			err := b.Wait()
			if err == nil || err.Error() != c.want {
				t.Errorf("error %v, want %q", err, c.want)
			}
			if c.cause != nil && !errors.Is(err, c.cause) {
				t.Errorf("error %v does not wrap the loop's", err)
			}
		})
	}

	ctx, stop := context.WithCancel(context.Background())
	lp := loops{ctx: ctx, stop: stop, log: testLogger(t)}
	var g errgroup.Group
	lp.start(&g, "a", untilDone)
	lp.start(&g, "b", untilDone)
	stop()
	if err := g.Wait(); err != nil {
		t.Errorf("loops that ended with the context: %v", err)
	}
}
