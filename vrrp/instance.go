package vrrp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
)

// Config describes one virtual router: one VRID, one address family, one interface.
type Config struct {
	Name         string         // instance name used in logs, metrics and status, e.g. "api-v4"
	Interface    string         // interface the VIPs live on and adverts go out of
	VRID         uint8          // 1..255
	Version      uint8          // 2 or 3
	Priority     uint8          // base priority 1..255 (255: address owner)
	Interval     time.Duration  // advert interval
	Preempt      bool           // a higher-priority backup takes over from a live master
	PreemptDelay time.Duration  // wait this long before preempting a live lower-priority master
	Accept       bool           // RFC 5798 accept mode (see doc.go: VIPs are always locally accepted today)
	AuthPass     string         // v2 simple password (at most 8 bytes); empty: no authentication
	VIPs         []netip.Prefix // all of one family; the prefix length is the one installed
	UnicastPeers []netip.Addr   // empty: multicast
	Tracks       []TrackSpec    // weighted checks
	Label        string         // IPv4 address label suffix, default "vip"
	// AnnounceRefresh repeats gratuitous ARP / unsolicited NA while master; 0: default 60s, <0: off.
	AnnounceRefresh time.Duration
	// FaultRetry is how soon an instance that could not install its VIPs tries again (default 5s).
	FaultRetry time.Duration
}

// Status is a point-in-time view of an instance, for /status and logs.
type Status struct {
	Name      string         `json:"name"`
	Interface string         `json:"interface"`
	VRID      uint8          `json:"vrid"`
	Version   uint8          `json:"version"`
	VIPs      []netip.Prefix `json:"vips"`
	State     string         `json:"state"`
	Priority  uint8          `json:"priority"`
	Master    netip.Addr     `json:"master,omitzero"`
	Since     time.Time      `json:"since"`
	Collision string         `json:"collision,omitempty"`
	Fault     string         `json:"fault,omitempty"`
	Tracks    []TrackResult  `json:"tracks,omitempty"`
}

// Instance runs one virtual router. Create it with New and run it with Run.
type Instance struct {
	cfg      Config
	log      *slog.Logger
	metrics  *Metrics
	onChange func(Status)

	mu     sync.Mutex
	status Status
}

// New validates cfg and returns an instance ready to Run. m may be nil (metrics
// are then kept but not exported); onChange, when set, is called after every
// status change from the instance's goroutine and must not block.
func New(cfg Config, m *Metrics, log *slog.Logger, onChange func(Status)) (*Instance, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Label == "" {
		cfg.Label = "vip"
	}
	if cfg.AnnounceRefresh == 0 {
		cfg.AnnounceRefresh = 60 * time.Second
	}
	if cfg.FaultRetry <= 0 {
		cfg.FaultRetry = 5 * time.Second
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "vrrp", "instance", cfg.Name, "vrid", cfg.VRID)
	i := &Instance{cfg: cfg, log: log, metrics: m, onChange: onChange}
	i.status = Status{Name: cfg.Name, Interface: cfg.Interface, VRID: cfg.VRID, Version: cfg.Version,
		VIPs: cfg.VIPs, State: StateInit.String(), Priority: cfg.Priority, Since: time.Now()}
	return i, nil
}

func (c *Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("vrrp: instance %q: %s: %s", c.Name, field, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Name == "":
		return errors.New("vrrp: instance name is empty")
	case c.Interface == "":
		return bad("interface", "is empty")
	case c.VRID == 0:
		return bad("vrid", "must be 1..255")
	case c.Version != 2 && c.Version != 3:
		return bad("version", "%d is not 2 or 3", c.Version)
	case c.Priority == 0:
		return bad("priority", "must be 1..255 (0 is reserved for a master that leaves)")
	case len(c.VIPs) == 0:
		return bad("vips", "at least one VIP is needed")
	case len(c.AuthPass) > 8:
		return bad("auth-pass", "%d bytes; VRRPv2 carries at most 8", len(c.AuthPass))
	case c.AuthPass != "" && c.Version == 3:
		return bad("auth-pass", "VRRPv3 has no authentication; drop it or use version 2")
	}
	v6 := c.VIPs[0].Addr().Is6()
	for _, v := range c.VIPs {
		if v.Addr().Is6() != v6 {
			return bad("vips", "%s is of another address family than %s; use one instance per family", v, c.VIPs[0])
		}
	}
	if v6 && c.Version == 2 {
		return bad("version", "VRRPv2 is IPv4 only; use version 3 for %s", c.VIPs[0])
	}
	for _, p := range c.UnicastPeers {
		if p.Is6() != v6 {
			return bad("unicast-peers", "%s is of another address family than the VIPs", p)
		}
	}
	probe := Packet{Version: c.Version, VRID: c.VRID, Priority: c.Priority, Interval: c.Interval, Addrs: c.vipAddrs()}
	src, dst := netip.IPv4Unspecified(), MulticastGroupV4
	if v6 {
		src, dst = netip.IPv6LinkLocalAllNodes(), MulticastGroupV6
	}
	if _, err := probe.Marshal(src, dst); err != nil {
		return bad("advert-interval", "%v", err)
	}
	return nil
}

func (c *Config) vipAddrs() []netip.Addr {
	out := make([]netip.Addr, len(c.VIPs))
	for i, v := range c.VIPs {
		out[i] = v.Addr()
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// Status returns the current status.
func (i *Instance) Status() Status {
	i.mu.Lock()
	defer i.mu.Unlock()
	s := i.status
	s.Tracks = slices.Clone(s.Tracks)
	return s
}

func (i *Instance) updateStatus(f func(*Status)) {
	i.mu.Lock()
	f(&i.status)
	s := i.status
	i.mu.Unlock()
	if i.onChange != nil {
		i.onChange(s)
	}
}

type received struct {
	v    verdict
	meta rxMeta
	at   time.Time // when it was read off the socket
}

// vipOwner and announcer are what the runner needs of VIPManager and
// Announcer; tests substitute failing or recording fakes.
type vipOwner interface {
	Add(netip.Prefix) error
	Remove(netip.Prefix) error
	RemoveStale([]netip.Prefix) ([]netip.Prefix, error)
}

type announcer interface {
	Announce([]netip.Addr) error
	Close() error
}

// runner holds what Run opens; it lives only for one Run call.
type runner struct {
	*Instance
	m        *Machine
	conn     conn
	vipMgr   vipOwner
	announce announcer
	tracks   *TrackSet
	ifi      *net.Interface
	src, dst netip.Addr
	peers    []netip.Addr
	buf      []byte

	nextAnnounce  time.Time
	announceSteps int
	faultRetry    time.Time
	vipFault      bool
	linkDown      bool
	trackFault    bool
	lastCollision time.Time
}

// Run runs the virtual router until ctx ends, then leaves MASTER with a
// priority-0 advert, removes its VIPs and closes its sockets.
func (i *Instance) Run(ctx context.Context) error {
	r, err := i.open(ctx)
	if err != nil {
		i.updateStatus(func(s *Status) { s.State = StateFault.String(); s.Fault = err.Error() })
		return err
	}
	defer r.close()
	return r.loop(ctx)
}

func (i *Instance) open(ctx context.Context) (*runner, error) {
	cfg := i.cfg
	ifi, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("vrrp: instance %s: interface %q: %w", cfg.Name, cfg.Interface, err)
	}
	v6 := cfg.VIPs[0].Addr().Is6()
	r := &runner{Instance: i, ifi: ifi, buf: make([]byte, 1500), peers: cfg.UnicastPeers}
	r.src, err = sourceAddr(ifi, cfg.VIPs, v6)
	if err != nil {
		return nil, err
	}
	group := MulticastGroupV4
	if v6 {
		group = MulticastGroupV6
	}
	r.dst = group
	vm, err := NewVIPManager(nil, cfg.Interface, cfg.Label)
	if err != nil {
		return nil, err
	}
	r.vipMgr = vm
	if removed, err := r.vipMgr.RemoveStale(cfg.VIPs); err != nil {
		i.log.Warn("removing stale VIPs failed", "err", err)
	} else if len(removed) > 0 {
		i.log.Info("removed stale VIPs left by an earlier run", "vips", removed)
	}
	an, err := NewAnnouncer(cfg.Interface)
	if err != nil {
		return nil, err
	}
	r.announce = an
	if r.tracks, err = NewTrackSet(cfg.Tracks); err != nil {
		r.announce.Close()
		return nil, fmt.Errorf("vrrp: instance %s: %w", cfg.Name, err)
	}
	if r.conn, err = openConn(ctx, ifi, group, len(cfg.UnicastPeers) == 0); err != nil {
		r.announce.Close()
		return nil, err
	}
	r.m = NewMachine(MachineConfig{
		Version: cfg.Version, Priority: cfg.Priority, Interval: cfg.Interval,
		Preempt: cfg.Preempt, PreemptDelay: cfg.PreemptDelay, Accept: cfg.Accept, Self: r.src,
	})
	return r, nil
}

func (r *runner) close() {
	r.conn.Close()
	r.announce.Close()
}

func (r *runner) filter() *rxFilter {
	f := &rxFilter{version: r.cfg.Version, vrid: r.cfg.VRID, ifIndex: r.ifi.Index, group: r.dst,
		interval: r.cfg.Interval, vips: r.cfg.vipAddrs()}
	if r.cfg.AuthPass != "" {
		f.authType, f.authData = AuthTypePass, PassAuth(r.cfg.AuthPass)
	}
	if len(r.peers) > 0 {
		f.peers = make(map[netip.Addr]bool, len(r.peers))
		for _, p := range r.peers {
			f.peers[p] = true
		}
	}
	return f
}

func (r *runner) loop(ctx context.Context) error {
	// The receiver outlives ctx: the handover on shutdown listens for the
	// new master's first advert.
	rxCtx, rxCancel := context.WithCancel(context.Background())
	defer rxCancel()
	rx := make(chan received, 16)
	go r.receive(rxCtx, r.filter(), rx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	trackCh := make(chan struct{}, 1)
	go func() {
		if err := r.tracks.Run(ctx, func() {
			select {
			case trackCh <- struct{}{}:
			default:
			}
		}); err != nil && ctx.Err() == nil {
			r.log.Error("tracking stopped", "err", err)
		}
	}()
	linkCh := r.watchLink(ctx)

	now := time.Now()
	// Tracks start unhealthy until they rise; apply that before the first advert.
	r.applyTracks(now, false)
	r.apply(now, r.m.Start(now))
	r.updateFault(now)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.resetTimer(timer)
		select {
		case <-ctx.Done():
			r.shutdown(rx)
			return nil
		case in := <-rx:
			r.handle(in.at, in)
		case <-trackCh:
			r.applyTracks(time.Now(), true)
		case up := <-linkCh:
			r.setLink(time.Now(), up)
		case <-timer.C:
			r.catchUp(rx)
			r.tick(time.Now())
		}
	}
}

// shutdown leaves MASTER with a priority-0 advert so a backup takes over at
// once, then removes the VIPs whatever the state. A master keeps answering
// for its VIPs until the new master's first advert arrives (or
// handoverWait passes): the new master installs the VIPs before it
// advertises, so clients never find the address unowned. keepalived drops
// the VIPs with the priority-0 advert, leaving a gap of the backup's skew
// time.
func (r *runner) shutdown(rx <-chan received) {
	now := time.Now()
	wasMaster := r.m.State() == StateMaster
	actions := r.m.Stop(now)
	if wasMaster {
		actions = slices.DeleteFunc(actions, func(a Action) bool { _, ok := a.(ActReleaseVIPs); return ok })
	}
	r.apply(now, actions)
	if wasMaster {
		r.awaitSuccessor(rx, time.After(r.handoverWait()))
	}
	for _, v := range r.cfg.VIPs {
		if err := r.vipMgr.Remove(v); err != nil {
			r.log.Error("removing VIP on exit failed", "vip", v, "err", err)
		}
	}
	r.log.Info("stopped")
}

// handoverWait bounds how long a leaving master holds its VIPs: a backup
// takes over within its skew time (less than one interval) of the
// priority-0 advert, so two intervals leave room for scheduling delays.
func (r *runner) handoverWait() time.Duration {
	return 2*r.cfg.Interval + 50*time.Millisecond
}

// awaitSuccessor returns when another router advertises a non-zero priority
// on our VRID, or when timeout fires.
func (r *runner) awaitSuccessor(rx <-chan received, timeout <-chan time.Time) {
	for {
		select {
		case in := <-rx:
			if in.v.Reason == "" && in.v.Packet.Priority > 0 {
				r.log.Info("handed over", "master", in.meta.Src)
				time.Sleep(handoverLinger)
				return
			}
		case <-timeout:
			r.log.Info("no successor advertised; releasing the VIPs")
			return
		}
	}
}

func (r *runner) resetTimer(t *time.Timer) {
	next := r.m.Deadline()
	for _, d := range []time.Time{r.nextAnnounce, r.faultRetry} {
		if !d.IsZero() && (next.IsZero() || d.Before(next)) {
			next = d
		}
	}
	wait := time.Hour
	if !next.IsZero() {
		wait = max(time.Until(next), 0)
	}
	t.Reset(wait)
}

func (r *runner) receive(ctx context.Context, f *rxFilter, out chan<- received) {
	name := r.cfg.Name
	for {
		payload, meta, err := r.conn.read(r.buf)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Error("receive failed", "err", err)
			}
			return
		}
		v := f.check(meta, payload)
		if v.Reason != "" && !v.Collision {
			r.metrics.drops.WithLabelValues(name, string(v.Reason)).Inc()
			continue
		}
		select {
		case out <- received{v: v, meta: meta, at: time.Now()}:
		case <-ctx.Done():
			return
		}
	}
}

// catchUp handles the adverts that arrived before a timer fired. A process
// starved of CPU wakes with its timer expired and the master's adverts still
// queued in the socket or the channel; declaring the master down before
// reading them is a false takeover. The wait is bounded so a flood of other
// traffic cannot stall the timers.
func (r *runner) catchUp(rx <-chan received) {
	for i := 0; i < 20 && r.conn.pending(); i++ {
		r.drain(rx)
		time.Sleep(time.Millisecond)
	}
	r.drain(rx)
}

// drain handles every advert already queued, without waiting.
func (r *runner) drain(rx <-chan received) {
	for {
		select {
		case in := <-rx:
			r.handle(in.at, in)
		default:
			return
		}
	}
}

func (r *runner) handle(now time.Time, in received) {
	if in.v.Collision {
		r.metrics.collisions.WithLabelValues(r.cfg.Name).Inc()
		msg := fmt.Sprintf("VRID %d collision: %s advertises %v, we hold %v; give one of the routers another VRID",
			r.cfg.VRID, in.meta.Src, in.v.Packet.Addrs, r.cfg.VIPs)
		if now.Sub(r.lastCollision) > 10*time.Second {
			r.log.Error("VRID collision", "peer", in.meta.Src, "peer_vips", in.v.Packet.Addrs, "vips", r.cfg.VIPs)
		}
		r.lastCollision = now
		r.updateStatus(func(s *Status) { s.Collision = msg })
		if in.v.Reason != "" {
			r.metrics.drops.WithLabelValues(r.cfg.Name, string(in.v.Reason)).Inc()
			return
		}
	}
	r.metrics.received.WithLabelValues(r.cfg.Name).Inc()
	wasMaster := r.m.State() == StateMaster
	r.apply(now, r.m.Receive(now, in.v.Packet, in.meta.Src))
	if wasMaster && r.m.State() == StateMaster && in.v.Packet.Priority > 0 && in.v.Packet.Priority <= r.m.Priority() {
		r.reassert(now, in.meta.Src)
	}
}

// reassert answers a router that believes it is master but ranks below us
// (lower priority, or equal priority and a lower address: it missed our
// adverts, e.g. while starved of CPU, or timed out together with us): an
// advert at once makes it step back without waiting for our next interval,
// and a fresh round of gratuitous ARP / NA pulls back any neighbour it
// announced itself to.
func (r *runner) reassert(now time.Time, peer netip.Addr) {
	r.log.Warn("a lower-ranked router claims MASTER; reasserting", "peer", peer)
	r.sendAdvert(r.m.Priority())
	r.announceSteps = 0
	r.sendAnnounce(now)
}

func (r *runner) tick(now time.Time) {
	if !r.faultRetry.IsZero() && !now.Before(r.faultRetry) {
		r.faultRetry = time.Time{}
		r.vipFault = false
		r.updateFault(now)
	}
	if !r.nextAnnounce.IsZero() && !now.Before(r.nextAnnounce) {
		r.sendAnnounce(now)
	}
	if !r.lastCollision.IsZero() && now.Sub(r.lastCollision) > 3*r.m.MasterInterval()+time.Second {
		r.lastCollision = time.Time{}
		r.updateStatus(func(s *Status) { s.Collision = "" })
	}
	r.apply(now, r.m.Tick(now))
}

func (r *runner) applyTracks(now time.Time, log bool) {
	prio, fault := r.tracks.Adjust(r.cfg.Priority)
	results := r.tracks.Results()
	for _, t := range results {
		v := 0.0
		if t.Healthy {
			v = 1
		}
		r.metrics.track.WithLabelValues(r.cfg.Name, t.Name).Set(v)
		if log {
			r.log.Info("track", "track", t.Name, "healthy", t.Healthy, "err", t.Err)
		}
	}
	r.updateStatus(func(s *Status) { s.Tracks = results })
	r.trackFault = fault
	r.apply(now, r.m.SetPriority(now, prio))
	if r.m.State() != StateInit {
		r.updateFault(now)
	}
}

func (r *runner) setLink(now time.Time, up bool) {
	if r.linkDown == !up {
		return
	}
	r.linkDown = !up
	r.log.Warn("link state changed", "up", up)
	r.updateFault(now)
}

// updateFault folds the three fault sources into the machine's fault flag.
func (r *runner) updateFault(now time.Time) {
	reason := ""
	switch {
	case r.linkDown:
		reason = "interface " + r.cfg.Interface + " is down"
	case r.vipFault:
		reason = "could not install the VIPs"
	case r.trackFault:
		reason = "a tracked check with weight 0 is failing"
	}
	fault := reason != ""
	if fault == (r.m.State() == StateFault) {
		return
	}
	r.updateStatus(func(s *Status) { s.Fault = reason })
	r.apply(now, r.m.SetFault(now, fault))
}

// becomeMasterOrder puts VIP installation before the first advert: peers
// (and a leaving master waiting for its successor) act on the advert, so
// the address must already be ours when it goes out.
func becomeMasterOrder(actions []Action) []Action {
	take := slices.IndexFunc(actions, func(a Action) bool { _, ok := a.(ActTakeVIPs); return ok })
	send := slices.IndexFunc(actions, func(a Action) bool { _, ok := a.(ActSendAdvert); return ok })
	if take < 0 || send < 0 || take < send {
		return actions
	}
	out := slices.Clone(actions)
	out[send], out[take] = out[take], out[send]
	return out
}

func (r *runner) apply(now time.Time, actions []Action) {
	for _, a := range becomeMasterOrder(actions) {
		switch a := a.(type) {
		case ActSendAdvert:
			r.sendAdvert(a.Priority)
		case ActTakeVIPs:
			if err := r.takeVIPs(); err != nil {
				r.metrics.vipErrors.WithLabelValues(r.cfg.Name).Inc()
				r.log.Error("cannot install VIPs; going to FAULT", "err", err, "retry_in", r.cfg.FaultRetry)
				r.vipFault = true
				r.faultRetry = now.Add(r.cfg.FaultRetry)
				r.updateFault(now)
				return
			}
		case ActReleaseVIPs:
			r.nextAnnounce = time.Time{}
			for _, v := range r.cfg.VIPs {
				if err := r.vipMgr.Remove(v); err != nil {
					r.metrics.vipErrors.WithLabelValues(r.cfg.Name).Inc()
					r.log.Error("removing VIP failed", "vip", v, "err", err)
				}
			}
		case ActAnnounce:
			r.announceSteps = 0
			r.nextAnnounce = now.Add(announceSettle)
		case ActStateChange:
			r.stateChanged(now, a)
		}
	}
	r.metrics.priority.WithLabelValues(r.cfg.Name).Set(float64(r.m.Priority()))
}

func (r *runner) takeVIPs() error {
	for _, v := range r.cfg.VIPs {
		if err := r.vipMgr.Add(v); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) stateChanged(now time.Time, a ActStateChange) {
	r.log.Info("state changed", "from", a.From, "to", a.To, "reason", a.Reason,
		"priority", r.m.Priority(), "master", r.m.MasterAddr(), "vip", r.cfg.VIPs)
	r.metrics.transitions.WithLabelValues(r.cfg.Name, a.To.String()).Inc()
	r.metrics.state.WithLabelValues(r.cfg.Name, strconv.Itoa(int(r.cfg.VRID))).Set(float64(stateGauge(a.To)))
	r.updateStatus(func(s *Status) {
		s.State = a.To.String()
		s.Since = now
		s.Priority = r.m.Priority()
		s.Master = r.m.MasterAddr()
	})
}

func stateGauge(s State) int {
	switch s {
	case StateBackup:
		return 1
	case StateMaster:
		return 2
	case StateFault:
		return 3
	}
	return 0
}

// announceSchedule is when gratuitous ARP / NA rounds go out after becoming
// master: once the takeover has settled, then twice more within the first
// seconds so a switch or neighbour that missed the first learns the move,
// then every AnnounceRefresh.
var announceSchedule = []time.Duration{0, 500 * time.Millisecond, 2 * time.Second}

// announceSettle delays the first announcement after a takeover. Routers of
// equal priority time out together and one steps back a moment later (tie
// break); had it announced, neighbours would keep its MAC, and Linux ignores
// a second update within its one-second ARP locktime. A few milliseconds
// let the loser learn it lost before it tells anyone.
const announceSettle = 5 * time.Millisecond

// handoverLinger is how long a leaving master keeps its VIPs after the
// successor's first advert: past the successor's announceSettle, so clients
// are told about the new owner before the old one stops answering.
const handoverLinger = 25 * time.Millisecond

func (r *runner) sendAnnounce(now time.Time) {
	if r.m.State() != StateMaster {
		r.nextAnnounce = time.Time{}
		return
	}
	if err := r.announce.Announce(r.cfg.vipAddrs()); err != nil {
		r.log.Warn("announce failed", "err", err)
	}
	r.announceSteps++
	switch {
	case r.announceSteps < len(announceSchedule):
		r.nextAnnounce = now.Add(announceSchedule[r.announceSteps] - announceSchedule[r.announceSteps-1])
	case r.cfg.AnnounceRefresh > 0:
		r.nextAnnounce = now.Add(r.cfg.AnnounceRefresh)
	default:
		r.nextAnnounce = time.Time{}
	}
}

func (r *runner) sendAdvert(prio uint8) {
	p := Packet{Version: r.cfg.Version, VRID: r.cfg.VRID, Priority: prio, Interval: r.cfg.Interval,
		Addrs: r.cfg.vipAddrs()}
	if r.cfg.AuthPass != "" {
		p.AuthType, p.AuthData = AuthTypePass, PassAuth(r.cfg.AuthPass)
	}
	targets := r.peers
	if len(targets) == 0 {
		targets = []netip.Addr{r.dst}
	}
	for _, dst := range targets {
		b, err := p.Marshal(r.src, dst)
		if err != nil {
			r.log.Error("encode advert", "err", err)
			return
		}
		if err := r.conn.write(b, r.src, dst); err != nil {
			r.log.Warn("send advert failed", "err", err)
			continue
		}
		r.metrics.sent.WithLabelValues(r.cfg.Name).Inc()
	}
}

// watchLink reports carrier changes of the instance's interface: a node whose
// link is down must not keep claiming MASTER when the link comes back while
// another node took over, so link down is a FAULT.
func (r *runner) watchLink(ctx context.Context) <-chan bool {
	out := make(chan bool, 1)
	updates := make(chan netlink.LinkUpdate, 8)
	if err := netlink.LinkSubscribeWithOptions(updates, ctx.Done(), netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) {
			if ctx.Err() == nil {
				r.log.Warn("link watch", "err", err)
			}
		},
	}); err != nil {
		r.log.Warn("cannot watch link state; link faults will not be detected", "err", err)
		return out
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case u, ok := <-updates:
				if !ok {
					return
				}
				if int(u.Index) != r.ifi.Index {
					continue
				}
				up := u.Attrs().OperState == netlink.OperUp || u.Attrs().OperState == netlink.OperUnknown
				select {
				case out <- up:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}
