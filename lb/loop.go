package lb

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A proxy's connections are served by event loops, one per processor, in
// the manner of haproxy: each loop owns an epoll instance and its own
// duplicate of the listening socket (registered with EPOLLEXCLUSIVE, so a
// new connection wakes one loop), connects to backends with non-blocking
// sockets and moves bytes socket → pipe → socket with splice(2), never
// through user space. Every socket call is a raw, non-blocking system call;
// only the wait itself goes through the scheduler. A connection therefore
// costs no goroutine, no runtime poller registration and no thread
// hand-off, and every socket it uses is registered once, edge-triggered.
//
// A loop's state is touched only by its own goroutine. Other goroutines
// reach it through post, which queues a function and wakes the loop with
// an eventfd.

// acceptBatch bounds the connections one loop accepts per wake-up, so a
// flood of new clients cannot starve established sessions.
const acceptBatch = 32

// sessionEvents: every session socket is registered once, for both
// directions, edge-triggered.
const sessionEvents = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET

type loop struct {
	x       *proxy
	epfd    int
	file    *os.File        // epfd, as the runtime poller knows it
	rc      syscall.RawConn // file's: waits for events in the runtime poller
	pollErr error
	evfd    int // eventfd: post wakes the loop with it
	lfd     int // this loop's duplicate of the listener; -1 once it stopped accepting
	base    time.Time
	now     int64 // nanoseconds since base, refreshed after every wait
	byFD    []*session
	live    []*session // every open session, for the timeout sweep (session.idx)
	pipes   []*kpipe   // empty pipes kept for reuse
	ids     uint32     // the last session's id
	tick    int64      // sweep interval, nanoseconds
	next    int64      // when the next sweep is due

	acceptPaused int64 // while > now, the listener is out of the epoll set
	stopping     bool  // stopped accepting: exit once the last session ends

	mu   sync.Mutex
	cmds []func()
	dead bool // released: post does nothing

	events [128]unix.EpollEvent
}

// newLoop makes a loop accepting from a duplicate of the listening socket
// lnfd.
func newLoop(x *proxy, lnfd int) (*loop, error) {
	l := &loop{x: x, epfd: -1, evfd: -1, lfd: -1, base: time.Now()}
	var err error
	if l.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	// The loop waits for its epoll instance in the runtime's poller, like
	// any socket, rather than blocking a thread in epoll_wait: a goroutine
	// blocked in a system call keeps the scheduler's monitor waking every
	// 20 µs to take its processor away, and that costs more than the proxy.
	if err = unix.SetNonblock(l.epfd, true); err != nil {
		_ = unix.Close(l.epfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	l.file = os.NewFile(uintptr(l.epfd), "epoll")
	if l.rc, err = l.file.SyscallConn(); err != nil {
		_ = l.file.Close()
		return nil, err
	}
	if l.evfd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		l.release()
		return nil, os.NewSyscallError("eventfd", err)
	}
	if l.lfd, err = unix.FcntlInt(uintptr(lnfd), unix.F_DUPFD_CLOEXEC, 0); err != nil {
		l.lfd = -1
		l.release()
		return nil, os.NewSyscallError("dup listener", err)
	}
	if err = l.ctl(unix.EPOLL_CTL_ADD, l.evfd, unix.EPOLLIN, 0); err == nil {
		err = l.ctl(unix.EPOLL_CTL_ADD, l.lfd, unix.EPOLLIN|unix.EPOLLEXCLUSIVE, 0)
	}
	if err != nil {
		l.release()
		return nil, err
	}
	l.tick = int64(x.opts.sweep())
	return l, nil
}

// ctl changes fd's registration; id (a session's) comes back with its
// events.
func (l *loop) ctl(op, fd int, events uint32, id uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd), Pad: int32(id)}
	_, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(l.epfd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(&ev)), 0, 0)
	if e != 0 {
		return os.NewSyscallError("epoll_ctl", e)
	}
	return nil
}

// release closes the loop's own descriptors. Posts after it are dropped:
// the eventfd's number may already belong to another file.
func (l *loop) release() {
	l.mu.Lock()
	l.dead = true
	if l.evfd >= 0 {
		_ = unix.Close(l.evfd)
	}
	l.evfd = -1
	l.mu.Unlock()
	if l.lfd >= 0 {
		_ = unix.Close(l.lfd)
	}
	if l.file != nil {
		_ = l.file.Close()
	}
	l.lfd, l.epfd, l.file = -1, -1, nil
	for _, p := range l.pipes {
		p.close()
	}
	l.pipes = nil
}

// post runs f on the loop's goroutine, soon; not at all once the loop has
// ended (its sessions are closed by then).
func (l *loop) post(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead {
		return
	}
	l.cmds = append(l.cmds, f)
	one := uint64(1)
	_, _ = unix.Write(l.evfd, (*[8]byte)(unsafe.Pointer(&one))[:])
}

func (l *loop) runCommands() {
	var buf [8]byte
	_, _ = unix.Read(l.evfd, buf[:])
	l.mu.Lock()
	cmds := l.cmds
	l.cmds = nil
	l.mu.Unlock()
	for _, f := range cmds {
		f()
	}
}

// run serves until the loop has stopped accepting and its last session
// has ended.
func (l *loop) run() {
	defer l.release()
	if l.x.enter != nil {
		// The backend sockets must be made in the proxy's network
		// namespace: pin this goroutine to a thread that entered it. The
		// thread is never unlocked, so it exits with the goroutine.
		runtime.LockOSThread()
		if err := l.x.enter(); err != nil {
			l.x.pool.log.Error("proxy: enter network namespace", "err", err)
			l.stopAccepting()
			l.closeAll()
			return
		}
	}
	l.now = int64(time.Since(l.base))
	for !l.finished() {
		if l.now >= l.next {
			l.sweep()
			l.next = l.now + l.tick
			_ = l.file.SetReadDeadline(l.base.Add(time.Duration(l.next)))
		}
		err := l.rc.Read(l.serve)
		l.now = int64(time.Since(l.base))
		if err == nil {
			err = l.pollErr
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			l.x.pool.log.Error("proxy: epoll_wait", "err", err)
			l.closeAll()
			return
		}
	}
}

// debugging says whether debug lines are logged: failure paths build
// their arguments only then, so a flood of refused connects allocates
// nothing.
func (l *loop) debugging() bool {
	return l.x.pool.log.Enabled(context.Background(), slog.LevelDebug)
}

func (l *loop) finished() bool { return l.stopping && len(l.live) == 0 }

// serve is the loop's body, run by the runtime poller's wait on the epoll
// instance: it takes and handles events until none are left, and then
// parks the loop (false). It returns true when a sweep is due or the loop
// is finished.
//
// A batch that drained the ready list needs no further (empty) poll before
// parking: every event queued later notifies the runtime poller, which
// within this one Read call keeps that notice for the wait. Level-triggered
// entries (the listener, the eventfd) are put back on the list without a
// notice, so a batch with one of them polls again.
func (l *loop) serve(fd uintptr) bool {
	for {
		r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&l.events[0])), uintptr(len(l.events)), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			l.pollErr = os.NewSyscallError("epoll_pwait", e)
			return true
		}
		n := int(r)
		if n == 0 {
			return false
		}
		again := n == len(l.events)
		acc := false
		for i := range n {
			ev := &l.events[i]
			fd := int(ev.Fd)
			switch {
			case fd == l.evfd:
				l.runCommands()
				again = true
			case fd == l.lfd:
				acc = true
			case fd < len(l.byFD) && l.byFD[fd] != nil && l.byFD[fd].id == uint32(ev.Pad):
				// (An event of a session closed earlier in this batch
				// whose descriptor number was reused does not match.)
				l.onEvent(l.byFD[fd], fd, ev.Events)
			}
		}
		if acc && l.lfd >= 0 {
			// New clients after the events of open sessions: a response
			// waiting to be passed on is not held up by connects.
			l.accept()
			again = true
		}
		l.now = int64(time.Since(l.base))
		if l.now >= l.next || l.finished() {
			return true
		}
		if !again {
			return false
		}
	}
}

// stopAccepting takes the loop's listener out; the loop exits once its
// sessions end. The duplicate must leave the epoll set explicitly: the
// listening socket lives on in the other descriptors that share it.
func (l *loop) stopAccepting() {
	l.stopping = true
	if l.lfd >= 0 {
		if l.acceptPaused == 0 {
			_ = l.ctl(unix.EPOLL_CTL_DEL, l.lfd, 0, 0)
		}
		_ = unix.Close(l.lfd)
		l.lfd = -1
	}
}

// closeAll ends every session of the loop.
func (l *loop) closeAll() {
	for len(l.live) > 0 {
		l.closeSession(l.live[len(l.live)-1])
	}
}

func (l *loop) accept() {
	x := l.x
	for range acceptBatch {
		r, _, e := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(l.lfd), 0, 0, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		switch e {
		case 0:
		case unix.EAGAIN:
			return
		case unix.EINTR, unix.ECONNABORTED:
			continue
		default:
			// Out of descriptors or memory: the listener is level-triggered,
			// so leave it out of the wait for a while instead of spinning.
			x.pool.log.Warn("accept", "err", os.NewSyscallError("accept4", e))
			if l.acceptPaused == 0 {
				_ = l.ctl(unix.EPOLL_CTL_DEL, l.lfd, 0, 0)
			}
			l.acceptPaused = l.now + int64(100*time.Millisecond)
			return
		}
		fd := int(r)
		if x.active.Add(1) > int64(x.opts.MaxConns) {
			x.active.Add(-1)
			resetClose(fd) // the client learns at once, no TIME_WAIT here
			inc(x.pool.conns.limit)
			continue
		}
		l.ids++
		s := &session{l: l, id: l.ids, cfd: fd, sfd: -1, last: l.now}
		s.tried = s.triedBuf[:0]
		l.track(s)
		l.connect(s)
		// The client's first bytes usually came with its handshake: they
		// go out now, and only then is its socket registered, which
		// reports whatever arrived since (so a short read here has
		// emptied it).
		if s.closed || !l.pump(s, &s.in, s.cfd, s.sfd, "in", true) {
			continue
		}
		if err := l.ctl(unix.EPOLL_CTL_ADD, fd, sessionEvents, s.id); err != nil {
			x.pool.log.Warn("proxy: register client", "err", err)
			l.closeSession(s)
		}
	}
}

// resetClose closes fd with an RST rather than a FIN.
func resetClose(fd int) {
	lg := unix.Linger{Onoff: 1, Linger: 0}
	_, _, _ = unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_LINGER, uintptr(unsafe.Pointer(&lg)), unsafe.Sizeof(lg), 0)
	rawClose(fd)
}

func (l *loop) track(s *session) {
	for _, fd := range []int{s.cfd, s.sfd} {
		if fd >= 0 {
			l.setFD(fd, s)
		}
	}
	s.idx = len(l.live)
	l.live = append(l.live, s)
}

func (l *loop) setFD(fd int, s *session) {
	if fd >= len(l.byFD) {
		l.byFD = append(l.byFD, make([]*session, fd+1-len(l.byFD)+64)...)
	}
	l.byFD[fd] = s
}

// connect picks a backend not yet tried and connects to it; a refused
// connect moves on to the next, up to the proxy's retries. With none left
// the client is reset.
func (l *loop) connect(s *session) {
	x := l.x
	p := x.pool
	for s.attempts <= x.opts.Retries {
		b := p.pick(s.tried)
		if b == nil {
			break
		}
		s.attempts++
		s.tried = append(s.tried, b)
		fd, e := dialRaw(b.ap)
		if e != 0 && e != unix.EINPROGRESS {
			p.release(b)
			if l.debugging() {
				p.log.Debug("dial backend", "backend", b.Name, "err", os.NewSyscallError("connect", e))
			}
			continue
		}
		s.b, s.sfd = b, fd
		l.setFD(fd, s)
		if err := l.ctl(unix.EPOLL_CTL_ADD, fd, sessionEvents, s.id); err != nil {
			l.dropBackend(s)
			p.log.Warn("proxy: register backend", "err", err)
			continue
		}
		s.connecting = e == unix.EINPROGRESS
		s.connectBy = l.now + int64(x.opts.ConnectTimeout)
		if !s.connecting {
			l.confirm(s)
		}
		if s.in.pending() {
			// A retry: what the client sent waits for this backend.
			l.pump(s, &s.in, s.cfd, s.sfd, "in", false)
		}
		return
	}
	if len(s.tried) == 0 {
		inc(p.conns.noBackend)
	} else {
		inc(p.conns.dialFailed)
	}
	s.reset = true
	l.closeSession(s)
}

// dropBackend undoes a connect that failed or timed out.
func (l *loop) dropBackend(s *session) {
	l.byFD[s.sfd] = nil
	rawClose(s.sfd)
	l.x.pool.release(s.b)
	s.sfd, s.b, s.connecting = -1, nil, false
}

// dialRaw starts a non-blocking connect to ap: errno 0 when it completed
// within the call, EINPROGRESS (the usual answer, even on loopback) when
// the socket's first event will tell.
func dialRaw(ap netip.AddrPort) (int, unix.Errno) {
	var (
		sa     unsafe.Pointer
		salen  uintptr
		family = unix.AF_INET
		sa4    unix.RawSockaddrInet4
		sa6    unix.RawSockaddrInet6
	)
	switch a := ap.Addr(); {
	case a.Is4() || a.Is4In6():
		sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.Unmap().As4()}
		putPort(&sa4.Port, ap.Port())
		sa, salen = unsafe.Pointer(&sa4), unix.SizeofSockaddrInet4
	case a.Is6():
		family = unix.AF_INET6
		sa6 = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.As16()}
		putPort(&sa6.Port, ap.Port())
		sa, salen = unsafe.Pointer(&sa6), unix.SizeofSockaddrInet6
	default:
		return -1, unix.EDESTADDRREQ
	}
	r, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(family), unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if e != 0 {
		return -1, e
	}
	fd := int(r)
	one := int32(1)
	// Like the runtime's own sockets: small writes (TLS records) leave at
	// once. Best effort.
	_, _, _ = unix.RawSyscall6(unix.SYS_SETSOCKOPT, r, unix.IPPROTO_TCP, unix.TCP_NODELAY, uintptr(unsafe.Pointer(&one)), 4, 0)
	for {
		_, _, e = unix.RawSyscall(unix.SYS_CONNECT, r, uintptr(sa), salen)
		if e != unix.EINTR {
			break
		}
	}
	if e != 0 && e != unix.EINPROGRESS {
		rawClose(fd)
		return -1, e
	}
	return fd, e
}

// putPort stores port in network byte order.
func putPort(dst *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(dst))
	b[0], b[1] = byte(port>>8), byte(port)
}

// confirm counts a session whose backend connection is up, and passes on
// a FIN the client sent while it was not.
func (l *loop) confirm(s *session) {
	p := l.x.pool
	s.connecting = false
	inc(p.conns.proxied)
	s.b.m.addActive(1)
	s.counted = true
	p.addSession(s)
	if s.in.eof {
		_, _, _ = unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(s.sfd), unix.SHUT_WR, 0)
	}
}

// onEvent handles readiness of one of s's sockets: the direction reading
// from it when readable, the direction writing to it when writable and
// bytes wait in its pipe. The backend socket's first event tells how its
// connect ended.
func (l *loop) onEvent(s *session, fd int, ev uint32) {
	if s.connecting && fd == s.sfd {
		if ev&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
			l.connectFailed(s, 0)
			return
		}
		l.confirm(s)
	}
	readable := ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLERR|unix.EPOLLHUP) != 0
	writable := ev&unix.EPOLLOUT != 0
	edge := ev&(unix.EPOLLRDHUP|unix.EPOLLERR|unix.EPOLLHUP) == 0
	if fd == s.cfd {
		// Also while the backend connects: the bytes go out at once if
		// its handshake is done (on a local network it usually is, though
		// connect said EINPROGRESS), else they wait in the pipe.
		if readable && !l.pump(s, &s.in, s.cfd, s.sfd, "in", edge) {
			return
		}
		if writable && s.out.pending() {
			l.pump(s, &s.out, s.sfd, s.cfd, "out", false)
		}
		return
	}
	if readable && !l.pump(s, &s.out, s.sfd, s.cfd, "out", edge) {
		return
	}
	if writable && s.in.pending() {
		l.pump(s, &s.in, s.cfd, s.sfd, "in", false)
	}
}

// connectFailed moves a session whose backend connection failed or timed
// out (errno e; 0: read it from the socket) to the next backend. Bytes
// the client sent meanwhile are still in the pipe and go to that one.
func (l *loop) connectFailed(s *session, e unix.Errno) {
	if e == 0 {
		var soerr int32
		size := uint32(4)
		_, _, e = unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(s.sfd), unix.SOL_SOCKET, unix.SO_ERROR, uintptr(unsafe.Pointer(&soerr)), uintptr(unsafe.Pointer(&size)), 0)
		if e == 0 {
			e = unix.Errno(soerr)
		}
	}
	if l.debugging() {
		l.x.pool.log.Debug("dial backend", "backend", s.b.Name, "err", os.NewSyscallError("connect", e))
	}
	l.dropBackend(s)
	l.connect(s)
}

// pump moves one direction's bytes socket → pipe → socket with splice(2),
// never through user space, until src has nothing more (EAGAIN), dst
// takes no more (the bytes wait in the pipe for its EPOLLOUT), or src's
// FIN, which it passes on with shutdown. It returns false when the session
// ended.
//
// edge says pump runs for a readable event on src that reported no FIN,
// hang-up or error (or before src is registered, whose registration will
// report what arrives meanwhile). Then a read of fewer bytes than the pipe
// has slots has emptied src: it was not cut short by a full pipe (every
// slot holds at least a byte) nor by a FIN (the event would have said so,
// and a FIN that arrives after it raises a new one), and anything that
// arrives later raises a new edge. pump then stops without the read that
// would only return EAGAIN.
func (l *loop) pump(s *session, d *direction, src, dst int, dir string, edge bool) bool {
	var moved int64
	var fail unix.Errno
	drained := false
	for {
		if d.pending() {
			n, e := rawSplice(d.p.r, dst, d.p.data)
			if n > 0 {
				if s.connecting {
					l.confirm(s) // the backend took bytes: it is connected
				}
				d.p.data -= n
				moved += int64(n)
				continue
			}
			if e == unix.EAGAIN {
				break // dst is full, or still connecting: its EPOLLOUT resumes this
			}
			if s.connecting {
				l.connectFailed(s, e)
				return !s.closed
			}
			fail = e
			break
		}
		if d.eof || drained {
			break
		}
		if d.p == nil {
			var err error
			if d.p, err = l.getPipe(); err != nil {
				l.x.pool.log.Warn("proxy: pipe", "err", err)
				fail = unix.EMFILE
				break
			}
		}
		n, e := rawSplice(src, d.p.w, maxSplice)
		if n > 0 {
			d.p.data += n
			drained = edge && n < d.p.slots
			continue
		}
		if e == unix.EAGAIN {
			break
		}
		if e != 0 {
			fail = e
			break
		}
		// FIN from src: pass it on, keep the other direction open. Not
		// when the other direction has finished too (the close sends the
		// FIN), nor to a backend still connecting (a shutdown would abort
		// the connect; confirm sends it).
		d.eof = true
		if !(s.in.eof && s.out.eof) && !s.connecting {
			_, _, _ = unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(dst), unix.SHUT_WR, 0)
		}
	}
	if d.p != nil && d.p.data == 0 {
		l.putPipe(d.p) // hold no pipe while waiting
		d.p = nil
	}
	if moved > 0 {
		s.last = l.now
		s.b.m.addBytes(dir, moved)
	}
	if fail != 0 || (s.in.eof && s.out.eof) {
		if fail != 0 && fail != unix.ECONNRESET && fail != unix.EPIPE && l.debugging() {
			l.x.pool.log.Debug("proxy: splice", "backend", s.b.Name, "err", fail)
		}
		l.closeSession(s)
		return false
	}
	return true
}

// sweep enforces the timeouts: connect, idle, and idle after a half-close.
func (l *loop) sweep() {
	if l.acceptPaused != 0 && l.acceptPaused <= l.now && l.lfd >= 0 {
		if l.ctl(unix.EPOLL_CTL_ADD, l.lfd, unix.EPOLLIN|unix.EPOLLEXCLUSIVE, 0) == nil {
			l.acceptPaused = 0
		}
	}
	o := l.x.opts
	var due []*session
	for _, s := range l.live {
		switch {
		case s.connecting:
			if l.now >= s.connectBy {
				due = append(due, s)
			}
		case s.in.eof || s.out.eof:
			if l.now-s.last >= int64(o.FinTimeout) {
				due = append(due, s)
			}
		case l.now-s.last >= int64(o.IdleTimeout):
			due = append(due, s)
		}
	}
	for _, s := range due {
		if s.closed {
			continue
		}
		if s.connecting {
			l.connectFailed(s, unix.ETIMEDOUT)
			continue
		}
		if l.debugging() {
			l.x.pool.log.Debug("session timed out", "backend", s.b.Name, "half_closed", s.in.eof || s.out.eof)
		}
		l.closeSession(s)
	}
}

// closeSession closes both sockets and gives back what the session held.
func (l *loop) closeSession(s *session) {
	if s.closed {
		return
	}
	s.closed = true
	last := l.live[len(l.live)-1]
	l.live[s.idx] = last
	last.idx = s.idx
	l.live = l.live[:len(l.live)-1]
	l.byFD[s.cfd] = nil
	if s.reset {
		resetClose(s.cfd)
	} else {
		rawClose(s.cfd)
	}
	if s.sfd >= 0 {
		l.byFD[s.sfd] = nil
		rawClose(s.sfd)
	}
	for _, d := range []*direction{&s.in, &s.out} {
		if d.p != nil {
			l.putPipe(d.p)
			d.p = nil
		}
	}
	p := l.x.pool
	switch {
	case s.counted:
		s.b.m.addActive(-1)
		p.endSession(s)
	case s.b != nil:
		p.release(s.b)
	}
	l.x.active.Add(-1)
}

// getPipe returns an empty pipe from the loop's cache or a new one.
func (l *loop) getPipe() (*kpipe, error) {
	if n := len(l.pipes); n > 0 {
		p := l.pipes[n-1]
		l.pipes = l.pipes[:n-1]
		return p, nil
	}
	return newPipe()
}

// putPipe keeps an empty pipe for reuse; one with bytes stranded in it is
// closed.
func (l *loop) putPipe(p *kpipe) {
	if p.data == 0 && len(l.pipes) < maxFreePipes {
		l.pipes = append(l.pipes, p)
		return
	}
	p.close()
}

// session is one client spliced to one backend; it belongs to one loop.
type session struct {
	l          *loop
	id         uint32 // tags its sockets' events
	cfd, sfd   int
	b          *backend
	tried      []*backend
	triedBuf   [3]*backend
	attempts   int
	in, out    direction // client to backend, backend to client
	last       int64     // loop time of the last byte moved either way
	connectBy  int64
	idx        int // in l.live
	connecting bool
	counted    bool // established: counted active, known to the pool
	reset      bool // close the client with an RST
	closed     bool
}

// close ends the session from any goroutine.
func (s *session) close() {
	s.l.post(func() { s.l.closeSession(s) })
}

// direction is one way of a session: its pipe while bytes wait for dst,
// and whether its source has finished (its FIN passed on).
type direction struct {
	p   *kpipe
	eof bool
}

func (d *direction) pending() bool { return d.p != nil && d.p.data > 0 }
