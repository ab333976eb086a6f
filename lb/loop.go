package lb

import (
	"context"
	"errors"
	"log/slog"
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
// duplicate of the listening socket, connects to backends with non-blocking
// sockets and moves bytes socket → pipe → socket with splice(2), never
// through user space (session.go). Every socket call is a raw, non-blocking
// system call; only the wait itself goes through the scheduler. A connection therefore
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
	// peer receives an accepted client's address when the proxy balances
	// by family.
	peer unix.RawSockaddrAny
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
		// Every parked loop may wake for a new connection, and all but one
		// find EAGAIN. (EPOLLEXCLUSIVE would not help: it spares only
		// threads waiting in epoll_wait itself, and the loops wait in the
		// runtime poller.)
		err = l.ctl(unix.EPOLL_CTL_ADD, l.lfd, unix.EPOLLIN, 0)
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

// closeBornBefore ends the loop's sessions of clients of family fam
// (FamilyAny: all) accepted before t, and logs how many. Walking down, a
// close moves only an already walked session into the freed slot.
func (l *loop) closeBornBefore(fam Family, t time.Time) {
	cut := int64(t.Sub(l.base))
	n := 0
	for i := len(l.live) - 1; i >= 0; i-- {
		if s := l.live[i]; s.born < cut && serves(fam, s.fam) {
			l.closeSession(s)
			n++
		}
	}
	if n > 0 {
		l.x.pool.log.Info("ended sessions accepted before the VIP moved away", "sessions", n, "family", fam)
	}
}

func (l *loop) accept() {
	x := l.x
	for range acceptBatch {
		// Dual-stack, the kernel also writes the client's address into the
		// loop's buffer: its family picks the backends (no extra call).
		var peer *unix.RawSockaddrAny
		if x.byFamily {
			peer = &l.peer
		}
		fd, e := rawAccept(l.lfd, peer)
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
		if x.active.Add(1) > int64(x.opts.MaxConns) {
			x.active.Add(-1)
			resetClose(fd) // the client learns at once, no TIME_WAIT here
			inc(x.pool.conns.limit)
			continue
		}
		l.ids++
		s := &session{l: l, id: l.ids, cfd: fd, sfd: -1, last: l.now, born: l.now}
		if x.byFamily {
			s.fam = sockaddrFamily(&l.peer)
		}
		s.tried = s.triedBuf[:0]
		l.track(s)
		l.connect(s)
		// The client's first bytes usually came with its handshake: they
		// go out now, and only then is its socket registered, which
		// reports whatever arrived since (so a short read here has
		// emptied it).
		if s.closed || !l.pump(s, &s.in, s.cfd, s.sfd, "in", srcEdge) {
			continue
		}
		if err := l.ctl(unix.EPOLL_CTL_ADD, fd, sessionEvents, s.id); err != nil {
			x.pool.log.Warn("proxy: register client", "err", err)
			l.closeSession(s)
		}
	}
}

// track adds a new session (its client socket only so far) to the loop.
func (l *loop) track(s *session) {
	l.setFD(s.cfd, s)
	s.idx = len(l.live)
	l.live = append(l.live, s)
}

func (l *loop) setFD(fd int, s *session) {
	if fd >= len(l.byFD) {
		l.byFD = append(l.byFD, make([]*session, fd+1-len(l.byFD)+64)...)
	}
	l.byFD[fd] = s
}

// sweep enforces the timeouts: connect, idle, and idle after a half-close.
func (l *loop) sweep() {
	if l.acceptPaused != 0 && l.acceptPaused <= l.now && l.lfd >= 0 {
		if l.ctl(unix.EPOLL_CTL_ADD, l.lfd, unix.EPOLLIN, 0) == nil {
			l.acceptPaused = 0
		}
	}
	var due []*session
	for _, s := range l.live {
		if expired(s.connecting, s.in.eof || s.out.eof, s.last, s.connectBy, l.now, l.x.opts) {
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

// expired says whether a session is past its timeout at now (all times in
// loop nanoseconds): a connect still under way at connectBy; otherwise no
// byte moved (last) for IdleTimeout, or for FinTimeout once one side
// half-closed (never longer than IdleTimeout).
func expired(connecting, halfClosed bool, last, connectBy, now int64, o ProxyOptions) bool {
	switch {
	case connecting:
		return now >= connectBy
	case halfClosed:
		return now-last >= int64(min(o.FinTimeout, o.IdleTimeout))
	}
	return now-last >= int64(o.IdleTimeout)
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
