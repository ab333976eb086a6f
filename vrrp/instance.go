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
	"sync/atomic"
	"time"
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
	// Unicast sends adverts to UnicastPeers only and accepts them only from
	// those, even while there are none yet (a lone first node, a day-2 node
	// that has not learned the others): SetUnicastPeers adds them later.
	// Without it, a non-empty UnicastPeers still means unicast.
	Unicast      bool
	UnicastPeers []netip.Addr // where adverts go in unicast
	Tracks       []TrackSpec  // weighted checks
	Label        string       // IPv4 address label suffix, default "vip"
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
	// Predecessor is, while master, the master that handed over to us
	// alive (ActStateChange.Predecessor); zero otherwise.
	Predecessor netip.Addr `json:"predecessor,omitzero"`
	// Holders are the other routers heard holding the VIPs lately (see
	// Machine.Holders), as of the latest change to the list: the master a
	// backup follows advertises on after its Last.
	Holders   []Holder      `json:"holders,omitempty"`
	Since     time.Time     `json:"since"`
	Collision string        `json:"collision,omitempty"`
	Fault     string        `json:"fault,omitempty"`
	Tracks    []TrackResult `json:"tracks,omitempty"`
	// Transport is "unicast" or "multicast"; Peers are the unicast peers.
	Transport string       `json:"transport"`
	Peers     []netip.Addr `json:"peers,omitempty"`
	// Strangers are the latest routers heard on our VRID in unicast that
	// are no peer: their adverts are dropped (unknown_peer), and this is
	// where a rogue router shows.
	Strangers []Stranger `json:"strangers,omitempty"`
}

// Transports, as Status.Transport names them.
const (
	TransportUnicast   = "unicast"
	TransportMulticast = "multicast"
)

// Stranger is a router that advertised on our VRID without being a unicast
// peer.
type Stranger struct {
	Addr     netip.Addr `json:"addr"`
	Priority uint8      `json:"priority"` // in its latest advert
	Count    uint64     `json:"count"`    // adverts dropped
	First    time.Time  `json:"first"`
	Last     time.Time  `json:"last"`

	logged time.Time // when it was last logged
}

// maxStrangers bounds the strangers kept in Status; the oldest leaves.
const maxStrangers = 8

// strangerLogEvery is how often one stranger is logged again.
const strangerLogEvery = time.Minute

// Instance runs one virtual router. Create it with New and run it with Run.
type Instance struct {
	cfg      Config
	log      *slog.Logger
	metrics  *Metrics
	onChange func(Status)

	move    chan string       // SetInterface's requests, latest only
	peerReq chan []netip.Addr // SetUnicastPeers' requests, latest only

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
	m.begin(cfg)
	i := &Instance{cfg: cfg, log: log, metrics: m, onChange: onChange,
		move: make(chan string, 1), peerReq: make(chan []netip.Addr, 1)}
	i.status = Status{Name: cfg.Name, Interface: cfg.Interface, VRID: cfg.VRID, Version: cfg.Version,
		VIPs: cfg.VIPs, State: StateInit.String(), Priority: cfg.Priority, Since: time.Now(),
		Transport: cfg.transport()}
	if cfg.unicast() {
		i.status.Peers = cleanPeers(cfg.UnicastPeers, cfg.VIPs[0].Addr().Is6(), netip.Addr{})
	}
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

// unicast reports whether the instance advertises by unicast.
func (c *Config) unicast() bool { return c.Unicast || len(c.UnicastPeers) > 0 }

func (c *Config) transport() string {
	if c.unicast() {
		return TransportUnicast
	}
	return TransportMulticast
}

func (c *Config) vipAddrs() []netip.Addr {
	out := make([]netip.Addr, len(c.VIPs))
	for i, v := range c.VIPs {
		out[i] = v.Addr()
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// SetInterface moves the instance to another interface while it runs (the
// node's address moved, e.g. onto a bridge): it leaves the old one as a
// master leaves on shutdown, re-opens its sockets on the new one and starts
// again as backup. Naming the current interface re-opens it if it was
// deleted and created again. Safe from any goroutine; never blocks.
func (i *Instance) SetInterface(name string) {
	for {
		select {
		case i.move <- name:
			return
		default:
		}
		select {
		case <-i.move: // replace an unread older request
		default:
		}
	}
}

// SetUnicastPeers replaces the unicast peers of a unicast instance (a node
// that joins later becomes a peer without a restart): adverts go to the new
// set and are accepted only from it. An instance that runs on multicast
// ignores it. Safe from any goroutine; never blocks.
func (i *Instance) SetUnicastPeers(peers []netip.Addr) {
	peers = slices.Clone(peers)
	for {
		select {
		case i.peerReq <- peers:
			return
		default:
		}
		select {
		case <-i.peerReq:
		default:
		}
	}
}

// Status returns the current status.
func (i *Instance) Status() Status {
	i.mu.Lock()
	defer i.mu.Unlock()
	s := i.status
	s.Tracks = slices.Clone(s.Tracks)
	s.Peers = slices.Clone(s.Peers)
	s.Strangers = slices.Clone(s.Strangers)
	return s
}

// stranger records an advert on our VRID from src, which is no peer, and
// says whether to log it: the first time, then at most once a minute per
// source. Called by the receivers; it does not call onChange (a rogue
// sending fast must not flood the cluster view).
func (i *Instance) stranger(src netip.Addr, prio uint8, now time.Time) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	ss := i.status.Strangers
	k := slices.IndexFunc(ss, func(s Stranger) bool { return s.Addr == src })
	if k < 0 {
		if len(ss) >= maxStrangers {
			oldest := 0
			for j := range ss {
				if ss[j].Last.Before(ss[oldest].Last) {
					oldest = j
				}
			}
			ss = slices.Delete(ss, oldest, oldest+1)
		}
		ss = append(ss, Stranger{Addr: src, First: now})
		k = len(ss) - 1
	}
	s := &ss[k]
	s.Priority, s.Last = prio, now
	s.Count++
	log := now.Sub(s.logged) >= strangerLogEvery
	if log {
		s.logged = now
	}
	i.status.Strangers = ss
	return log
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
	List() ([]netip.Prefix, error)
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

	// The receivers: one per opened socket, told apart by generation so a
	// socket closed on purpose is not taken for a failure. They outlive the
	// loop's context (the handover on shutdown listens for the successor)
	// and end with rxCtx; wg awaits them and every other goroutine.
	rxCtx    context.Context
	rx       chan received
	rxFailed chan rxFailure
	gen      int
	wg       sync.WaitGroup
	// filt is what the receivers check packets against; replaced when the
	// unicast peers change.
	filt atomic.Pointer[rxFilter]

	want          string        // the interface the instance should be on
	detached      string        // non-empty while the sockets are closed: why (a FAULT reason)
	reattachAt    time.Time     // when to try opening them again
	reattachDelay time.Duration // backoff between tries
	nextCheck     time.Time     // backstop: compare the kernel's addresses with ours

	held          bool   // the VIPs are installed (ActTakeVIPs succeeded, no release since)
	noSource      string // non-empty while the interface has no address to advertise from
	nextAnnounce  time.Time
	announceSteps int
	faultRetry    time.Time
	vipFault      bool
	linkDown      bool
	trackFault    bool
	lastCollision time.Time
}

// rxFailure is a receiver's read error, tagged with its socket's generation.
type rxFailure struct {
	gen int
	err error
}

// FaultTrack is Status.Fault while a tracked check of weight 0 fails: the
// instance steps aside by design (an ingress VIP on a node without a ready
// router), which is no malfunction of the instance itself.
const FaultTrack = "a tracked check with weight 0 is failing"

// checkEvery is the backstop period of the address check; netlink events
// normally trigger it at once.
const checkEvery = 2 * time.Second

// maxReattachDelay caps the backoff between attempts to re-open sockets.
const maxReattachDelay = 5 * time.Second

// Run runs the virtual router until ctx ends, then leaves MASTER with a
// priority-0 advert, removes its VIPs and closes its sockets.
//
// Every goroutine it starts is awaited before it returns. What other
// programs do to the kernel state it relies on is repaired: a VIP deleted
// from under a master is put back, an interface that loses the address
// adverts go out from puts the instance in FAULT until one is back, a
// receive socket that fails puts it in FAULT (never MASTER: a deaf backup
// would declare the master down) until it is re-opened, and SetInterface
// moves it to another interface.
func (i *Instance) Run(ctx context.Context) error {
	r, err := i.open()
	if err != nil {
		i.updateStatus(func(s *Status) { s.State = StateFault.String(); s.Fault = err.Error() })
		return err
	}
	rxCtx, rxCancel := context.WithCancel(context.Background())
	r.rxCtx = rxCtx
	err = r.loop(ctx)
	rxCancel()
	r.closeSockets()
	r.wg.Wait()
	return err
}

func (i *Instance) open() (*runner, error) {
	cfg := i.cfg
	r := &runner{Instance: i, peers: i.Status().Peers, want: cfg.Interface,
		rx: make(chan received, 16), rxFailed: make(chan rxFailure, 4)}
	r.dst = MulticastGroupV4
	if cfg.VIPs[0].Addr().Is6() {
		r.dst = MulticastGroupV6
	}
	var err error
	if r.tracks, err = NewTrackSet(cfg.Tracks); err != nil {
		return nil, fmt.Errorf("vrrp: instance %s: %w", cfg.Name, err)
	}
	if err := r.attach(cfg.Interface); err != nil {
		return nil, err
	}
	r.m = NewMachine(MachineConfig{
		Version: cfg.Version, Priority: cfg.Priority, Interval: cfg.Interval,
		Preempt: cfg.Preempt, PreemptDelay: cfg.PreemptDelay, Accept: cfg.Accept, Self: r.src,
	})
	return r, nil
}

// attach opens everything the instance needs on interface name: the VIP
// manager (removing stale copies of our VIPs there), the announcer, the
// advert source address and the socket. On error nothing stays open.
func (r *runner) attach(name string) error {
	cfg := r.cfg
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return fmt.Errorf("vrrp: instance %s: interface %q: %w", cfg.Name, name, err)
	}
	// The link's state is the new interface's from now on: the carrier an
	// earlier interface lost (a bridge emptied before it was deleted) must
	// not keep this one in FAULT, and no event comes for a link that
	// does not change.
	up, err := linkUp(ifi.Index)
	if err != nil {
		return fmt.Errorf("vrrp: instance %s: interface %q: link state: %w", cfg.Name, name, err)
	}
	vm, err := NewVIPManager(nil, name, cfg.Label)
	if err != nil {
		return err
	}
	addrs, err := vm.List()
	if err != nil {
		return fmt.Errorf("vrrp: instance %s: %w", cfg.Name, err)
	}
	src, ok := pickSource(addrs, cfg.VIPs, r.dst.Is6(), cfg.unicast(), r.src)
	if !ok {
		fam := "IPv4"
		if r.dst.Is6() && !cfg.unicast() {
			fam = "IPv6 link-local"
		} else if r.dst.Is6() {
			fam = "IPv6 (global, as unicast peers know it)"
		}
		return fmt.Errorf("vrrp: %s has no %s address to send adverts from", name, fam)
	}
	if removed, err := vm.RemoveStale(cfg.VIPs); err != nil {
		r.log.Warn("removing stale VIPs failed", "interface", name, "err", err)
	} else if len(removed) > 0 {
		r.log.Info("removed stale VIPs left by an earlier run", "interface", name, "vips", removed)
	}
	an, err := NewAnnouncer(name)
	if err != nil {
		return err
	}
	// The group is joined in unicast too: nothing is sent there, but a
	// router on our VRID that is no peer shows up (Status.Strangers).
	c, err := openConn(context.Background(), ifi, r.dst, true)
	if err != nil {
		an.Close()
		return err
	}
	r.ifi, r.vipMgr, r.announce, r.conn, r.src = ifi, vm, an, c, src
	r.linkDown = !up
	if r.m != nil {
		r.m.SetSelf(src)
	}
	r.updateStatus(func(s *Status) { s.Interface = name })
	return nil
}

// closeSockets closes the socket and the announcer; the receiver of that
// socket then ends.
func (r *runner) closeSockets() {
	if r.conn != nil {
		r.conn.Close()
	}
	if r.announce != nil {
		r.announce.Close()
	}
}

func (r *runner) filter() *rxFilter {
	f := &rxFilter{version: r.cfg.Version, vrid: r.cfg.VRID, ifIndex: r.ifi.Index, group: r.dst,
		interval: r.cfg.Interval, vips: r.cfg.vipAddrs()}
	if r.cfg.AuthPass != "" {
		f.authType, f.authData = AuthTypePass, PassAuth(r.cfg.AuthPass)
	}
	if r.cfg.unicast() {
		f.unicast = true
		f.peers = make(map[netip.Addr]bool, len(r.peers))
		for _, p := range r.peers {
			f.peers[p] = true
		}
	}
	return f
}

func (r *runner) loop(ctx context.Context) error {
	r.startReceiver()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	trackCh := make(chan struct{}, 1)
	trackErr := make(chan error, 1)
	r.wg.Go(func() {
		err := r.tracks.Run(ctx, func() {
			select {
			case trackCh <- struct{}{}:
			default:
			}
		})
		if err != nil && ctx.Err() == nil {
			trackErr <- err
		}
	})
	linkCh := make(chan linkEvent, 8)
	addrCh := make(chan struct{}, 1)
	r.wg.Go(func() { r.watchKernel(ctx, linkCh, addrCh) })

	now := time.Now()
	// Tracks start unhealthy until they rise; apply that before the first advert.
	r.applyTracks(now, false)
	r.apply(now, r.m.Start(now))
	r.updateFault(now)
	r.nextCheck = now.Add(checkEvery)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.resetTimer(timer)
		select {
		case <-ctx.Done():
			r.shutdown(r.rx)
			return nil
		case err := <-trackErr:
			// Tracking cannot stop on its own; if it does, the priority
			// it set would be frozen. Stop the instance loudly instead.
			r.shutdown(r.rx)
			return fmt.Errorf("vrrp: instance %s: tracking stopped: %w", r.cfg.Name, err)
		case in := <-r.rx:
			r.handle(in.at, in)
		case f := <-r.rxFailed:
			if f.gen == r.gen && r.detached == "" {
				r.receiverFailed(time.Now(), f.err)
			}
		case <-trackCh:
			r.applyTracks(time.Now(), true)
		case ev := <-linkCh:
			r.linkChanged(time.Now(), ev)
		case <-addrCh:
			if r.detached != "" && !r.reattachAt.IsZero() {
				// The interface may just have got the address it lacked.
				r.reattach(time.Now(), repairInterface)
				continue
			}
			r.checkAddrs(time.Now())
		case name := <-r.move:
			r.moveTo(time.Now(), name)
		case peers := <-r.peerReq:
			r.setPeers(peers)
		case <-timer.C:
			r.catchUp(r.rx)
			r.tick(time.Now())
		}
	}
}

// startReceiver starts the reader of the current socket.
func (r *runner) startReceiver() {
	r.gen++
	r.filt.Store(r.filter())
	gen, c := r.gen, r.conn
	r.wg.Go(func() { r.receive(gen, c) })
}

// setPeers applies SetUnicastPeers.
func (r *runner) setPeers(peers []netip.Addr) {
	if !r.cfg.unicast() {
		r.log.Warn("ignoring unicast peers: this instance advertises by multicast", "peers", peers)
		return
	}
	peers = cleanPeers(peers, r.dst.Is6(), r.src)
	if slices.Equal(peers, r.peers) {
		return
	}
	r.log.Info("unicast peers changed", "peers", peers, "was", r.peers)
	r.peers = peers
	r.filt.Store(r.filter())
	r.updateStatus(func(s *Status) { s.Peers = slices.Clone(peers) })
}

// cleanPeers sorts peers of one family without self and repeats.
func cleanPeers(peers []netip.Addr, v6 bool, self netip.Addr) []netip.Addr {
	peers = slices.DeleteFunc(slices.Clone(peers), func(p netip.Addr) bool { return p.Is6() != v6 || p == self })
	slices.SortFunc(peers, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(peers)
}

// receiverFailed puts the instance in FAULT with its socket closed, and
// schedules re-opening it.
func (r *runner) receiverFailed(now time.Time, err error) {
	r.metrics.repairs.WithLabelValues(r.cfg.Name, repairReceiver).Inc()
	r.log.Error("receiving adverts failed; FAULT until the socket is re-opened (a deaf router must never become master)",
		"interface", r.ifi.Name, "err", err)
	r.detach(now, fmt.Sprintf("receiving adverts on %s failed: %v", r.ifi.Name, err))
}

// detach enters FAULT for reason (a master says goodbye with priority 0 on
// the old socket and releases its VIPs), closes the sockets, and schedules
// an attempt to open them again.
func (r *runner) detach(now time.Time, reason string) {
	r.detached = reason
	r.updateFault(now)
	r.closeSockets()
	r.reattachDelay = 100 * time.Millisecond
	r.reattachAt = now.Add(r.reattachDelay)
}

// reattach tries to open the sockets on r.want again; on failure it stays
// in FAULT and tries again later, backing off.
func (r *runner) reattach(now time.Time, kind string) {
	if err := r.attach(r.want); err != nil {
		r.reattachDelay = min(2*r.reattachDelay, maxReattachDelay)
		r.reattachAt = now.Add(r.reattachDelay)
		r.detached = err.Error()
		r.updateFault(now)
		r.log.Warn("cannot open the interface yet; staying in FAULT", "interface", r.want, "err", err, "retry_in", r.reattachDelay)
		return
	}
	r.metrics.repairs.WithLabelValues(r.cfg.Name, kind).Inc()
	r.log.Warn("sockets re-opened; rejoining as backup", "interface", r.want, "source", r.src)
	r.detached, r.reattachAt = "", time.Time{}
	r.noSource = ""
	r.startReceiver()
	r.updateFault(now)
}

// moveTo handles SetInterface: a move to another interface, or a re-open of
// the current one when it was deleted and created again.
func (r *runner) moveTo(now time.Time, name string) {
	if name == "" {
		return
	}
	if name == r.want && r.detached == "" {
		if ifi, err := net.InterfaceByName(name); err == nil && ifi.Index == r.ifi.Index {
			r.checkAddrs(now)
			return
		}
	}
	r.log.Warn("moving to another interface", "from", r.want, "to", name)
	if r.detached == "" {
		r.detach(now, fmt.Sprintf("moving from %s to %s", r.want, name))
	}
	r.want = name
	r.reattach(now, repairInterface)
}

// linkChanged follows the instance's interface: carrier changes, deletion,
// and a new interface of the same name (a bond or bridge rebuilt), which is
// re-opened.
func (r *runner) linkChanged(now time.Time, ev linkEvent) {
	switch {
	case r.detached == "" && ev.index == r.ifi.Index && ev.deleted:
		r.log.Warn("interface deleted; FAULT until it is back", "interface", r.ifi.Name)
		r.detach(now, "interface "+r.ifi.Name+" was deleted")
	case r.detached == "" && ev.index == r.ifi.Index:
		r.setLink(now, ev.up)
	case r.detached != "" && ev.name == r.want && !ev.deleted:
		r.reattach(now, repairInterface)
	}
}

// checkAddrs compares the interface's addresses with what the instance
// needs: the advert source (FAULT without one; a new one is adopted) and,
// while master, every VIP (one deleted by someone else is put back at once
// and announced).
func (r *runner) checkAddrs(now time.Time) {
	r.nextCheck = now.Add(checkEvery)
	if r.detached != "" {
		return
	}
	addrs, err := r.vipMgr.List()
	if err != nil {
		r.log.Debug("listing the interface's addresses failed", "err", err)
		return
	}
	src, ok := pickSource(addrs, r.cfg.VIPs, r.dst.Is6(), r.cfg.unicast(), r.src)
	switch {
	case !ok && r.noSource == "":
		r.metrics.repairs.WithLabelValues(r.cfg.Name, repairSourceGone).Inc()
		r.noSource = fmt.Sprintf("interface %s lost %s, the address adverts are sent from", r.ifi.Name, r.src)
		r.log.Warn("the advert source address is gone; FAULT until the interface has one again",
			"interface", r.ifi.Name, "source", r.src)
		r.updateFault(now)
		return
	case !ok:
		return
	case src != r.src:
		r.metrics.repairs.WithLabelValues(r.cfg.Name, repairSource).Inc()
		r.log.Warn("the advert source address changed", "interface", r.ifi.Name, "was", r.src, "now", src)
		r.src = src
		r.m.SetSelf(src)
	}
	if r.noSource != "" {
		r.log.Warn("the interface has an address again; rejoining", "interface", r.ifi.Name, "source", src)
		r.noSource = ""
		r.updateFault(now)
	}
	if !r.held || r.m.State() != StateMaster {
		return
	}
	missing := missingVIPs(addrs, r.cfg.VIPs)
	for _, v := range missing {
		if err := r.vipMgr.Add(v); err != nil {
			r.metrics.vipErrors.WithLabelValues(r.cfg.Name).Inc()
			r.log.Error("a VIP was removed from under us and cannot be put back", "vip", v, "err", err)
			continue
		}
		r.metrics.repairs.WithLabelValues(r.cfg.Name, repairVIP).Inc()
		r.log.Warn("a VIP was removed from under us; put back", "vip", v, "interface", r.ifi.Name)
	}
	if len(missing) > 0 {
		// Neighbours may have dropped our MAC meanwhile: tell them again.
		r.announceSteps = 0
		r.sendAnnounce(now)
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
	r.setHeld(false)
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
	for _, d := range []time.Time{r.nextAnnounce, r.faultRetry, r.reattachAt, r.nextCheck} {
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

// receive reads socket c until it fails, then reports the failure (the
// loop tells a socket it closed on purpose by its generation) and returns.
func (r *runner) receive(gen int, c conn) {
	name := r.cfg.Name
	buf := make([]byte, 1500)
	for {
		payload, meta, err := c.read(buf)
		if err != nil {
			select {
			case r.rxFailed <- rxFailure{gen: gen, err: err}:
			case <-r.rxCtx.Done():
			}
			return
		}
		v := r.filt.Load().check(meta, payload)
		if v.Reason == ReasonUnknownPeer {
			if r.stranger(meta.Src, v.Packet.Priority, time.Now()) {
				r.log.Warn("a router that is no unicast peer advertises on our VRID; its adverts are dropped",
					"source", meta.Src, "priority", v.Packet.Priority, "peers", r.filt.Load().peerList())
			}
		}
		if v.Reason != "" && !v.Collision {
			r.metrics.drops.WithLabelValues(name, string(v.Reason)).Inc()
			continue
		}
		select {
		case r.rx <- received{v: v, meta: meta, at: time.Now()}:
		case <-r.rxCtx.Done():
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
	r.masterLearned()
	r.holdersLearned(now)
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
	if !r.reattachAt.IsZero() && !now.Before(r.reattachAt) {
		r.reattachAt = time.Time{}
		r.reattach(now, repairInterface)
	}
	if !r.nextCheck.IsZero() && !now.Before(r.nextCheck) {
		r.checkAddrs(now)
	}
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
	r.holdersLearned(now) // a holder's silence ages into a verdict, or out of memory
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

// updateFault folds the fault sources into the machine's fault flag and the
// status's reason.
func (r *runner) updateFault(now time.Time) {
	reason := ""
	switch {
	case r.detached != "":
		reason = r.detached
	case r.linkDown:
		reason = "interface " + r.want + " is down"
	case r.noSource != "":
		reason = r.noSource
	case r.vipFault:
		reason = "could not install the VIPs"
	case r.trackFault:
		reason = FaultTrack
	}
	fault := reason != ""
	if r.Status().Fault != reason {
		r.updateStatus(func(s *Status) { s.Fault = reason })
	}
	if fault == (r.m.State() == StateFault) {
		return
	}
	r.apply(now, r.m.SetFault(now, fault))
}

func (r *runner) apply(now time.Time, actions []Action) {
	for _, a := range actions {
		switch a := a.(type) {
		case ActSendAdvert:
			r.sendAdvert(a.Priority)
		case ActTakeVIPs:
			if err := r.takeVIPs(); err != nil {
				r.setHeld(false)
				r.metrics.vipErrors.WithLabelValues(r.cfg.Name).Inc()
				r.log.Error("cannot install VIPs; going to FAULT", "err", err, "retry_in", r.cfg.FaultRetry)
				r.vipFault = true
				r.faultRetry = now.Add(r.cfg.FaultRetry)
				r.updateFault(now)
				return
			}
			r.setHeld(true)
		case ActReleaseVIPs:
			r.setHeld(false)
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
		case ActPredecessor:
			r.log.Info("the master we took over from by its silence is alive: its connections are its own", "predecessor", a.Addr)
			r.updateStatus(func(s *Status) { s.Predecessor = a.Addr })
		}
	}
	r.metrics.priority.WithLabelValues(r.cfg.Name).Set(float64(r.m.Priority()))
}

// setHeld records whether the VIPs are installed, in the runner and in
// appliance_vrrp_vip_held.
func (r *runner) setHeld(held bool) {
	r.held = held
	r.metrics.setHeld(r.cfg, held)
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
		s.Predecessor = a.Predecessor
		s.Holders = r.m.Holders(now)
	})
}

// holdersLearned publishes the routers heard holding the VIPs when who
// they are, or whether they ended alive, changed; their times alone
// (every advert of the master a backup follows) are not worth a new
// status.
func (r *runner) holdersLearned(now time.Time) {
	hs := r.m.Holders(now)
	r.mu.Lock()
	same := sameHolders(r.status.Holders, hs)
	r.mu.Unlock()
	if !same {
		r.updateStatus(func(s *Status) { s.Holders = hs })
	}
}

// masterLearned publishes the master a backup follows when it changes
// (adverts from a new master, or none after a priority-0 release): state
// changes alone would leave a backup that started before the master
// showing none.
func (r *runner) masterLearned() {
	if r.m.State() != StateBackup {
		return
	}
	m := r.m.MasterAddr()
	r.mu.Lock()
	same := r.status.Master == m
	r.mu.Unlock()
	if !same {
		r.updateStatus(func(s *Status) { s.Master = m })
	}
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
	if !r.cfg.unicast() {
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
