package lb

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/health"
)

// Pool names.
const (
	PoolAPI = "api"
	PoolMCS = "mcs"
)

// Balancing algorithms.
const (
	RoundRobin       = cluster.LBRoundRobin
	LeastConnections = cluster.LBLeastConn
)

// fullWeight is every backend's weight once slow start is over; slow start
// ramps from 1 to it.
const fullWeight = 100

// BackendTarget is one backend a pool should hold.
type BackendTarget struct {
	Name   string // the backend's label in logs and metrics: the member name, plus "/v4" or "/v6" when it has one per family
	Addr   string // host:port
	Backup bool   // only used while no primary backend is up
	Family Family // the clients it takes: FamilyAny for every client
}

// targetsFor derives a pool's backends from a membership snapshot: every
// master as a primary, the bootstrap node as the backup. Single-stack, a
// member's first address is used so a dual-stack node counts once. With
// dual set, a member with addresses of both families has a backend per
// family (the first address of each), checked and balanced on its own and
// taking only clients of its family, named member/v4 and member/v6; a
// member known by one address alone takes every client as before, so
// dual-stack VIPs in front of members configured with one address still
// reach them.
func targetsFor(members []cluster.Member, port uint16, dual bool) []BackendTarget {
	var out []BackendTarget
	for _, m := range members {
		if len(m.IPs) == 0 || (m.Role != cluster.RoleMaster && m.Role != cluster.RoleBootstrap) {
			continue
		}
		backup := m.Role == cluster.RoleBootstrap
		i4 := slices.IndexFunc(m.IPs, func(a netip.Addr) bool { return familyOf(a) == FamilyIPv4 })
		i6 := slices.IndexFunc(m.IPs, func(a netip.Addr) bool { return familyOf(a) == FamilyIPv6 })
		if !dual || i4 < 0 || i6 < 0 {
			out = append(out, BackendTarget{Name: m.Name, Addr: netip.AddrPortFrom(m.IPs[0], port).String(), Backup: backup})
			continue
		}
		out = append(out,
			BackendTarget{Name: m.Name + "/v4", Addr: netip.AddrPortFrom(m.IPs[i4].Unmap(), port).String(), Backup: backup, Family: FamilyIPv4},
			BackendTarget{Name: m.Name + "/v6", Addr: netip.AddrPortFrom(m.IPs[i6], port).String(), Backup: backup, Family: FamilyIPv6},
		)
	}
	return out
}

// followMembers gives each pool the backends of every membership snapshot
// until ctx ends. The health checks it starts run under checks, which Run
// ends only after the drain, so the pools' health stays current while
// sessions drain.
func (l *LB) followMembers(ctx, checks context.Context) error {
	for snap := range l.state.Subscribe(ctx) {
		for i, x := range l.proxies {
			x.pool.setTargets(checks, targetsFor(snap.Members, l.poolOpt[i].BackendPort, l.dual))
		}
	}
	return nil
}

// backend is one server of a pool. Fields under "pool.mu" are guarded by
// the pool's mutex.
type backend struct {
	BackendTarget
	ap     netip.AddrPort // Addr, parsed once for the proxy's connects
	cancel context.CancelFunc
	done   chan struct{}

	// pool.mu
	h       health.Hysteresis
	upSince time.Time // zero: no slow start (first check, or never down)
	active  int
	cur     int // smooth weighted round-robin accumulator
	removed bool

	m backendMetrics
}

// Pool is one balanced service: its backends, their health and the
// sessions proxied to them.
type Pool struct {
	name    string
	balance string
	health  HealthOptions
	prober  Prober
	metrics *Metrics
	conns   connCounters
	log     *slog.Logger
	notify  func() // called (outside locks) when the number of up backends may have changed
	now     func() time.Time

	mu       sync.Mutex
	backends map[string]*backend // by Name
	order    []*backend          // backends sorted by Name, for deterministic picks
	sessions map[*session]struct{}
	rr       int // rotation for least-connections ties
	ctx      context.Context
}

func newPool(name, balance string, health HealthOptions, prober Prober, m *Metrics, log *slog.Logger, notify func()) *Pool {
	health.fill()
	if notify == nil {
		notify = func() {}
	}
	return &Pool{
		name: name, balance: balance, health: health, prober: prober, metrics: m, conns: m.connCounters(name),
		log: log.With("pool", name), notify: notify, now: time.Now,
		backends: map[string]*backend{}, sessions: map[*session]struct{}{},
	}
}

// Name is the pool's name ("api", "mcs").
func (p *Pool) Name() string { return p.name }

// setTargets makes the pool hold exactly targets: new backends start being
// checked, removed ones stop, and established sessions of removed backends
// keep running (a membership change never cuts a connection).
func (p *Pool) setTargets(ctx context.Context, targets []BackendTarget) {
	want := map[string]BackendTarget{}
	for _, t := range targets {
		want[t.Name] = t
	}
	// Remove first (and forget their series), so that a member whose
	// address changed comes back under the same name with fresh series.
	var stop []*backend
	p.mu.Lock()
	if p.ctx == nil {
		p.ctx = ctx
	}
	for name, b := range p.backends {
		if t, ok := want[name]; !ok || t != b.BackendTarget {
			b.removed = true
			delete(p.backends, name)
			stop = append(stop, b)
		}
	}
	p.reorder()
	p.mu.Unlock()
	for _, b := range stop {
		b.cancel()
		<-b.done
		p.metrics.forget(p.name, b.Name)
		p.log.Info("backend removed", "backend", b.Name, "addr", b.Addr)
	}

	var start []*backend
	p.mu.Lock()
	for name, t := range want {
		if _, ok := p.backends[name]; ok {
			continue
		}
		cctx, cancel := context.WithCancel(p.ctx)
		// An address that does not parse fails every connect (and check).
		ap, _ := netip.ParseAddrPort(t.Addr)
		b := &backend{BackendTarget: t, ap: ap, cancel: cancel, done: make(chan struct{}), h: p.health.newHysteresis(), m: p.metrics.backend(p.name, t.Name)}
		p.backends[name] = b
		start = append(start, b)
		go p.checkLoop(cctx, b)
	}
	p.reorder()
	p.mu.Unlock()
	for _, b := range start {
		p.metrics.setState(p.name, b.Name, HealthUnknown)
		p.log.Info("backend added", "backend", b.Name, "addr", b.Addr, "backup", b.Backup, "family", b.Family.String())
	}
	if len(stop) > 0 {
		p.publishHealthy()
	}
}

// reorder rebuilds order from backends; p.mu held.
func (p *Pool) reorder() {
	p.order = p.order[:0]
	for _, b := range p.backends {
		p.order = append(p.order, b)
	}
	slices.SortFunc(p.order, func(a, b *backend) int { return strings.Compare(a.Name, b.Name) })
}

// stop ends every health check (used when the LB stops).
func (p *Pool) stop() {
	p.mu.Lock()
	bs := make([]*backend, 0, len(p.backends))
	for _, b := range p.backends {
		bs = append(bs, b)
	}
	p.mu.Unlock()
	for _, b := range bs {
		b.cancel()
		<-b.done
	}
}

func (p *Pool) checkLoop(ctx context.Context, b *backend) {
	defer close(b.done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, p.health.Timeout)
		err := p.prober.Probe(pctx, b.Addr)
		cancel()
		if ctx.Err() != nil {
			return
		}
		t.Reset(p.record(b, err))
	}
}

// record applies one probe result and returns the delay to the next probe.
func (p *Pool) record(b *backend, err error) time.Duration {
	ok := err == nil
	p.metrics.check(p.name, b.Name, ok)
	var toClose []*session
	p.mu.Lock()
	prev := b.h.State()
	changed := b.h.Observe(ok)
	state := b.h.State()
	if changed {
		switch {
		case state == HealthUp && prev == HealthDown:
			b.upSince = p.now()
			b.cur = 0
		case state == HealthDown && p.health.closeOnDown():
			if p.health.DownGrace < 0 {
				toClose = p.sessionsOf(b)
			} else {
				time.AfterFunc(p.health.DownGrace, func() { p.closeIfDown(b) })
			}
		}
	}
	next := p.health.next(&b.h)
	removed := b.removed
	p.mu.Unlock()
	if !changed || removed {
		return next
	}
	p.metrics.setState(p.name, b.Name, state)
	if ok {
		p.log.Info("backend up", "backend", b.Name, "addr", b.Addr)
	} else {
		p.log.Warn("backend down", "backend", b.Name, "addr", b.Addr, "err", err)
	}
	for _, s := range toClose {
		s.close()
	}
	p.publishHealthy()
	return next
}

// sessionsOf lists b's sessions; p.mu held.
func (p *Pool) sessionsOf(b *backend) []*session {
	var out []*session
	for s := range p.sessions {
		if s.b == b {
			out = append(out, s)
		}
	}
	return out
}

// closeIfDown closes b's sessions if b is (still) down when the grace ends.
func (p *Pool) closeIfDown(b *backend) {
	p.mu.Lock()
	var ss []*session
	if b.h.State() == HealthDown {
		ss = p.sessionsOf(b)
	}
	p.mu.Unlock()
	if len(ss) > 0 {
		p.log.Info("closing sessions of down backend", "backend", b.Name, "sessions", len(ss))
	}
	for _, s := range ss {
		s.close()
	}
}

func (p *Pool) publishHealthy() {
	p.metrics.setHealthy(p.name, p.Healthy())
	p.notify()
}

// Healthy is the number of backends (backups included) currently up.
func (p *Pool) Healthy() int { return p.HealthyFor(FamilyAny) }

// HealthyFor is the number of backends (backups included) currently up
// that take clients of family f; FamilyAny counts them all.
func (p *Pool) HealthyFor(f Family) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, b := range p.backends {
		if b.h.State() == HealthUp && serves(b.Family, f) {
			n++
		}
	}
	return n
}

// pick chooses a backend for a new connection of family fam, skipping
// those in tried, and counts the connection on it. nil: no backend
// available.
func (p *Pool) pick(tried []*backend, fam Family) *backend {
	p.mu.Lock()
	defer p.mu.Unlock()
	var buf [16]*backend // no allocation per connection for usual pools
	cands := candidates(buf[:0], p.order, tried, fam)
	if len(cands) == 0 {
		return nil
	}
	now := p.now()
	var best *backend
	if p.balance == LeastConnections {
		best = pickLeastConn(cands, p.rr, now, p.health.SlowStart)
		p.rr++
	} else {
		best = pickSmoothWRR(cands, now, p.health.SlowStart)
	}
	best.active++
	return best
}

// candidates appends to dst the backends of order a connection of family
// fam may go to: those up, of its family and not tried yet; primaries while
// any qualifies, else backups. Backups are chosen per family, so a
// bootstrap takes the IPv6 clients while no master is up over IPv6 even
// when masters serve IPv4.
func candidates(dst, order, tried []*backend, fam Family) []*backend {
	for _, backup := range []bool{false, true} {
		for _, b := range order {
			if b.Backup == backup && b.h.State() == HealthUp && serves(b.Family, fam) && !slices.Contains(tried, b) {
				dst = append(dst, b)
			}
		}
		if len(dst) > 0 {
			break
		}
	}
	return dst
}

// pickSmoothWRR is smooth weighted round-robin: every candidate gains its
// weight, the richest is chosen and pays the total. Equal weights give
// plain rotation; a slow-starting backend is chosen in proportion to its
// ramped weight without bursts.
func pickSmoothWRR(cands []*backend, now time.Time, ramp time.Duration) *backend {
	total := 0
	var best *backend
	for _, b := range cands {
		w := slowStartWeight(fullWeight, b.upSince, now, ramp)
		b.cur += w
		total += w
		if best == nil || b.cur > best.cur {
			best = b
		}
	}
	best.cur -= total
	return best
}

// pickLeastConn picks the candidate with the fewest active connections per
// unit of weight; ties rotate starting at offset.
func pickLeastConn(cands []*backend, offset int, now time.Time, ramp time.Duration) *backend {
	var best *backend
	var bestScore float64
	n := len(cands)
	for i := range n {
		b := cands[(i+offset)%n]
		w := slowStartWeight(fullWeight, b.upSince, now, ramp)
		score := float64(b.active+1) / float64(w)
		if best == nil || score < bestScore {
			best, bestScore = b, score
		}
	}
	return best
}

// release undoes pick's count when a connection ends or its dial failed.
func (p *Pool) release(b *backend) {
	p.mu.Lock()
	b.active--
	p.mu.Unlock()
}

func (p *Pool) addSession(s *session) {
	p.mu.Lock()
	p.sessions[s] = struct{}{}
	down := s.b.h.State() == HealthDown && p.health.closeOnDown()
	p.mu.Unlock()
	if down {
		// The backend went down while we were dialling it: this session
		// missed the sweep, give it the same grace.
		if p.health.DownGrace < 0 {
			s.close()
		} else {
			time.AfterFunc(p.health.DownGrace, func() { p.closeIfDown(s.b) })
		}
	}
}

// endSession forgets a finished session and releases its backend's count
// under one lock.
func (p *Pool) endSession(s *session) {
	p.mu.Lock()
	delete(p.sessions, s)
	s.b.active--
	p.mu.Unlock()
}

// BackendStatus is one backend as shown on /status.
type BackendStatus struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
	// Family is the address family the backend is checked and reached
	// over ("ipv4", "ipv6"); dual-stack, it takes only clients of it.
	Family string `json:"family"`
	Backup bool   `json:"backup,omitempty"`
	State  string `json:"state"`
	Active int    `json:"active"`
	Weight int    `json:"weight"`
}

// Status lists the pool's backends sorted by name.
func (p *Pool) Status() []BackendStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	out := make([]BackendStatus, 0, len(p.backends))
	for _, b := range p.backends {
		w := 0
		if b.h.State() == HealthUp {
			w = slowStartWeight(fullWeight, b.upSince, now, p.health.SlowStart)
		}
		out = append(out, BackendStatus{Name: b.Name, Addr: b.Addr, Family: addrFamily(b.ap), Backup: b.Backup, State: b.h.State().String(), Active: b.active, Weight: w})
	}
	slices.SortFunc(out, func(a, b BackendStatus) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

// addrFamily names ap's family for /status; "" when it did not parse.
func addrFamily(ap netip.AddrPort) string {
	if !ap.IsValid() {
		return ""
	}
	return familyOf(ap.Addr()).String()
}

func portOf(addr net.Addr) uint16 {
	if ta, ok := addr.(*net.TCPAddr); ok {
		return uint16(ta.Port)
	}
	_, ps, err := net.SplitHostPort(addr.String())
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(ps)
	return uint16(n)
}
