package lb

import (
	"context"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The proxy's per-connection socket calls that never block but can run
// for tens of microseconds — connect, shutdown and splice on a local
// socket do the peer's receive work inline — are issued as raw system
// calls. A call announced to the Go scheduler that lasts longer than its
// monitor's 20 µs tick has its processor handed to another thread; on a
// busy proxy that turns every connection into several thread wake-ups,
// which cost more than the calls themselves. These calls are non-blocking,
// so nothing is lost by keeping the processor.

// rawConnect starts a non-blocking connect on a freshly created socket
// from inside the dialer's Control hook. On a local network the handshake
// completes inside the call; the dialer's own connect then sees EISCONN,
// which it treats as success, and needs no poller round trip. If the
// handshake is still under way the dialer's connect sees EALREADY and
// waits as usual, under its deadline.
func rawConnect(_ context.Context, network, address string, c syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || ap.Addr().Zone() != "" {
		return nil // leave it to the dialer
	}
	var errno syscall.Errno
	cerr := c.Control(func(fd uintptr) {
		switch {
		case network == "tcp4" && ap.Addr().Is4():
			sa := unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: ap.Addr().As4()}
			putPort(&sa.Port, ap.Port())
			_, _, errno = unix.RawSyscall(unix.SYS_CONNECT, fd, uintptr(unsafe.Pointer(&sa)), unix.SizeofSockaddrInet4)
		case network == "tcp6" && ap.Addr().Is6():
			sa := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: ap.Addr().As16()}
			putPort(&sa.Port, ap.Port())
			_, _, errno = unix.RawSyscall(unix.SYS_CONNECT, fd, uintptr(unsafe.Pointer(&sa)), unix.SizeofSockaddrInet6)
		}
	})
	if cerr != nil {
		return cerr
	}
	switch errno {
	case 0, unix.EINPROGRESS, unix.EINTR, unix.EAFNOSUPPORT, unix.EINVAL:
		// Done, under way, or not ours to judge: the dialer's connect
		// takes it from here.
		return nil
	}
	return os.NewSyscallError("connect", errno)
}

// putPort stores port in network byte order.
func putPort(dst *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(dst))
	b[0], b[1] = byte(port>>8), byte(port)
}

// maxSplice is how much one splice call asks to move, and the pipes' size:
// large transfers then take few calls.
const maxSplice = 1 << 20

// maxFreePipes bounds the pipes kept for reuse; the rest are closed.
const maxFreePipes = 64

// kpipe is a kernel pipe that carries one direction's bytes between two
// sockets; data counts the bytes in it.
type kpipe struct {
	r, w int
	data int
}

var pipePool struct {
	mu   sync.Mutex
	free []*kpipe
}

func getPipe() (*kpipe, error) {
	pipePool.mu.Lock()
	if n := len(pipePool.free); n > 0 {
		p := pipePool.free[n-1]
		pipePool.free = pipePool.free[:n-1]
		pipePool.mu.Unlock()
		return p, nil
	}
	pipePool.mu.Unlock()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, os.NewSyscallError("pipe2", err)
	}
	// Best effort: a smaller pipe only means more calls.
	_, _ = unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, maxSplice)
	return &kpipe{r: fds[0], w: fds[1]}, nil
}

// putPipe keeps an empty pipe for reuse; a pipe with bytes stranded in it
// (its copy failed) is closed.
func putPipe(p *kpipe) {
	if p.data == 0 {
		pipePool.mu.Lock()
		if len(pipePool.free) < maxFreePipes {
			pipePool.free = append(pipePool.free, p)
			pipePool.mu.Unlock()
			return
		}
		pipePool.mu.Unlock()
	}
	_ = unix.Close(p.r)
	_ = unix.Close(p.w)
}

// rawSplice is splice(2) between in and out, non-blocking, retried on EINTR.
func rawSplice(in, out, n int) (int, syscall.Errno) {
	for {
		r, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(in), 0, uintptr(out), 0, uintptr(n), unix.SPLICE_F_NONBLOCK)
		if e != unix.EINTR {
			return int(r), e
		}
	}
}

// splicer moves one direction's bytes from src to dst through a kernel
// pipe: socket → pipe → socket, never through user space. The sockets stay
// in the runtime's poller (waits honour their deadlines); only the splice
// calls themselves bypass the scheduler. A pipe is held only while bytes
// move: a session waiting for data holds none. The callbacks are built once
// (init) so that the copy loop allocates nothing.
type splicer struct {
	dst, src    syscall.RawConn
	fill, drain func(fd uintptr) bool
	shut        func(fd uintptr)

	p       *kpipe
	n       int // bytes the last fill moved into the pipe
	errno   syscall.Errno
	perr    error
	written int64
}

func (sp *splicer) init(dst, src syscall.RawConn) {
	sp.dst, sp.src = dst, src
	sp.fill, sp.drain, sp.shut = sp.fillPipe, sp.drainPipe, sp.shutdownWrite
}

// closeWrite passes src's FIN on: shutdown(SHUT_WR) on dst, as a raw call.
func (sp *splicer) closeWrite() error {
	sp.errno = 0
	if err := sp.dst.Control(sp.shut); err != nil {
		return err
	}
	if sp.errno != 0 && sp.errno != unix.ENOTCONN {
		return os.NewSyscallError("shutdown", sp.errno)
	}
	return nil
}

func (sp *splicer) shutdownWrite(fd uintptr) {
	_, _, sp.errno = unix.RawSyscall(unix.SYS_SHUTDOWN, fd, unix.SHUT_WR, 0)
}

// fillPipe is src's read callback: false means "wait until readable".
func (sp *splicer) fillPipe(fd uintptr) bool {
	if sp.p == nil {
		if sp.p, sp.perr = getPipe(); sp.perr != nil {
			return true
		}
	}
	sp.n, sp.errno = rawSplice(int(fd), sp.p.w, maxSplice)
	if sp.errno == unix.EAGAIN {
		// Nothing to read: give the (empty) pipe back while waiting.
		putPipe(sp.p)
		sp.p = nil
		return false
	}
	return true
}

// drainPipe is dst's write callback: false means "wait until writable".
func (sp *splicer) drainPipe(fd uintptr) bool {
	for sp.p.data > 0 {
		m, e := rawSplice(sp.p.r, int(fd), sp.p.data)
		if m > 0 {
			sp.p.data -= m
			sp.written += int64(m)
			continue
		}
		if e == unix.EAGAIN {
			return false // socket buffer full: wait for room
		}
		sp.errno = e
		if sp.errno == 0 {
			sp.errno = unix.EIO // no progress and no error: never loop on it
		}
		return true
	}
	return true
}

// copy moves bytes until src's EOF (nil error), an error or a deadline of
// either socket; it returns the bytes written to dst.
func (sp *splicer) copy() (int64, error) {
	sp.written = 0
	defer func() {
		if sp.p != nil {
			putPipe(sp.p)
			sp.p = nil
		}
	}()
	for {
		sp.n, sp.errno, sp.perr = 0, 0, nil
		err := sp.src.Read(sp.fill)
		switch {
		case err != nil:
			return sp.written, err
		case sp.perr != nil:
			return sp.written, sp.perr
		case sp.errno != 0:
			return sp.written, os.NewSyscallError("splice", sp.errno)
		case sp.n == 0:
			return sp.written, nil // EOF
		}
		sp.p.data += sp.n
		if err := sp.dst.Write(sp.drain); err != nil {
			return sp.written, err
		}
		if sp.errno != 0 {
			return sp.written, os.NewSyscallError("splice", sp.errno)
		}
	}
}
