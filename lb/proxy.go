package lb

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
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
// (maxconn 20000), an hour of idleness (API watches send bookmarks well
// within it), 30 s after a half-close, and a 2 s connect timeout where
// haproxy waits 10 s: a backend on the machine network answers a SYN in
// well under a millisecond, so one that has not after one SYN retransmission
// (1 s) is dead or drowning, and the next backend is tried. A master that
// dies then costs the clients the LB had just sent to it 2 s, not 10 (they
// would mostly time out first).
func DefaultProxyOptions() ProxyOptions {
	return ProxyOptions{
		MaxConns:       20000,
		ConnectTimeout: 2 * time.Second,
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

// sweep is how often a loop looks for sessions past a timeout: often
// enough to enforce the shortest within a quarter of it, rarely enough to
// cost nothing on many idle sessions.
func (o ProxyOptions) sweep() time.Duration {
	w := min(o.IdleTimeout, o.FinTimeout, o.ConnectTimeout) / 4
	return max(10*time.Millisecond, min(w, 5*time.Second))
}

// DialFunc opens a connection to a backend for a health check.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// proxy accepts clients on one listener and splices them to a pool, on
// one event loop per processor (loop.go).
type proxy struct {
	pool  *Pool
	opts  ProxyOptions
	ln    *net.TCPListener
	enter func() error // nil, or enters the network namespace backends are dialled in
	// byFamily: dual-stack, each client goes to a backend of its own
	// family, read from the address accept returns.
	byFamily bool
	active   atomic.Int64   // open client connections, for the limit
	wg       sync.WaitGroup // one per running loop: done once it stopped accepting and its sessions ended

	mu    sync.Mutex
	loops []*loop
}

// start starts the loops.
func (x *proxy) start() error {
	rc, err := x.ln.SyscallConn()
	if err != nil {
		return fmt.Errorf("lb: %s: listener: %w", x.pool.name, err)
	}
	var loops []*loop
	cerr := rc.Control(func(fd uintptr) {
		// Accepted sockets inherit it: the proxy passes on small writes
		// (TLS records) at once, and sets nothing per connection. Best
		// effort.
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		for range runtime.GOMAXPROCS(0) {
			l, lerr := newLoop(x, int(fd))
			if lerr != nil {
				err = lerr
				return
			}
			loops = append(loops, l)
		}
	})
	if cerr == nil && err != nil {
		cerr = err
	}
	if cerr != nil {
		for _, l := range loops {
			l.release()
		}
		return fmt.Errorf("lb: %s: start proxy: %w", x.pool.name, cerr)
	}
	x.mu.Lock()
	x.loops = loops
	x.mu.Unlock()
	for _, l := range loops {
		x.wg.Add(1)
		go func() {
			defer x.wg.Done()
			l.run()
		}()
	}
	return nil
}

// stopAccepting makes the loops leave the listener; open sessions go on
// until they end or closeAll, and wg is done once they have.
func (x *proxy) stopAccepting() { x.postAll((*loop).stopAccepting) }

// closeAll ends every open session now.
func (x *proxy) closeAll() { x.postAll((*loop).closeAll) }

// closeBornBefore ends the sessions of clients of family fam (FamilyAny:
// all) accepted before t, as each loop gets to it.
func (x *proxy) closeBornBefore(fam Family, t time.Time) {
	x.postAll(func(l *loop) { l.closeBornBefore(fam, t) })
}

// postAll runs f on every loop, each on its own goroutine.
func (x *proxy) postAll(f func(*loop)) {
	x.mu.Lock()
	loops := x.loops
	x.mu.Unlock()
	for _, l := range loops {
		l.post(func() { f(l) })
	}
}

// enterNetNS returns what moves the calling, locked thread into the network
// namespace at path; nil when path is "" (stay where the process is).
func enterNetNS(path string) func() error {
	if path == "" {
		return nil
	}
	return func() error {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("lb: open network namespace %s: %w", path, err)
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("lb: enter network namespace %s: %w", path, err)
		}
		return nil
	}
}
