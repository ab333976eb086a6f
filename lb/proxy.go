package lb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
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

// proxy accepts clients on one listener and splices them to a pool.
type proxy struct {
	pool   *Pool
	opts   ProxyOptions
	dial   DialFunc
	ln     *net.TCPListener
	active atomic.Int64
	wg     sync.WaitGroup
}

func (x *proxy) serve(ctx context.Context) error {
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
			x.pool.metrics.conn(x.pool.name, "limit")
			continue
		}
		x.wg.Add(1)
		go func() {
			defer x.wg.Done()
			defer x.active.Add(-1)
			x.handle(ctx, c)
		}()
	}
}

// handle connects one client to a backend and splices until both are done.
func (x *proxy) handle(ctx context.Context, client *net.TCPConn) {
	p := x.pool
	var tried []*backend
	for range x.opts.Retries + 1 {
		b := p.pick(tried)
		if b == nil {
			break
		}
		server, err := x.dialBackend(ctx, b.Addr)
		if err != nil {
			p.release(b)
			tried = append(tried, b)
			p.log.Debug("dial backend", "backend", b.Name, "err", err)
			continue
		}
		p.metrics.conn(p.name, "proxied")
		x.run(client, server, b)
		p.release(b)
		return
	}
	if len(tried) == 0 {
		p.metrics.conn(p.name, "no_backend")
	} else {
		p.metrics.conn(p.name, "dial_failed")
	}
	_ = client.SetLinger(0)
	_ = client.Close()
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
	b              *backend
	last           atomic.Int64 // unix nanos of the last byte moved either way
	finSeen        atomic.Bool  // one side has half-closed
	closeOnce      sync.Once
}

func (s *session) close() {
	s.closeOnce.Do(func() {
		_ = s.client.Close()
		_ = s.server.Close()
	})
}

func (x *proxy) run(client, server *net.TCPConn, b *backend) {
	p := x.pool
	s := &session{client: client, server: server, b: b}
	s.last.Store(time.Now().UnixNano())
	p.addSession(s)
	b.m.addActive(1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		x.pipe(s, server, client, "in")
	}()
	x.pipe(s, client, server, "out")
	wg.Wait()
	s.close()
	b.m.addActive(-1)
	p.removeSession(s)
}

// pipe moves src's bytes to dst until src's FIN, an error, or a timeout.
//
// dst.ReadFrom(src) with both ends *net.TCPConn is what makes the runtime
// use splice(2): bytes go socket → pipe → socket inside the kernel. Nothing
// may wrap either connection. Timeouts are therefore enforced with
// deadlines instead of a counting reader: the read deadline wakes the copy
// every window, the bytes it moved so far come back as its count, and the
// session is closed once nothing moved for the applicable timeout.
func (x *proxy) pipe(s *session, dst, src *net.TCPConn, dir string) {
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
		n, err := dst.ReadFrom(src)
		if n > 0 {
			s.last.Store(time.Now().UnixNano())
			s.b.m.addBytes(dir, n)
		}
		if err == nil { // src sent FIN: pass it on, keep the other way open
			if !s.finSeen.Swap(true) {
				// The first FIN; after the second, run closes both anyway.
				_ = dst.CloseWrite()
			}
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
