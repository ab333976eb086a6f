package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coredns/caddy"
	coredns "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/forward"
	"github.com/prometheus/client_golang/prometheus"

	"appliance/internal/cluster"
)

// Defaults for Options.
const (
	DefaultListen     = ":53"
	DefaultTTL        = 30 // seconds, for cluster records
	DefaultCacheTTL   = 30 // seconds, cap for cached upstream answers
	DefaultResolvPoll = 5 * time.Second
)

// ednsBufSize is the EDNS0 buffer size advertised (bufsize directive, and
// the refusals of the access plugin): 1232 bytes avoids IP fragmentation.
const ednsBufSize = 1232

// Options are the DNS service's settings beyond the cluster model.
type Options struct {
	// Listen is host:port for UDP and TCP; default DefaultListen.
	Listen string
	// TTL of cluster records in seconds; default DefaultTTL.
	TTL uint32
	// CacheTTL caps cached upstream answers in seconds; default
	// DefaultCacheTTL, negative disables the cache.
	CacheTTL int
	// QueryLog logs every query.
	QueryLog bool
	// ResolvConf is read for upstreams when the config gives none; default
	// NetworkManager's resolv.conf when present, else /etc/resolv.conf.
	ResolvConf string
	// ResolvPoll is how often ResolvConf and the local addresses are checked
	// for a change of upstreams; default DefaultResolvPoll.
	ResolvPoll time.Duration
	// LocalAddrs lists the node's own addresses, which are never upstreams;
	// default: every address of every interface. Run calls it from its own
	// goroutine, so the default reads the process's (root) namespace; tests
	// in lab namespaces set network.upstreamDNS instead.
	LocalAddrs func() ([]netip.Addr, error)
	// MDNS configures multicast DNS discovery; off unless Enabled.
	MDNS MDNSOptions
	// NoFastPath leaves every UDP query to the plugin chain (the fast path
	// answers cluster names before it otherwise); for comparing the two.
	NoFastPath bool
}

func (o *Options) defaults() {
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.CacheTTL == 0 {
		o.CacheTTL = DefaultCacheTTL
	}
	if o.CacheTTL < 0 {
		o.CacheTTL = 0
	}
	if o.ResolvPoll <= 0 {
		o.ResolvPoll = DefaultResolvPoll
	}
	if o.LocalAddrs == nil {
		o.LocalAddrs = localAddrs
	}
	if o.ResolvConf == "" {
		o.ResolvConf = defaultResolvConf()
	}
}

// Server is the cluster DNS service: an embedded CoreDNS instance with the
// cluster plugin, forwarding everything else to the upstreams.
type Server struct {
	cfg     *cluster.Config
	state   *cluster.State
	opts    Options
	log     *slog.Logger
	zone    zoneData
	clients clientNets // who is answered; everyone else is refused
	metrics *metrics
	id      uint64

	// fwd is the forwarder the upstream directive uses; swapped, never
	// restarted, when the upstreams change.
	fwd atomic.Pointer[forward.Forward]

	mdns *MDNS // nil unless enabled

	// core is CoreDNS's server for this instance, caught when it starts
	// serving UDP; the fast path passes it what it does not answer.
	core atomic.Pointer[coredns.Server]

	mu        sync.Mutex
	started   bool
	inst      *caddy.Instance
	upstreams []netip.AddrPort
	udp, tcp  net.Addr
	fast      *fastListener // nil with NoFastPath
	// fwdCache holds the chain's replies to forwarded names for the fast
	// path; nil with NoFastPath or without a cache (CacheTTL).
	fwdCache *forwardCache
	// retired are replaced forwarders still serving queries in flight, each
	// with the timer that shuts it down; stop shuts them down at once, so
	// no health-check goroutine outlives the server.
	retired map[*forward.Forward]*time.Timer
}

// New checks the configuration and prepares a server; Run starts it.
func New(cfg *cluster.Config, state *cluster.State, opts Options, log *slog.Logger) (*Server, error) {
	if cfg == nil || state == nil {
		return nil, errors.New("dns: a cluster config and state are required")
	}
	if cfg.Cluster.Name == "" || cfg.Cluster.BaseDomain == "" {
		return nil, errors.New("dns: cluster.name and cluster.baseDomain are required for the cluster zone")
	}
	if n := len(cfg.Network.UpstreamDNS); n > maxUpstreams {
		return nil, fmt.Errorf("dns: network.upstreamDNS lists %d resolvers; CoreDNS's forward takes at most %d, keep the first %d", n, maxUpstreams, maxUpstreams)
	}
	if err := setupOnce(); err != nil {
		return nil, err
	}
	opts.defaults()
	if _, err := Corefile(CorefileParams{Listen: opts.Listen, Zone: cfg.Cluster.Domain()}); err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, state: state, opts: opts, log: log.With("component", "dns"),
		zone: newZoneData(cfg, opts.TTL), clients: newClientNets(cfg), metrics: newMetrics(),
	}
	// With QueryLog the chain logs every forwarded query: no cache hides them.
	if !opts.NoFastPath && opts.CacheTTL > 0 && !opts.QueryLog {
		s.fwdCache = newForwardCache(fwdDefaultEntries, fwdDefaultBytes, uint32(opts.CacheTTL))
	}
	if opts.MDNS.Enabled {
		d, err := NewMDNS(cfg, state, opts.MDNS, log)
		if err != nil {
			return nil, err
		}
		d.m = s.metrics
		s.mdns = d
	}
	return s, nil
}

// Collectors are the server's own Prometheus collectors. CoreDNS's request,
// cache and forward metrics live in prometheus.DefaultRegisterer.
func (s *Server) Collectors() []prometheus.Collector { return s.metrics.collectors() }

// Addr returns the UDP and TCP addresses served, nil before Run has started
// the listeners.
func (s *Server) Addr() (udp, tcp net.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.udp, s.tcp
}

// Upstreams returns the resolvers currently forwarded to.
func (s *Server) Upstreams() []netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.upstreams)
}

// Ready reports nil once the server answers queries.
func (s *Server) Ready() error {
	if udp, _ := s.Addr(); udp == nil {
		return errors.New("dns: not serving yet")
	}
	return nil
}

// Start opens the listeners in the caller's network namespace and begins
// serving. Run calls it when it has not been called. (mDNS opens its sockets
// in Run, in MDNSOptions.NetNS, as it re-opens them when the node's
// interface changes.)
func (s *Server) Start() error {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if started {
		return errors.New("dns: already started")
	}
	ups, err := s.currentUpstreams()
	if err != nil {
		return err
	}
	s.id = registerInstance(s)
	if err := s.start(ups); err != nil {
		unregisterInstance(s.id)
		return err
	}
	s.mu.Lock()
	s.started = true
	s.mu.Unlock()
	return nil
}

// Run serves until ctx ends, re-reading the upstreams every ResolvPoll and
// switching to them when they change; then it closes its listeners.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if !started {
		if err := s.Start(); err != nil {
			return err
		}
	}
	defer unregisterInstance(s.id)
	defer s.stop()

	var mdnsErr chan error
	if s.mdns != nil {
		mdnsErr = make(chan error, 1)
		mctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { mdnsErr <- s.mdns.Run(mctx) }()
	}

	t := time.NewTicker(s.opts.ResolvPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if mdnsErr != nil {
				<-mdnsErr
			}
			return nil
		case err := <-mdnsErr:
			return err
		case <-t.C:
			ups, err := s.currentUpstreams()
			if err != nil {
				s.log.Error("keeping the current upstreams", "err", err)
				continue
			}
			if !slices.Equal(ups, s.Upstreams()) {
				if err := s.SetUpstreams(ups); err != nil {
					s.log.Error("upstream change not applied", "err", err)
				}
			}
		}
	}
}

// currentUpstreams is the configured upstreams, or resolv.conf minus the
// node's own addresses.
func (s *Server) currentUpstreams() ([]netip.AddrPort, error) {
	if len(s.cfg.Network.UpstreamDNS) > 0 {
		return s.cfg.Network.UpstreamDNS, nil
	}
	data, err := os.ReadFile(s.opts.ResolvConf)
	if err != nil {
		return nil, fmt.Errorf("dns: read upstreams: %w; set network.upstreamDNS", err)
	}
	own, err := s.opts.LocalAddrs()
	if err != nil {
		return nil, err
	}
	return selectUpstreams(parseResolvConf(data), own, s.opts.ResolvConf)
}

func (s *Server) corefile(listen string) (caddy.Input, error) {
	text, err := Corefile(CorefileParams{
		Listen: listen, Zone: s.cfg.Cluster.Domain(), Instance: s.id,
		CacheTTL: s.opts.CacheTTL, BufSize: ednsBufSize, QueryLog: s.opts.QueryLog,
	})
	if err != nil {
		return nil, err
	}
	return caddy.CaddyfileInput{Filepath: "appliance-generated", Contents: []byte(text), ServerTypeName: "dns"}, nil
}

// start starts the server. With port 0 the fast path picks a free UDP
// port and CoreDNS binds TCP on the same number, which another process may
// hold: then it tries another port, a few times.
func (s *Server) start(ups []netip.AddrPort) error {
	_, port, _ := net.SplitHostPort(s.opts.Listen)
	for attempt := 1; ; attempt++ {
		err := s.startOn(ups)
		if err == nil || port != "0" || attempt == 5 || !addrInUse(err) {
			return err
		}
		s.log.Debug("the port picked for UDP is taken for TCP; picking another", "err", err)
	}
}

// addrInUse reports whether err is a bind's EADDRINUSE (CoreDNS's server
// setup may have kept only its text).
func addrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

func (s *Server) startOn(ups []netip.AddrPort) error {
	listen := s.opts.Listen
	var fast *fastListener
	if !s.opts.NoFastPath {
		// Bound before CoreDNS's socket, so the fast path's sockets come
		// first in the port's reuseport group (see steer).
		var err error
		if fast, listen, err = listenFast(s, listen); err != nil {
			return err
		}
	}
	in, err := s.corefile(listen)
	if err != nil {
		if fast != nil {
			fast.close()
		}
		return err
	}
	if err := s.swapUpstreams(ups); err != nil {
		if fast != nil {
			fast.close()
		}
		return err
	}
	inst, err := caddy.Start(in)
	if err != nil {
		if fast != nil {
			fast.close()
		}
		if f := s.fwd.Swap(nil); f != nil {
			_ = f.OnShutdown()
		}
		return fmt.Errorf("dns: start on %s: %w", listen, err)
	}
	if fast != nil {
		if err := s.serveFast(fast); err != nil {
			fast.close()
			_ = errors.Join(append(inst.ShutdownCallbacks(), inst.Stop())...)
			if f := s.fwd.Swap(nil); f != nil {
				_ = f.OnShutdown()
			}
			return err
		}
	}
	s.mu.Lock()
	s.inst = inst
	s.fast = fast
	for _, sl := range inst.Servers() {
		if a := sl.LocalAddr(); a != nil {
			s.udp = a
		}
		if a := sl.Addr(); a != nil {
			s.tcp = a
		}
	}
	s.mu.Unlock()
	s.log.Info("serving", "listen", listen, "fastPath", fast != nil, "zone", s.zone.zone, "upstreams", ups)
	return nil
}

// forwarderGrace is how long a replaced forwarder keeps its health checks and
// connections for the queries still in flight through it.
const forwarderGrace = 10 * time.Second

// SetUpstreams switches forwarding to ups at once, tried in that order. The
// running server is not restarted: the next query uses the new forwarder,
// queries in flight finish on the old one, and the cache is kept.
func (s *Server) SetUpstreams(ups []netip.AddrPort) error {
	if err := s.swapUpstreams(ups); err != nil {
		return err
	}
	s.metrics.changes.Inc()
	s.log.Info("upstreams changed", "upstreams", ups)
	return nil
}

// swapUpstreams puts a forwarder for ups in place; on error the current one
// stays.
func (s *Server) swapUpstreams(ups []netip.AddrPort) error {
	f, err := newForwarder(ups)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.upstreams = slices.Clone(ups)
	s.mu.Unlock()
	s.metrics.upstreams.Set(float64(len(ups)))
	old := s.fwd.Swap(f)
	// Forwarded replies of the old upstreams are not served from the fast
	// path's cache once the new ones are in place (a fill still in flight
	// is of the old generation and dropped). CoreDNS's cache keeps its
	// items, each at most its TTL: the chain answers those until then.
	if s.fwdCache != nil {
		s.fwdCache.flush()
	}
	if old != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.retired == nil {
			s.retired = map[*forward.Forward]*time.Timer{}
		}
		s.retired[old] = time.AfterFunc(forwarderGrace, func() {
			s.mu.Lock()
			_, ok := s.retired[old]
			delete(s.retired, old)
			s.mu.Unlock()
			if ok {
				_ = old.OnShutdown()
			}
		})
	}
	return nil
}

// serveFast starts the fast path once CoreDNS serves UDP (caddy starts it
// in a goroutine), as it needs CoreDNS's server for what it passes on.
func (s *Server) serveFast(fast *fastListener) error {
	deadline := time.Now().Add(10 * time.Second)
	for s.core.Load() == nil {
		if time.Now().After(deadline) {
			return errors.New("dns: CoreDNS did not start serving UDP")
		}
		time.Sleep(time.Millisecond)
	}
	return fast.serve(s.core.Load())
}

func (s *Server) stop() {
	s.mu.Lock()
	inst := s.inst
	fast := s.fast
	s.inst, s.udp, s.tcp, s.fast = nil, nil, nil, nil
	retired := s.retired
	s.retired = nil
	s.mu.Unlock()
	for f, t := range retired {
		if t.Stop() {
			_ = f.OnShutdown()
		}
	}
	if fast != nil {
		fast.close()
	}
	if inst == nil {
		return
	}
	err := errors.Join(append(inst.ShutdownCallbacks(), inst.Stop())...)
	if f := s.fwd.Swap(nil); f != nil {
		_ = f.OnShutdown()
	}
	if err != nil {
		s.log.Warn("stop", "err", err)
	}
}

// Status is the DNS service's part of the admin /status document.
type Status struct {
	Listen string `json:"listen"`
	Zone   string `json:"zone"`
	// Upstreams are tried in this order, the next only when the one
	// before fails or is down.
	Upstreams []netip.AddrPort `json:"upstreams"`
	Serving   bool             `json:"serving"`
	// Clients are the networks answered, each with where it comes from
	// (loopback, the machine networks, the cluster's pod networks,
	// dns.allowFrom); every other client is refused.
	Clients []ClientNet `json:"clients"`
	MDNS    *MDNSStatus `json:"mdns,omitempty"`
}

// Status reports what the server does right now.
func (s *Server) Status() Status {
	udp, _ := s.Addr()
	listen := s.opts.Listen
	if udp != nil {
		listen = udp.String()
	}
	st := Status{Listen: listen, Zone: s.zone.zone, Upstreams: s.Upstreams(), Serving: udp != nil,
		Clients: slices.Clone(s.clients)}
	if s.mdns != nil {
		m := s.mdns.Status()
		st.MDNS = &m
	}
	return st
}
