package lb

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A session's life on its loop: the backend connect and its retries, the
// copy in each direction, the FIN pass-on, the close.

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
