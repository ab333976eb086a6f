package lb

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// The dialer's raw connect: a local handshake completes inside it (IPv4
// and IPv6), a refused port fails the dial with ECONNREFUSED, and the
// result is a *net.TCPConn with both addresses known.
func TestRawConnectDial(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "[::1]"} {
		ln, err := net.Listen("tcp", host+":0")
		if err != nil {
			t.Logf("%s: %v (skipped)", host, err)
			continue
		}
		addr := ln.Addr().String()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				_, _ = io.WriteString(c, "hi")
				_ = c.Close()
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := defaultDial(ctx, "tcp", addr)
		cancel()
		if err != nil {
			t.Fatalf("%s: dial: %v", addr, err)
		}
		tc, ok := c.(*net.TCPConn)
		if !ok {
			t.Fatalf("%s: got %T", addr, c)
		}
		if tc.RemoteAddr().String() != addr || tc.LocalAddr() == nil {
			t.Fatalf("%s: addresses %v -> %v", addr, tc.LocalAddr(), tc.RemoteAddr())
		}
		b, _ := io.ReadAll(tc)
		if string(b) != "hi" {
			t.Fatalf("%s: read %q", addr, b)
		}
		_ = tc.Close()
		// Now refused: the listener is gone.
		_ = ln.Close()
		_, err = defaultDial(context.Background(), "tcp", addr)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("%s: dial after close: %v, want ECONNREFUSED", addr, err)
		}
	}
}

// Connections' goroutines and pipes are reused, within bounds, and every
// goroutine is gone once the proxy stops.
func TestProxyReusesGoroutinesAndPipes(t *testing.T) {
	before := runtime.NumGoroutine()
	x, stop := rawProxy(t, []string{echoServer(t)}, ProxyOptions{})
	for range 200 {
		c, err := net.Dial("tcp", x.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "ping")
		_ = c.(*net.TCPConn).CloseWrite()
		if b, _ := io.ReadAll(c); string(b) != "ping" {
			t.Fatalf("echo %q", b)
		}
		_ = c.Close()
	}
	waitFor(t, 5*time.Second, func() bool { return x.active.Load() == 0 })
	if n := x.parked.Load(); n < 1 || n > maxParked {
		t.Fatalf("%d goroutines parked, want 1..%d", n, maxParked)
	}
	pipePool.mu.Lock()
	free := len(pipePool.free)
	pipePool.mu.Unlock()
	if free < 1 || free > maxFreePipes {
		t.Fatalf("%d pipes kept, want 1..%d", free, maxFreePipes)
	}
	stop()
	// The echo server's goroutines and the check loops end too; allow slack
	// for runtime goroutines that come and go.
	waitFor(t, 5*time.Second, func() bool { return runtime.NumGoroutine() <= before+2 })
}
