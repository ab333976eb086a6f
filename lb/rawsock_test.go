package lb

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dialRaw connects (IPv4 and IPv6) and a refused port fails with
// ECONNREFUSED, at once or once the connect completes.
func TestDialRaw(t *testing.T) {
	complete := func(fd int, e unix.Errno) unix.Errno {
		if e != unix.EINPROGRESS {
			return e
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if _, err := unix.Poll(pfd, 5000); err != nil {
			t.Fatal(err)
		}
		soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			t.Fatal(err)
		}
		return unix.Errno(soerr)
	}
	for _, host := range []string{"127.0.0.1", "[::1]"} {
		ln, err := net.Listen("tcp", host+":0")
		if err != nil {
			t.Logf("%s: %v (skipped)", host, err)
			continue
		}
		ap := netip.MustParseAddrPort(ln.Addr().String())
		fd, e := dialRaw(ap)
		if e = complete(fd, e); e != 0 {
			t.Fatalf("%s: connect: %v", ap, e)
		}
		peer, err := unix.Getpeername(fd)
		if err != nil {
			t.Fatalf("%s: getpeername: %v", ap, err)
		}
		var port int
		switch sa := peer.(type) {
		case *unix.SockaddrInet4:
			port = sa.Port
		case *unix.SockaddrInet6:
			port = sa.Port
		}
		if port != int(ap.Port()) {
			t.Fatalf("%s: connected to port %d", ap, port)
		}
		_ = unix.Close(fd)
		_ = ln.Close()
		fd, e = dialRaw(ap)
		if fd >= 0 {
			e = complete(fd, e)
			_ = unix.Close(fd)
		}
		if e != unix.ECONNREFUSED {
			t.Fatalf("%s: connect after close: %v, want ECONNREFUSED", ap, e)
		}
	}
	if _, e := dialRaw(netip.AddrPort{}); e == 0 {
		t.Fatal("connect to the zero address succeeded")
	}
}

// Pipes are reused within bounds, nothing leaks per connection, and every
// loop goroutine is gone once the proxy stops.
func TestProxyReusesPipesAndStops(t *testing.T) {
	echo := echoServer(t)
	before := runtime.NumGoroutine()
	fdsBefore := openFDs(t)
	x, stop := rawProxy(t, []string{echo}, ProxyOptions{})
	small, large := []byte("ping"), bytes.Repeat([]byte("0123456789abcdef"), 64<<10)
	for i := range 200 {
		msg := small
		if i%20 == 0 {
			msg = large
		}
		c, err := net.Dial("tcp", x.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, _ = c.Write(msg)
			_ = c.(*net.TCPConn).CloseWrite()
		}()
		if b, _ := io.ReadAll(c); !bytes.Equal(b, msg) {
			t.Fatalf("echo of %d bytes came back as %d", len(msg), len(b))
		}
		_ = c.Close()
	}
	waitFor(t, 5*time.Second, func() bool { return x.active.Load() == 0 })
	pipes := 0
	done := make(chan struct{})
	x.mu.Lock()
	loops := x.loops
	x.mu.Unlock()
	for _, l := range loops {
		l.post(func() { pipes += len(l.pipes); done <- struct{}{} })
		<-done
	}
	if pipes < 1 || pipes > maxFreePipes*len(loops) {
		t.Fatalf("%d pipes kept by %d loops, want 1..%d", pipes, len(loops), maxFreePipes*len(loops))
	}
	// Per loop: epoll, eventfd and the listener's duplicate; no socket of
	// the 200 sessions. (Pipes are not counted here: the echo server's
	// io.Copy keeps the runtime's own splice pipes.)
	if extra := openFDs(t) - fdsBefore; extra > len(loops)*3+1 {
		t.Fatalf("%d sockets and such more than before: %v", extra, fdTargets())
	}
	stop()
	if n := openFDs(t) - fdsBefore; n > 0 {
		t.Errorf("%d sockets and such left after stop: %v", n, fdTargets())
	}
	waitFor(t, 5*time.Second, func() bool { return runtime.NumGoroutine() <= before+2 })
}

func fdTargets() []string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out = append(out, l)
	}
	return out
}

// openFDs counts this process's sockets, epoll instances and eventfds.
func openFDs(t *testing.T) int {
	t.Helper()
	n := 0
	for _, l := range fdTargets() {
		if strings.HasPrefix(l, "socket:") || strings.HasPrefix(l, "anon_inode:") {
			n++
		}
	}
	return n
}
