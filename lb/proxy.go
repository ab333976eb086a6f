package lb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ProxyOptions bound what one pool's proxy holds open.
type ProxyOptions struct {
	// MaxConns is the most client connections open at once; a connection
	// beyond it is reset at once rather than queued.
	MaxConns int
	// ConnectTimeout bounds one dial to a backend.
	ConnectTimeout time.Duration
	// Retries is how many other backends are tried after a dial fails.
	Retries int
	// IdleTimeout closes a session in which no byte moved either way for
	// this long.
	IdleTimeout time.Duration
	// FinTimeout closes a session this long after one side finished
	// sending (half-close) if nothing moved since: a client that sent FIN
	// and vanished cannot hold a slot for IdleTimeout.
	FinTimeout time.Duration
	// KeepAlive is the TCP keepalive idle time on client sockets (set on
	// the default listener, inherited by accepted sockets), so that a client
	// that vanished without FIN or RST is noticed; negative disables it.
	KeepAlive time.Duration
}

// DefaultProxyOptions: the connection limit of OpenShift's haproxy
// (maxconn 20000), its connect timeout (10 s), an hour of idleness (API
// watches send bookmarks well within it) and 30 s after a half-close.
func DefaultProxyOptions() ProxyOptions {
	return ProxyOptions{
		MaxConns:       20000,
		ConnectTimeout: 10 * time.Second,
		Retries:        2,
		IdleTimeout:    time.Hour,
		FinTimeout:     30 * time.Second,
		KeepAlive:      30 * time.Second,
	}
}

func (o *ProxyOptions) fill() {
	d := DefaultProxyOptions()
	if o.MaxConns <= 0 {
		o.MaxConns = d.MaxConns
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = d.ConnectTimeout
	}
	if o.Retries < 0 {
		o.Retries = 0
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = d.IdleTimeout
	}
	if o.FinTimeout <= 0 {
		o.FinTimeout = d.FinTimeout
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = d.KeepAlive
	}
}

// window is how often a blocked copy wakes to look at the session's
// activity: often enough to enforce the shorter timeout within a quarter of
// it, rarely enough to cost nothing on many idle sessions.
func (o ProxyOptions) window() time.Duration {
	w := min(o.IdleTimeout, o.FinTimeout) / 4
	return max(10*time.Millisecond, min(w, 5*time.Second))
}

// DialFunc opens a connection to a backend; it must return a *net.TCPConn.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// maxParked bounds the goroutines kept parked for reuse. A connection's
// goroutines run deep call chains (dial, splice); a fresh goroutine grows
// its stack by copying on every connection, a reused one keeps it. The
// bound keeps an idle proxy small.
const maxParked = 64

// proxy accepts clients on one listener and splices them to a pool.
type proxy struct {
	pool   *Pool
	opts   ProxyOptions
	dial   DialFunc
	ln     *net.TCPListener
	active atomic.Int64   // open client connections, for the limit
	wg     sync.WaitGroup // one per accepted connection until its session ends
	ctx    context.Context

	tasks  chan task     // hands work to a parked goroutine
	done   chan struct{} // closed when serve returns: parked goroutines exit
	parked atomic.Int32
}

// task is work for a goroutine: serve a new client (c), or copy a
// session's client-to-backend direction (s).
type task struct {
	c *net.TCPConn
	s *session
}

func (x *proxy) serve(ctx context.Context) error {
	x.ctx = ctx
	x.tasks = make(chan task)
	x.done = make(chan struct{})
	defer close(x.done)
	var backoff time.Duration
	for {
		c, err := x.ln.AcceptTCP()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of file descriptors and the like: back off, keep serving.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			x.pool.log.Warn("accept", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		if x.active.Add(1) > int64(x.opts.MaxConns) {
			x.active.Add(-1)
			_ = c.SetLinger(0) // RST: the client learns at once, no TIME_WAIT here
			_ = c.Close()
			inc(x.pool.conns.limit)
			continue
		}
		x.wg.Add(1)
		x.spawn(task{c: c})
	}
}

// spawn runs t on a parked goroutine if one is waiting, else on a new one.
func (x *proxy) spawn(t task) {
	select {
	case x.tasks <- t:
	default:
		go x.work(t)
	}
}

// work runs t, then parks for more while few goroutines are parked.
func (x *proxy) work(t task) {
	for {
		if t.s != nil {
			x.pipe(t.s, t.s.server, t.s.client, &t.s.in, "in")
			x.finish(t.s)
		} else {
			x.handle(t.c)
		}
		if x.parked.Add(1) > maxParked {
			x.parked.Add(-1)
			return
		}
		select {
		case t = <-x.tasks:
			x.parked.Add(-1)
		case <-x.done:
			x.parked.Add(-1)
			return
		}
	}
}

// handle connects one client to a backend and copies the backend-to-client
// direction; the session ends when the last direction finishes.
func (x *proxy) handle(client *net.TCPConn) {
	p := x.pool
	var tried []*backend
	for range x.opts.Retries + 1 {
		b := p.pick(tried)
		if b == nil {
			break
		}
		server, err := x.dialBackend(x.ctx, b.Addr)
		if err != nil {
			p.release(b)
			tried = append(tried, b)
			p.log.Debug("dial backend", "backend", b.Name, "err", err)
			continue
		}
		inc(p.conns.proxied)
		x.run(client, server, b)
		return
	}
	if len(tried) == 0 {
		inc(p.conns.noBackend)
	} else {
		inc(p.conns.dialFailed)
	}
	_ = client.SetLinger(0)
	_ = client.Close()
	x.active.Add(-1)
	x.wg.Done()
}

func (x *proxy) dialBackend(ctx context.Context, addr string) (*net.TCPConn, error) {
	dctx, cancel := context.WithTimeout(ctx, x.opts.ConnectTimeout)
	defer cancel()
	c, err := x.dial(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		_ = c.Close()
		return nil, fmt.Errorf("lb: dial %s: got %T, want *net.TCPConn (splice needs both ends raw)", addr, c)
	}
	return tc, nil
}

// session is one client spliced to one backend.
type session struct {
	client, server *net.TCPConn
	crc, brc       syscall.RawConn // client's and backend's, made once for both directions
	in, out        splicer         // client to backend, backend to client
	b              *backend
	last           atomic.Int64 // unix nanos of the last byte moved either way
	finSeen        atomic.Bool  // one side has half-closed
	copying        atomic.Int32 // directions still copying; the last one ends the session
	closeOnce      sync.Once
}

func (s *session) close() {
	s.closeOnce.Do(func() {
		_ = s.client.Close()
		_ = s.server.Close()
	})
}

// run starts a session: the client-to-backend copy on another goroutine,
// the backend-to-client copy on this one. Neither waits for the other;
// whichever finishes last closes the session, so no goroutine parks only
// to wait.
func (x *proxy) run(client, server *net.TCPConn, b *backend) {
	s := &session{client: client, server: server, b: b}
	var cerr, serr error
	s.crc, cerr = client.SyscallConn()
	s.brc, serr = server.SyscallConn()
	if cerr != nil || serr != nil {
		// Only a closed socket has no raw access; nothing to proxy then.
		s.close()
		x.pool.release(b)
		x.active.Add(-1)
		x.wg.Done()
		return
	}
	s.in.init(s.brc, s.crc)
	s.out.init(s.crc, s.brc)
	s.copying.Store(2)
	s.last.Store(time.Now().UnixNano())
	x.pool.addSession(s)
	b.m.addActive(1)
	x.spawn(task{s: s})
	x.pipe(s, client, server, &s.out, "out")
	x.finish(s)
}

// finish ends s once both directions are done.
func (x *proxy) finish(s *session) {
	if s.copying.Add(-1) != 0 {
		return
	}
	s.close()
	s.b.m.addActive(-1)
	x.pool.endSession(s)
	x.active.Add(-1)
	x.wg.Done()
}

// pipe moves src's bytes to dst until src's FIN, an error, or a timeout.
//
// The bytes go socket → pipe → socket with splice(2), inside the kernel;
// nothing wraps either connection. Timeouts are therefore enforced with
// deadlines instead of a counting reader: the read deadline wakes the copy
// every window, the bytes it moved so far come back as its count, and the
// session is closed once nothing moved for the applicable timeout.
func (x *proxy) pipe(s *session, dst, src *net.TCPConn, sp *splicer, dir string) {
	p := x.pool
	window := x.opts.window()
	for {
		limit := x.opts.IdleTimeout
		if s.finSeen.Load() {
			limit = x.opts.FinTimeout
		}
		now := time.Now()
		wdl := now.Add(limit)
		_ = src.SetReadDeadline(now.Add(window))
		// A write stalled for the whole limit means the reader is gone.
		_ = dst.SetWriteDeadline(wdl)
		n, err := sp.copy()
		if n > 0 {
			s.last.Store(time.Now().UnixNano())
			s.b.m.addBytes(dir, n)
		}
		if err == nil { // src sent FIN: pass it on, keep the other way open
			s.finSeen.Store(true)
			// Also after the second FIN: the FIN then leaves here, as a
			// raw call, rather than inside the session's close.
			_ = sp.closeWrite()
			return
		}
		// Both deadlines surface as the same error; only the read one is
		// resumable (the splice pipe is empty between reads, while a write
		// timeout may have stranded bytes in it), and it is the only one that
		// can have passed while the write deadline lies ahead.
		if errors.Is(err, os.ErrDeadlineExceeded) && time.Now().Before(wdl) {
			if s.finSeen.Load() {
				limit = x.opts.FinTimeout
			}
			if time.Since(time.Unix(0, s.last.Load())) < limit {
				continue
			}
			p.log.Debug("session timed out", "backend", s.b.Name, "half_closed", s.finSeen.Load())
		}
		s.close()
		return
	}
}
