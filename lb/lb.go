package lb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"appliance/internal/cluster"
)

// Pool names.
const (
	PoolAPI = "api"
	PoolMCS = "mcs"
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

// LB is the load balancer: one proxy and pool per service, the membership
// watch that feeds the pools, and the VIP redirect that follows their health.
type LB struct {
	opts     Options
	state    *cluster.State
	vips     []netip.Addr
	dual     bool // API VIPs of both families: backends and clients by family
	log      *slog.Logger
	metrics  *Metrics
	redir    *Redirector
	proxies  []*proxy
	poolOpt  []PoolOptions
	kick     chan struct{}
	mu       sync.Mutex
	rules    []Redirect
	repair   *RedirectRepair // the last repair of the redirect table
	handback []Handback      // installed handback rules
	// watch tunes the redirect's watcher; tests shorten it.
	watch WatchOptions
}

// New builds the LB and binds its listeners at once, so a port clash is
// reported before anything runs. cfg supplies the API VIPs (the redirect's
// destinations, for both services: the pointer Ignition reaches the MCS
// through the API VIP); state supplies the members.
func New(cfg *cluster.Config, state *cluster.State, opts Options, m *Metrics, log *slog.Logger) (*LB, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if state == nil {
		return nil, errors.New("lb: no cluster state")
	}
	l := &LB{opts: opts, state: state, log: log.With("component", "lb"), metrics: m, kick: make(chan struct{}, 1)}
	if cfg != nil {
		l.vips = cfg.VIPsFor(cluster.VIPAPI)
	}
	l.dual = dualStack(l.vips)
	notify := func() {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
	for _, spec := range []struct {
		name string
		po   PoolOptions
	}{{PoolAPI, opts.API}, {PoolMCS, opts.MCS}} {
		if spec.po.Disabled {
			continue
		}
		ln, err := opts.Listen("tcp", spec.po.Listen)
		if err != nil {
			l.closeListeners()
			return nil, fmt.Errorf("lb: %s: listen %s: %w", spec.name, spec.po.Listen, err)
		}
		tl, ok := ln.(*net.TCPListener)
		if !ok {
			_ = ln.Close()
			l.closeListeners()
			return nil, fmt.Errorf("lb: %s: listener is %T, want *net.TCPListener", spec.name, ln)
		}
		prober := &HTTPSProber{Path: spec.po.CheckPath, Dial: opts.Dial}
		pool := newPool(spec.name, opts.Balance, opts.Health, prober, m, l.log, notify)
		l.proxies = append(l.proxies, &proxy{pool: pool, opts: opts.Proxy, ln: tl, enter: enterNetNS(opts.NetNS), byFamily: l.dual})
		l.poolOpt = append(l.poolOpt, spec.po)
	}
	if len(l.proxies) == 0 {
		return nil, errors.New("lb: every pool is disabled")
	}
	if opts.Redirect && len(l.vips) > 0 {
		r, err := NewRedirector(opts.Table, opts.NetNS)
		if err != nil {
			l.closeListeners()
			return nil, err
		}
		l.redir = r
	}
	return l, nil
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

func (l *LB) closeListeners() {
	for _, x := range l.proxies {
		_ = x.ln.Close()
	}
}

// Pool returns the pool called name, or nil.
func (l *LB) Pool(name string) *Pool {
	for _, x := range l.proxies {
		if x.pool.name == name {
			return x.pool
		}
	}
	return nil
}

// Addr is the listener address of the pool called name, or nil.
func (l *LB) Addr(name string) net.Addr {
	for _, x := range l.proxies {
		if x.pool.name == name {
			return x.ln.Addr()
		}
	}
	return nil
}

// Ready is the readiness signal other services use (VRRP tracking takes it
// as is): nil while the API pool (or, without it, every pool) has a healthy
// backend.
func (l *LB) Ready(context.Context) error {
	for _, x := range l.proxies {
		if x.pool.name == PoolAPI || l.Pool(PoolAPI) == nil {
			if x.pool.Healthy() == 0 {
				return fmt.Errorf("lb: pool %s has no healthy backend", x.pool.name)
			}
		}
	}
	return nil
}

// Serving is nil while this LB can take the API VIP's traffic: the API pool
// has a healthy backend and, when the LB manages the redirect, the redirect
// is installed. The API VIP follows it (a node whose LB cannot serve steps
// down).
func (l *LB) Serving() error {
	if err := l.Ready(context.Background()); err != nil {
		return err
	}
	if l.redir == nil {
		return nil
	}
	l.mu.Lock()
	n := len(l.rules)
	l.mu.Unlock()
	if n == 0 {
		return errors.New("lb: the VIP redirect is not installed")
	}
	return nil
}

// ServingVIP is Serving for one API VIP, for a virtual router per family:
// nil while the API pool has a healthy backend of vip's family and, when
// the LB manages the redirect, vip's redirect is installed. Single-stack
// it is Serving.
func (l *LB) ServingVIP(vip netip.Addr) error {
	p := l.Pool(PoolAPI)
	if p == nil {
		return l.Serving()
	}
	fam := l.vipFamily(vip)
	if p.HealthyFor(fam) == 0 {
		if fam == FamilyAny {
			return fmt.Errorf("lb: pool %s has no healthy backend", PoolAPI)
		}
		return fmt.Errorf("lb: pool %s has no healthy %s backend", PoolAPI, fam)
	}
	if l.redir == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.rules {
		if r.VIP == vip {
			return nil
		}
	}
	return fmt.Errorf("lb: the redirect of %s is not installed", vip)
}

// Status is the LB's state for /status.
type Status struct {
	Pools    map[string][]BackendStatus `json:"pools"`
	Redirect []string                   `json:"redirect"`
	// LastRepair is the last time the redirect table was found changed by
	// someone else and put back; absent when that never happened.
	LastRepair *RedirectRepair `json:"last_redirect_repair,omitempty"`
	// Handback lists where connections this node does not know go (see
	// Handback): "VIP:port -> node".
	Handback []string `json:"handback,omitempty"`
}

// Status reports the pools' backends and the installed redirects.
func (l *LB) Status() Status {
	s := Status{Pools: map[string][]BackendStatus{}, Redirect: []string{}}
	for _, x := range l.proxies {
		s.Pools[x.pool.name] = x.pool.Status()
	}
	l.mu.Lock()
	for _, r := range l.rules {
		s.Redirect = append(s.Redirect, fmt.Sprintf("%s -> :%d", netip.AddrPortFrom(r.VIP, r.Port), r.ToPort))
	}
	for _, h := range l.handback {
		s.Handback = append(s.Handback, fmt.Sprintf("%s -> %s", netip.AddrPortFrom(h.VIP, h.Port), h.To))
	}
	if l.repair != nil {
		r := *l.repair
		s.LastRepair = &r
	}
	l.mu.Unlock()
	return s
}

// Run serves until ctx ends, then stops redirecting new connections (VIP
// traffic reaches the local server directly), stops accepting, lets open
// sessions drain for up to DrainTimeout, closes what is left and removes
// its tables.
func (l *LB) Run(ctx context.Context) error {
	if l.redir != nil {
		// A crashed run may have left the table; its rules could point at
		// a port nobody listens on.
		if err := l.redir.Remove(); err != nil {
			l.closeListeners()
			return err
		}
		if err := l.redir.ApplyHandback(nil, true); err != nil {
			l.closeListeners()
			return err
		}
		defer l.redir.Close()
	}
	for i, x := range l.proxies {
		if err := x.start(); err != nil {
			for _, y := range l.proxies[:i] {
				y.stopAccepting()
				y.closeAll()
				y.wg.Wait()
			}
			l.closeListeners()
			return err
		}
		l.log.Info("listening", "pool", x.pool.name, "addr", x.ln.Addr().String())
	}
	checkCtx, stopChecks := context.WithCancel(context.WithoutCancel(ctx))
	defer stopChecks()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for snap := range l.state.Subscribe(ctx) {
			for i, x := range l.proxies {
				x.pool.setTargets(checkCtx, targetsFor(snap.Members, l.poolOpt[i].BackendPort, l.dual))
			}
		}
	}()
	redirDone := make(chan struct{})
	go func() {
		defer close(redirDone)
		l.reconcileRedirect(ctx)
	}()
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		l.watchRedirect(ctx)
	}()
	handbackDone := make(chan struct{})
	go func() {
		defer close(handbackDone)
		l.followHandback(ctx)
	}()

	<-ctx.Done()
	<-redirDone
	// The watcher ends before the removal below (which it would not undo
	// anyway: no rules are wanted then) and before the namespace handle
	// closes.
	<-watchDone
	if l.redir != nil {
		if err := l.redir.Hold(); err != nil {
			l.log.Error("empty redirect", "err", err)
		}
		l.setRules(nil)
		// Closing the listener resets the connections still in its
		// queues (handshake done or under way, not yet accepted): keep
		// accepting them a moment. No new ones come through the VIP now.
		time.Sleep(min(acceptGrace, l.opts.DrainTimeout/4))
	}
	for _, x := range l.proxies {
		x.stopAccepting()
	}
	l.closeListeners()
	l.drain()
	<-handbackDone
	if l.redir != nil {
		if err := l.redir.Remove(); err != nil {
			l.log.Error("remove redirect", "err", err)
		}
		if err := l.redir.ApplyHandback(nil, true); err != nil {
			l.log.Error("remove handback", "err", err)
		}
	}
	stopChecks()
	for _, x := range l.proxies {
		x.pool.stop()
	}
	wg.Wait()
	return nil
}

// drain waits for sessions to end, up to DrainTimeout, then closes them.
func (l *LB) drain() {
	done := make(chan struct{})
	go func() {
		for _, x := range l.proxies {
			x.wg.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
		return
	case <-time.After(l.opts.DrainTimeout):
	}
	n := 0
	for _, x := range l.proxies {
		n += int(x.active.Load())
		x.closeAll()
	}
	l.log.Info("drain timeout: closing sessions", "sessions", n)
	<-done
}

// desiredRules: each pool's VIP port goes to its proxy while the pool has
// a healthy backend for the VIP's family (dual-stack, an IPv6 VIP whose
// pool has no backend up over IPv6 reaches the node's own server directly,
// as a VIP does when its pool has none at all).
func (l *LB) desiredRules() []Redirect {
	var out []Redirect
	for i, x := range l.proxies {
		po := l.poolOpt[i]
		if po.VIPPort == 0 {
			continue
		}
		to := portOf(x.ln.Addr())
		for _, v := range l.vips {
			if x.pool.HealthyFor(l.vipFamily(v)) > 0 {
				rd := Redirect{VIP: v, Port: po.VIPPort, ToPort: to}
				if v.Is6() && l.opts.Self != nil {
					if a, ok := l.opts.Self(true); ok {
						rd.To = a
					}
				}
				out = append(out, rd)
			}
		}
	}
	return out
}

// vipFamily is the family of the clients a VIP brings: FamilyAny when
// single-stack, where every backend takes every client.
func (l *LB) vipFamily(v netip.Addr) Family {
	if !l.dual {
		return FamilyAny
	}
	return familyOf(v)
}

func (l *LB) setRules(r []Redirect) {
	l.mu.Lock()
	l.rules = r
	l.mu.Unlock()
	l.metrics.setRedirect(len(r))
}

// watchRedirect keeps the redirect table as reconcileRedirect last set it,
// repairing what others change (see Redirector.Watch), until ctx ends.
func (l *LB) watchRedirect(ctx context.Context) {
	if l.redir == nil {
		return
	}
	o := l.watch
	o.Log = l.log
	o.OnRepair = func(r RedirectRepair) {
		l.metrics.repaired(r.Kind)
		l.mu.Lock()
		l.repair = &r
		l.mu.Unlock()
	}
	_ = l.redir.Watch(ctx, o)
}

func (l *LB) reconcileRedirect(ctx context.Context) {
	if l.redir == nil {
		return
	}
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	// The node's own IPv6 address (Options.Self) can change without a
	// kick; Apply does nothing while the rules stay the same.
	var follow <-chan time.Time
	if l.opts.Self != nil {
		t := time.NewTicker(selfCheck)
		defer t.Stop()
		follow = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.kick:
		case <-retry.C:
		case <-follow:
		}
		want := l.desiredRules()
		if err := l.redir.Apply(want); err != nil {
			l.log.Error("apply redirect", "err", err)
			retry.Reset(time.Second)
			continue
		}
		l.mu.Lock()
		changed := len(l.rules) != len(want)
		l.mu.Unlock()
		if changed {
			l.log.Info("redirect", "rules", len(want))
		}
		l.setRules(want)
	}
}

// selfCheck is how often the redirect looks at the node's own address.
const selfCheck = 5 * time.Second

// Kick makes the LB compute its redirect again now: the node's own address
// moved (see Options.Self).
func (l *LB) Kick() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// acceptGrace is how long a stopping LB keeps accepting after its redirect
// stopped taking new connections (at most a quarter of DrainTimeout).
const acceptGrace = 500 * time.Millisecond

// handbackCheck is how often followHandback makes sure its tables are
// still there: nothing else watches them, and they only matter at the
// instant of a takeover.
const handbackCheck = 5 * time.Second

// followHandback keeps the handback tables (see Handback) in step with
// this node's VRRP state of the API VIPs until ctx ends.
func (l *LB) followHandback(ctx context.Context) {
	if l.redir == nil {
		return
	}
	window := handbackWindow(l.opts.DrainTimeout)
	last := map[netip.Addr]netip.Addr{} // VIP → the master a backup last followed
	sub := l.state.Subscribe(ctx)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	check := time.NewTicker(handbackCheck)
	defer check.Stop()
	var snap *cluster.Snapshot
	force := false
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			return
		case s, ok := <-sub:
			if !ok {
				return
			}
			snap = s
		case <-timer.C:
		case <-check.C:
			missing, err := l.redir.HandbackMissing()
			if err != nil {
				l.log.Error("check handback tables", "err", err)
			}
			if !missing && !force {
				continue
			}
			if missing {
				l.log.Warn("handback table removed by someone else; restoring it", "table", HandbackTable)
			}
			force = true
		}
		if snap == nil {
			continue
		}
		want, until := l.wantHandback(snap, last, time.Now(), window)
		if !until.IsZero() {
			timer.Reset(time.Until(until))
		}
		if err := l.redir.ApplyHandback(want, force); err != nil {
			// Once per distinct error: the next check retries every 5 s.
			if err.Error() != lastErr {
				l.log.Error("apply handback: connections will be reset when this node takes the VIP from a live node", "err", err)
				lastErr = err.Error()
			}
			force = true
			continue
		}
		if lastErr != "" {
			l.log.Info("handback applied again")
			lastErr = ""
		}
		force = false
		l.mu.Lock()
		was := l.handback
		l.handback = want
		l.mu.Unlock()
		for _, h := range want {
			if snapMaster(snap, h.VIP) && !slices.Contains(was, h) {
				l.log.Info("passing connections this node does not know back to the previous VIP holder",
					"vip", h.VIP, "port", h.Port, "to", h.To, "for", window)
			}
		}
	}
}

// wantHandback is the handback rules for snap's VIP states (handbackTo,
// for each API VIP this LB redirects and each pool's VIP port), and the
// earliest time they change on their own.
func (l *LB) wantHandback(snap *cluster.Snapshot, last map[netip.Addr]netip.Addr, now time.Time, window time.Duration) ([]Handback, time.Time) {
	var want []Handback
	var until time.Time
	for _, st := range snap.VIPs {
		if !slices.Contains(l.vips, st.VIP) {
			continue
		}
		to, keep, u := handbackTo(st, last[st.VIP], now, window)
		last[st.VIP] = keep
		if !u.IsZero() && (until.IsZero() || u.Before(until)) {
			until = u
		}
		// IPv6 only when its traffic goes to the node's own address
		// (Options.Self): redirected, the old holder's sessions are bound
		// to the VIP and cannot take a packet once it is gone, and passing
		// them back would turn a reset into a timeout.
		if !to.IsValid() || to.Is4() != st.VIP.Is4() || (st.VIP.Is6() && l.opts.Self == nil) {
			continue
		}
		for _, po := range l.poolOpt {
			if po.VIPPort != 0 {
				want = append(want, Handback{VIP: st.VIP, Port: po.VIPPort, To: to})
			}
		}
	}
	return want, until
}

// snapMaster reports whether this node is master of vip in snap.
func snapMaster(snap *cluster.Snapshot, vip netip.Addr) bool {
	for _, st := range snap.VIPs {
		if st.VIP == vip {
			return st.LocalState == cluster.VIPStateMaster
		}
	}
	return false
}
