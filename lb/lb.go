package lb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"appliance/internal/cluster"
)

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
	// hbKick makes followHandback check its tables now: someone else
	// touched them (see WatchOptions.OnHandbackTouched).
	hbKick chan struct{}
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
	l := &LB{opts: opts, state: state, log: log.With("component", "lb"), metrics: m, kick: make(chan struct{}, 1), hbKick: make(chan struct{}, 1)}
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
// its tables. Every goroutine it starts has ended when it returns. A loop
// that follows the cluster (membership, redirect, its watcher, handback)
// and fails or returns while ctx lasts stops the LB the same way, and Run
// returns that loop's error: the LB never serves on without one.
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

	// Two groups for the shutdown order: the redirect's loops end before
	// the redirect is held, the others before the tables are removed.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	lp := loops{ctx: runCtx, stop: stop, log: l.log}
	var redirect, follow errgroup.Group
	lp.start(&follow, "membership", func(ctx context.Context) error { return l.followMembers(ctx, checkCtx) })
	if l.redir != nil {
		lp.start(&redirect, "redirect", l.reconcileRedirect)
		lp.start(&redirect, "redirect watch", l.watchRedirect)
		lp.start(&follow, "handback", l.followHandback)
		lp.start(&follow, "release", l.followRelease)
	}

	<-runCtx.Done()
	// The reconciler ends before the redirect is held (it would apply the
	// rules again); the watcher before the removal below (which it would
	// not undo anyway: no rules are wanted then) and before the namespace
	// handle closes.
	loopErr := redirect.Wait()
	if l.redir != nil {
		if err := l.redir.Hold(); err != nil {
			l.log.Error("empty redirect", "err", err)
		}
		l.setRules(nil)
		l.metrics.setDesired(0)
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
	// Handback and membership end before the tables go and the checks stop.
	loopErr = errors.Join(loopErr, follow.Wait())
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
	return loopErr
}

// loops starts the goroutines that follow the cluster while the LB serves;
// each runs until ctx ends. One that fails or returns before then stops
// the LB (stop ends ctx, and Run shuts down as when its own ctx ends)
// rather than leave it serving without that loop; its error, with its
// name, is its group's.
type loops struct {
	ctx  context.Context
	stop context.CancelFunc
	log  *slog.Logger
}

// start runs f, called name, in g.
func (lp loops) start(g *errgroup.Group, name string, f func(context.Context) error) {
	g.Go(func() error {
		err := f(lp.ctx)
		if err == nil {
			if lp.ctx.Err() != nil {
				return nil
			}
			err = errors.New("stopped on its own")
		}
		err = fmt.Errorf("lb: %s: %w", name, err)
		lp.log.Error("stopping the load balancer", "err", err)
		lp.stop()
		return err
	})
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
