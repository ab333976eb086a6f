package lb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"appliance/internal/cluster"
)

// PoolOptions describe one balanced service.
type PoolOptions struct {
	// Disabled leaves the pool out.
	Disabled bool
	// Listen is the proxy's address, e.g. ":9445".
	Listen string
	// BackendPort is the port of the service on every member.
	BackendPort uint16
	// VIPPort is the port on the VIPs redirected to the proxy; 0: none.
	VIPPort uint16
	// CheckPath is the HTTPS path probed on each backend.
	CheckPath string
}

// Options configure the load balancer. Zero fields take the defaults of
// DefaultOptions.
type Options struct {
	API PoolOptions
	MCS PoolOptions
	// Balance is RoundRobin or LeastConnections.
	Balance string
	Health  HealthOptions
	Proxy   ProxyOptions
	// DrainTimeout bounds how long Run waits, once ctx ends, for open
	// sessions to finish before closing them.
	DrainTimeout time.Duration
	// Redirect manages the nftables VIP redirect.
	Redirect bool
	// Table is the nftables table; "" means DefaultTable.
	Table string
	// NetNS is the path of the network namespace whose nftables the
	// redirect changes and in which the proxy connects to backends; ""
	// means this process's own.
	NetNS string
	// Dial opens the health checks' connections; nil means a plain dial.
	// (The proxy's loops open their own non-blocking sockets, in NetNS.)
	Dial DialFunc
	// Listen opens the proxies' listeners; nil means net.Listen. It must
	// return *net.TCPListener.
	Listen func(network, addr string) (net.Listener, error)
	// Self returns this node's own address of a family (IPv6 when v6),
	// never a VIP. IPv6 VIP traffic is sent to it rather than redirected:
	// the kernel's IPv6 redirect picks the interface's first global
	// address, the VIP itself while it is there, which binds the sessions
	// to the VIP, so they die with it when it moves (no drain, no
	// handback). nil, or no address: redirect.
	Self func(v6 bool) (netip.Addr, bool)
}

// DefaultOptions: the API on :9445 (as OpenShift's LB) for VIP:6443,
// checked with GET /readyz; the MCS on :9446 for VIP:22623 (22624 is the
// MCS's own plain-HTTP port), checked with GET /healthz; round-robin.
func DefaultOptions() Options {
	return Options{
		API:          PoolOptions{Listen: ":9445", BackendPort: 6443, VIPPort: 6443, CheckPath: "/readyz"},
		MCS:          PoolOptions{Listen: ":9446", BackendPort: 22623, VIPPort: 22623, CheckPath: "/healthz"},
		Balance:      RoundRobin,
		Health:       DefaultHealthOptions(),
		Proxy:        DefaultProxyOptions(),
		DrainTimeout: 10 * time.Second,
		Redirect:     true,
	}
}

// FromCluster applies the config's lb section to base, the options the
// caller chose (DefaultOptions and its flags): lb.mcs false leaves the MCS
// pool out, lb.redirect false the VIP redirect (neither turns back on what
// base turned off), and lb.balance is the algorithm ("" takes the
// default). It is the one place that section reaches the LB; a flag that
// overrides the file is applied to what it returns.
func FromCluster(cfg *cluster.Config, base Options) (Options, error) {
	if cfg == nil {
		return base, errors.New("lb: no cluster config")
	}
	switch b := cfg.LB.Balance; b {
	case "", RoundRobin, LeastConnections:
	default:
		return base, fmt.Errorf("lb: lb.balance: %q is not an algorithm; want %s or %s", b, RoundRobin, LeastConnections)
	}
	o := base
	o.MCS.Disabled = o.MCS.Disabled || !cfg.LB.MCS
	o.Balance = cfg.LB.Balance
	o.Redirect = o.Redirect && cfg.LB.Redirect
	return o, nil
}

func (o *Options) fill() error {
	d := DefaultOptions()
	fillPool := func(p *PoolOptions, d PoolOptions) {
		if p.Listen == "" {
			p.Listen = d.Listen
		}
		if p.BackendPort == 0 {
			p.BackendPort = d.BackendPort
		}
		if p.CheckPath == "" {
			p.CheckPath = d.CheckPath
		}
	}
	fillPool(&o.API, d.API)
	fillPool(&o.MCS, d.MCS)
	switch o.Balance {
	case "":
		o.Balance = d.Balance
	case RoundRobin, LeastConnections:
	default:
		return fmt.Errorf("lb: balance %q: want %s or %s", o.Balance, RoundRobin, LeastConnections)
	}
	o.Health.fill()
	o.Proxy.fill()
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = d.DrainTimeout
	}
	if o.Dial == nil {
		// No keepalive on backend sockets: a backend that vanished fails
		// its checks, and the sessions of a down backend are closed.
		o.Dial = defaultDial
	}
	if o.Listen == nil {
		o.Listen = keepAliveListen(o.Proxy.KeepAlive)
	}
	return nil
}

// defaultDial opens the health checks' connections.
var defaultDial = (&net.Dialer{KeepAlive: -1}).DialContext

// keepAliveListen returns a listen function whose listener carries the
// keepalive settings itself: Linux copies them to every accepted socket, so
// the connection path makes no setsockopt call for them (the runtime's own
// per-connection keepalive is turned off).
func keepAliveListen(idle time.Duration) func(network, addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	if idle > 0 {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				for _, o := range [][3]int{
					{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
					{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, max(1, int(idle/time.Second))},
					{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, max(1, int(idle/3/time.Second))},
					{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 3},
				} {
					if e := unix.SetsockoptInt(int(fd), o[0], o[1], o[2]); e != nil && serr == nil {
						serr = fmt.Errorf("lb: keepalive setsockopt: %w", e)
					}
				}
			})
			if err != nil {
				return err
			}
			return serr
		}
	}
	return func(network, addr string) (net.Listener, error) {
		return lc.Listen(context.Background(), network, addr)
	}
}
