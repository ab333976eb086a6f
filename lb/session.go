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
		b := p.pick(s.tried, s.fam)
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
			l.pump(s, &s.in, s.cfd, s.sfd, "in", srcUnknown)
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
	l.passFin(s, &s.in, s.sfd)
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
	known := srcEdge
	if ev&(unix.EPOLLRDHUP|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		known = srcEnded
	}
	if fd == s.cfd {
		// Also while the backend connects: the bytes go out at once if
		// its handshake is done (on a local network it usually is, though
		// connect said EINPROGRESS), else they wait in the pipe.
		if readable && !l.pump(s, &s.in, s.cfd, s.sfd, "in", known) {
			return
		}
		if writable && s.out.pending() {
			l.pump(s, &s.out, s.sfd, s.cfd, "out", srcUnknown)
		}
		return
	}
	if readable && !l.pump(s, &s.out, s.sfd, s.cfd, "out", known) {
		return
	}
	if writable && s.in.pending() {
		l.pump(s, &s.in, s.cfd, s.sfd, "in", srcUnknown)
	}
}

// srcState is what pump knows of its source socket when it starts.
type srcState uint8

const (
	// srcUnknown: no readable event (pump runs to write): read until
	// EAGAIN.
	srcUnknown srcState = iota
	// srcEdge: a readable event that reported no FIN, hang-up or error
	// (or a socket not yet registered, whose registration will report
	// what arrives meanwhile). A read of fewer bytes than the pipe has
	// slots has emptied the socket: it was not cut short by a full pipe
	// (every slot holds at least a byte) nor by a FIN (the event would
	// have said so, and a FIN that arrives after it raises a new one),
	// and anything that arrives later raises a new edge. pump then skips
	// the read that would only return EAGAIN.
	srcEdge
	// srcEnded: the event reported the source's FIN (or a hang-up or
	// error). pump reads to the end before passing anything on, and the
	// last bytes go out corked, so that the FIN leaves in their segment
	// rather than in one of its own: a server that answers and closes at
	// once, as HTTP/1.0-style servers and TLS close_notify do, costs the
	// client one segment and one acknowledgement less.
	srcEnded
)

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
// FIN, which it passes on with shutdown once the pipe is empty (passFin).
// known says what the event that runs it reported of src. It returns
// false when the session ended.
func (l *loop) pump(s *session, d *direction, src, dst int, dir string, known srcState) bool {
	var moved int64
	var fail, readErr unix.Errno
	if known == srcEnded && !d.eof {
		readErr = l.gather(d, src)
	}
	drained := false
	for {
		l.passFin(s, d, dst)
		if d.pending() {
			var more uintptr
			if d.finDue {
				more = unix.SPLICE_F_MORE // the FIN follows at once
			}
			n, e := rawSplice(d.p.r, dst, d.p.data, more)
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
		if d.eof || drained || readErr != 0 {
			break
		}
		if fail = l.ensurePipe(d); fail != 0 {
			break
		}
		n, e := rawSplice(src, d.p.w, maxSplice, 0)
		if n > 0 {
			d.p.data += n
			drained = known == srcEdge && n < d.p.slots
			continue
		}
		if e == unix.EAGAIN {
			break
		}
		if e != 0 {
			fail = e
			break
		}
		d.eof, d.finDue = true, true
	}
	if fail == 0 {
		fail = readErr // what src said after the bytes that went out
	}
	if d.p != nil && d.p.data == 0 {
		l.putPipe(d.p) // hold no pipe while waiting
		d.p = nil
	}
	if moved > 0 {
		s.last = l.now
		s.b.m.addBytes(dir, moved)
	}
	if fail != 0 || (s.in.done() && s.out.done()) {
		if fail != 0 && fail != unix.ECONNRESET && fail != unix.EPIPE && l.debugging() {
			l.x.pool.log.Debug("proxy: splice", "backend", s.b.Name, "err", fail)
		}
		l.closeSession(s)
		return false
	}
	return true
}

// gather reads src into d's pipe until EAGAIN, its end (the FIN: d.eof
// and d.finDue) or a full pipe; it returns src's error, if any, for after
// the bytes read before it went out.
func (l *loop) gather(d *direction, src int) unix.Errno {
	if e := l.ensurePipe(d); e != 0 {
		return e
	}
	for {
		n, e := rawSplice(src, d.p.w, maxSplice, 0)
		switch {
		case n > 0:
			d.p.data += n
		case e == unix.EAGAIN:
			return 0
		case e != 0:
			return e
		default:
			d.eof, d.finDue = true, true
			return 0
		}
	}
}

// ensurePipe gives d a pipe for the bytes it is about to read.
func (l *loop) ensurePipe(d *direction) unix.Errno {
	if d.p != nil {
		return 0
	}
	var err error
	if d.p, err = l.getPipe(); err != nil {
		l.x.pool.log.Warn("proxy: pipe", "err", err)
		return unix.EMFILE
	}
	return 0
}

// passFin passes d's FIN on to dst once the bytes before it have gone.
// Not when the other direction has finished too (the close sends the
// FIN), nor to a backend still connecting (a shutdown would abort the
// connect; confirm passes it on).
func (l *loop) passFin(s *session, d *direction, dst int) {
	if !d.finDue || d.pending() || s.connecting {
		return
	}
	d.finDue = false
	if !(s.in.done() && s.out.done()) {
		_, _, _ = unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(dst), unix.SHUT_WR, 0)
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
	born       int64     // loop time it was accepted
	connectBy  int64
	idx        int    // in l.live
	fam        Family // the client's: its backend's must match (FamilyAny: single-stack)
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
// whether its source has finished, and whether that FIN is still to be
// passed on.
type direction struct {
	p      *kpipe
	eof    bool
	finDue bool
}

func (d *direction) pending() bool { return d.p != nil && d.p.data > 0 }

// done says the source finished and every byte it sent has gone out.
func (d *direction) done() bool { return d.eof && !d.pending() }
