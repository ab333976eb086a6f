package dnsserver

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"appliance/internal/cluster"
	"appliance/internal/host"
)

// fakeConn is an mconn fed by the test: each item of in is a packet or, when
// err is set, a read failure.
type fakeConn struct {
	in     chan fakeRead
	sent   chan []byte
	once   sync.Once
	closed chan struct{}
}

type fakeRead struct {
	b   []byte
	src net.Addr
	err error
}

func newFakeConn() *fakeConn {
	return &fakeConn{in: make(chan fakeRead, 8), sent: make(chan []byte, 64), closed: make(chan struct{})}
}

func (c *fakeConn) ReadFrom(b []byte) (int, int, net.Addr, error) {
	select {
	case r := <-c.in:
		if r.err != nil {
			return 0, 0, nil, r.err
		}
		return copy(b, r.b), 0, r.src, nil
	case <-c.closed:
		return 0, 0, nil, net.ErrClosed
	}
}

func (c *fakeConn) WriteTo(b []byte, _ net.Addr) error {
	select {
	case c.sent <- append([]byte(nil), b...):
	default: // the test reads only what it needs
	}
	return nil
}

func (c *fakeConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// TestMDNSSocketFaults drives mDNS through the socket seam: a read that
// fails and an open that fails are both retried with a count, malformed
// packets and a claim on a VIP are counted and dropped, and Run leaves no
// goroutine behind (TestMain checks).
func TestMDNSSocketFaults(t *testing.T) {
	cfg := mdnsConfig("ocp4", []cluster.Node{{Name: "master-0", Role: cluster.RoleMaster, IPs: []netip.Addr{netip.MustParseAddr("192.168.126.10")}}})
	view := &host.View{Name: "master-0", Role: cluster.RoleMaster, Configured: true, Interface: "eth0", Index: 7, Up: true,
		Prefixes: []netip.Prefix{netip.MustParsePrefix("192.168.126.10/24")}}
	state := cluster.NewState(cfg)
	d, err := NewMDNS(cfg, state, MDNSOptions{Host: staticViews{view}, TTL: time.Minute}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan *fakeConn, 8)
	var mu sync.Mutex
	opens := 0
	d.listen = func(fam int, ifi *net.Interface) (mconn, error) {
		if fam == fam6 {
			return nil, errors.New("no IPv6 here")
		}
		if ifi.Index != 7 || ifi.Name != "eth0" {
			t.Errorf("opened on %+v", ifi)
		}
		mu.Lock()
		defer mu.Unlock()
		opens++
		if opens == 2 {
			return nil, errors.New("injected open failure")
		}
		c := newFakeConn()
		conns <- c
		return c, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	next := func() *fakeConn {
		t.Helper()
		select {
		case c := <-conns:
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("no socket opened")
			return nil
		}
	}
	announced := func(c *fakeConn) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case b := <-c.sent:
				m := new(dns.Msg)
				if m.Unpack(b) == nil && m.Response && len(m.Answer) > 0 {
					return
				}
			case <-deadline:
				t.Fatal("no announcement on the socket")
			}
		}
	}
	first := next()
	announced(first)

	// Garbage is counted and dropped; the reader goes on.
	first.in <- fakeRead{b: []byte{1, 2, 3}, src: &net.UDPAddr{IP: net.IPv4(192, 168, 126, 99), Port: mdnsPort}}
	// A node announcing the API VIP is refused.
	claim := &dns.Msg{Answer: (&MDNS{cfg: cfg, domain: d.domain}).recordsOf(&host.View{Name: "vipper", Role: cluster.RoleMaster,
		Prefixes: []netip.Prefix{netip.MustParsePrefix("192.168.126.5/24")}}, 60)}
	claim.Response = true
	b, err := claim.Pack()
	if err != nil {
		t.Fatal(err)
	}
	first.in <- fakeRead{b: b, src: &net.UDPAddr{IP: net.IPv4(192, 168, 126, 99), Port: mdnsPort}}
	waitUntil(t, "claim refused", 5*time.Second, func() bool { return testutil.ToFloat64(d.m.refused(refuseVIP)) == 1 })
	if got := testutil.ToFloat64(d.m.mdnsMalformed); got != 1 {
		t.Fatalf("malformed packets counted: %v", got)
	}
	if st := d.Status(); len(st.RefusedClaims) != 1 || st.RefusedClaims[0].From != netip.MustParseAddr("192.168.126.99") || st.RefusedClaims[0].Node != "vipper" {
		t.Fatalf("refused claims in status: %+v", st.RefusedClaims)
	}
	if _, ok := state.Snapshot().Member("vipper"); ok {
		t.Fatal("a refused claim reached State")
	}

	// The read fails: the reader opens again (the first attempt fails too,
	// injected) and announces on the new socket.
	start := time.Now()
	first.in <- fakeRead{err: errors.New("injected read failure")}
	second := next()
	announced(second)
	// 100 ms after the read failure, 200 ms after the failed open.
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("re-opened after %v", took)
	}
	for _, op := range []string{"read", "open"} {
		if got := testutil.ToFloat64(d.m.mdnsSocketErrors.WithLabelValues("ipv4", op)); got != 1 {
			t.Fatalf("ipv4 %s failures counted: %v, want 1", op, got)
		}
	}
	if got := testutil.ToFloat64(d.m.mdnsSocketErrors.WithLabelValues("ipv6", "open")); got != 1 {
		t.Fatalf("ipv6 open failures counted: %v, want 1 (tried again only on an interface change)", got)
	}
	if st := d.Status(); st.Interface != "eth0" || len(st.Sockets) != 1 {
		t.Fatalf("status: %+v", st)
	}
}
