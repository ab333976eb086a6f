package vrrp

import (
	"fmt"
	"net/netip"
	"time"
)

// State is a VRRP router state. Fault is not an RFC state: it is where an
// instance waits, silent and without VIPs, while its interface or a tracked
// check says it must not serve.
type State uint8

// States of a Machine.
const (
	StateInit State = iota
	StateBackup
	StateMaster
	StateFault
)

func (s State) String() string {
	switch s {
	case StateInit:
		return "INIT"
	case StateBackup:
		return "BACKUP"
	case StateMaster:
		return "MASTER"
	case StateFault:
		return "FAULT"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// ParseState reads back the name String gives a state, as Status.State
// carries it (a string there, so /status and its readers keep the text);
// ok is false for any other text, the "State(n)" form included.
func ParseState(name string) (s State, ok bool) {
	switch name {
	case "INIT":
		return StateInit, true
	case "BACKUP":
		return StateBackup, true
	case "MASTER":
		return StateMaster, true
	case "FAULT":
		return StateFault, true
	}
	return 0, false
}

// MarshalText writes the state's name: a state logged through a JSON
// handler (as `appliance run` logs in its pod) or put in any JSON document
// reads "MASTER", not 2. slog's text handler uses String already.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// OwnerPriority is the priority of the router that owns the virtual
// addresses; it always preempts and tracking never moves it.
const OwnerPriority = 255

// MachineConfig is what the state machine needs to know of an instance.
type MachineConfig struct {
	Version      uint8         // 2 or 3; 0 means 3
	Priority     uint8         // base priority 1..255; 255 = address owner; 0 means 100
	Interval     time.Duration // our advert interval; 0 means 1s
	Preempt      bool          // take over from a live master of lower priority
	PreemptDelay time.Duration // how long a lower-priority live master is tolerated before preempting
	Accept       bool          // RFC 5798 Accept_Mode; carried for the caller, no effect on transitions
	Self         netip.Addr    // our primary address on the interface: the equal-priority tie-break
}

// Validate reports a configuration the machine cannot run as given.
func (c MachineConfig) Validate() error {
	if c.Version != 0 && c.Version != 2 && c.Version != 3 {
		return fmt.Errorf("vrrp: machine: version %d: want 2 or 3", c.Version)
	}
	if c.Interval < 0 {
		return fmt.Errorf("vrrp: machine: interval %v is negative", c.Interval)
	}
	if c.PreemptDelay < 0 {
		return fmt.Errorf("vrrp: machine: preempt delay %v is negative", c.PreemptDelay)
	}
	if !c.Self.IsValid() {
		return fmt.Errorf("vrrp: machine: our own address is required for the tie-break")
	}
	return nil
}

// Action is something the caller must do on behalf of the machine, in the
// order returned: the order is part of the contract (VIPs are installed
// before the advert that claims them).
type Action interface{ isAction() }

// ActSendAdvert: send an advertisement with this priority (0 when leaving).
type ActSendAdvert struct{ Priority uint8 }

// ActTakeVIPs: install the virtual addresses. Never sent twice without an
// ActReleaseVIPs in between.
type ActTakeVIPs struct{}

// ActReleaseVIPs: remove the virtual addresses. Only sent after ActTakeVIPs.
type ActReleaseVIPs struct{}

// ActAnnounce: send gratuitous ARP / unsolicited NA for the virtual addresses.
type ActAnnounce struct{}

// ActPredecessor: the master we took over from by its silence (no
// Predecessor then) turned out alive: it still advertised, ranked below us,
// soon after the takeover (a router starved of CPU, a lost advert burst).
// Its connections are its own, as with ActStateChange.Predecessor.
type ActPredecessor struct{ Addr netip.Addr }

// ActStateChange reports a transition; it comes first among the actions of
// the call that caused it. Reason is one of the Transition* words, short and
// stable, fit for logs and metric labels.
type ActStateChange struct {
	From, To State
	Reason   string
	// Predecessor, on becoming master, is the master that handed over
	// alive: it sent priority 0, or it advertised a lower priority until
	// we preempted it. Its open connections are still its own, so the new
	// master can pass their packets back to it. Zero when the old master
	// went silent (it may be dead) or none was known.
	Predecessor netip.Addr
}

func (ActSendAdvert) isAction()  {}
func (ActTakeVIPs) isAction()    {}
func (ActReleaseVIPs) isAction() {}
func (ActAnnounce) isAction()    {}
func (ActStateChange) isAction() {}
func (ActPredecessor) isAction() {}

// Transition reasons carried by ActStateChange.
const (
	TransitionStart        = "start"           // Initialize: backup, or master as address owner
	TransitionStop         = "stop"            // Stop
	TransitionMasterDown   = "master_down"     // Master_Down_Timer expired
	TransitionHigherPrio   = "higher_priority" // a master advertised a higher priority
	TransitionTieBreak     = "tie_break"       // equal priority, the peer's address is higher
	TransitionFault        = "fault"           // SetFault(true)
	TransitionFaultCleared = "fault_cleared"   // SetFault(false)
)

// Machine is the RFC 5798 state machine of one virtual router, with time
// passed in: it holds the Adver_Timer and Master_Down_Timer as deadlines and
// the caller calls Tick when Deadline passes. It is not safe for concurrent
// use; one goroutine owns it.
type Machine struct {
	cfg      MachineConfig
	state    State
	priority uint8 // effective priority (tracking applied)

	masterAdverInterval time.Duration // v3: learned from the master; v2: ours
	masterAddr          netip.Addr

	adverAt      time.Time // Adver_Timer, when master
	masterDownAt time.Time // Master_Down_Timer, when backup
	lowerSince   time.Time // backup: when a lower-priority master was first seen (PreemptDelay)
	holding      bool      // VIPs taken and not yet released

	// Backup: a master that is handing over alive (see
	// ActStateChange.Predecessor): leaving sent priority 0; lower kept
	// advertising below us, last at lowerAt, while we wait to preempt it.
	leaving netip.Addr
	lower   netip.Addr
	lowerAt time.Time

	// Master: when we took over, and whether a predecessor is known
	// (ActStateChange.Predecessor or ActPredecessor).
	masterSince time.Time
	hasPred     bool

	// holders are the routers heard advertising lately (see Holders).
	holders []holderRec
}

// NewMachine returns a machine in StateInit. Zero Version, Priority and
// Interval take the defaults 3, 100 and 1s; see MachineConfig.Validate.
func NewMachine(cfg MachineConfig) *Machine {
	if cfg.Version == 0 {
		cfg.Version = 3
	}
	if cfg.Priority == 0 {
		cfg.Priority = 100
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.PreemptDelay < 0 {
		cfg.PreemptDelay = 0
	}
	return &Machine{cfg: cfg, priority: cfg.Priority, masterAdverInterval: cfg.Interval}
}

// Config returns the configuration in force (defaults applied).
func (m *Machine) Config() MachineConfig { return m.cfg }

// State returns the current state.
func (m *Machine) State() State { return m.state }

// Priority returns the effective priority (base priority with tracking).
func (m *Machine) Priority() uint8 { return m.priority }

// MasterAddr returns the address of the current master: Self when we are
// master, the last accepted advert's source when backup, invalid when unknown.
func (m *Machine) MasterAddr() netip.Addr {
	if m.state == StateMaster {
		return m.cfg.Self
	}
	return m.masterAddr
}

// MasterInterval returns Master_Adver_Interval: the advert interval of the
// current master (ours when we are master, and always ours for v2).
func (m *Machine) MasterInterval() time.Duration {
	if m.state == StateMaster {
		return m.cfg.Interval
	}
	return m.masterAdverInterval
}

// Deadline returns when Tick must next be called; zero when no timer runs
// (Init, Fault).
func (m *Machine) Deadline() time.Time {
	switch m.state {
	case StateMaster:
		return m.adverAt
	case StateBackup:
		return m.masterDownAt
	}
	return time.Time{}
}

// skew is Skew_Time: (256-Priority) * Master_Adver_Interval / 256 for v3;
// v2 uses one second in place of the interval (RFC 3768 6.1).
func (m *Machine) skew() time.Duration {
	base := m.masterAdverInterval
	if m.cfg.Version == 2 {
		base = time.Second
	}
	return time.Duration(256-int(m.priority)) * base / 256
}

// MasterDownInterval is 3 * Master_Adver_Interval + Skew_Time.
func (m *Machine) MasterDownInterval() time.Duration {
	return 3*m.masterAdverInterval + m.skew()
}

func (m *Machine) preempts() bool {
	return m.cfg.Preempt || m.priority == OwnerPriority
}

// Start leaves Init (RFC 5798 6.4.1): the address owner becomes master at
// once; anyone else becomes backup and waits Master_Down_Interval. It does
// nothing outside Init.
func (m *Machine) Start(now time.Time) []Action {
	if m.state != StateInit {
		return nil
	}
	return m.initialize(now, TransitionStart)
}

func (m *Machine) initialize(now time.Time, reason string) []Action {
	m.masterAdverInterval = m.cfg.Interval
	m.masterAddr = netip.Addr{}
	if m.priority == OwnerPriority {
		return m.becomeMaster(now, reason)
	}
	return m.becomeBackup(now, m.cfg.Interval, netip.Addr{}, reason)
}

// Stop shuts the router down: a master sends priority 0 so a backup takes
// over after its skew alone, and releases the VIPs. Any state goes to Init.
func (m *Machine) Stop(now time.Time) []Action {
	if m.state == StateInit {
		return nil
	}
	return m.leave(StateInit, TransitionStop)
}

// SetFault enters or leaves FAULT. Entering behaves as Stop for a master;
// in FAULT adverts and ticks are ignored. Leaving re-runs Initialize: backup
// with a fresh Master_Down_Timer (master at once for the address owner).
// Entering from Init is allowed, for an interface already down at start.
func (m *Machine) SetFault(now time.Time, fault bool) []Action {
	switch {
	case fault && m.state != StateFault:
		return m.leave(StateFault, TransitionFault)
	case !fault && m.state == StateFault:
		return m.initialize(now, TransitionFaultCleared)
	}
	return nil
}

func (m *Machine) leave(to State, reason string) []Action {
	from := m.state
	acts := []Action{ActStateChange{From: from, To: to, Reason: reason}}
	if from == StateMaster {
		acts = append(acts, ActSendAdvert{Priority: 0})
	}
	acts = m.release(acts)
	m.state = to
	m.adverAt, m.masterDownAt, m.lowerSince = time.Time{}, time.Time{}, time.Time{}
	m.masterAddr = netip.Addr{}
	m.forgetHandover()
	return acts
}

// forgetHandover drops what a backup knew of a master handing over.
func (m *Machine) forgetHandover() {
	m.leaving, m.lower, m.lowerAt = netip.Addr{}, netip.Addr{}, time.Time{}
}

// SetSelf changes our own address (the tie-break) after the interface's
// address changed; the caller keeps the machine in FAULT while it has none.
func (m *Machine) SetSelf(a netip.Addr) { m.cfg.Self = a }

// SetPriority sets the effective priority after tracking. It is clamped to
// 1..254 and ignored for the address owner, whose 255 never moves. A master
// advertises the new priority at once so backups can preempt without
// waiting for the next Adver_Timer.
func (m *Machine) SetPriority(now time.Time, p uint8) []Action {
	if m.cfg.Priority == OwnerPriority {
		return nil
	}
	p = min(max(p, 1), OwnerPriority-1)
	if p == m.priority {
		return nil
	}
	m.priority = p
	if m.state == StateMaster {
		m.adverAt = now.Add(m.cfg.Interval)
		return []Action{ActSendAdvert{Priority: p}}
	}
	return nil
}

// Receive handles an advert for our VRID that passed the transport's checks
// (TTL, auth, family, interval for v2). src is the IP source address.
func (m *Machine) Receive(now time.Time, p Packet, src netip.Addr) []Action {
	if m.state == StateBackup || m.state == StateMaster {
		m.heard(now, src, p)
	}
	switch m.state {
	case StateBackup:
		return m.receiveBackup(now, p, src)
	case StateMaster:
		return m.receiveMaster(now, p, src)
	}
	return nil
}

func (m *Machine) receiveBackup(now time.Time, p Packet, src netip.Addr) []Action {
	if p.Priority == 0 {
		// The master is leaving: wait only the skew, so the highest
		// priority backup (smallest skew) speaks first.
		m.masterAddr = netip.Addr{}
		m.lowerSince = time.Time{}
		m.masterDownAt = now.Add(m.skew())
		m.leaving = src
		return nil
	}
	lower := p.Priority < m.priority
	if lower && m.preempts() {
		m.lower, m.lowerAt = src, now
		if m.cfg.PreemptDelay <= 0 {
			return nil // let Master_Down_Timer run out and take over
		}
		if m.lowerSince.IsZero() {
			m.lowerSince = now
		}
		if now.Sub(m.lowerSince) >= m.cfg.PreemptDelay {
			return nil
		}
		// Still within PreemptDelay: accept this master for now.
	} else {
		m.lowerSince = time.Time{}
	}
	m.adoptInterval(p)
	m.masterAddr = src
	m.masterDownAt = now.Add(m.MasterDownInterval())
	m.forgetHandover()
	return nil
}

func (m *Machine) receiveMaster(now time.Time, p Packet, src netip.Addr) []Action {
	if p.Priority == 0 {
		// A peer is leaving; answer at once so backups see a live master.
		m.adverAt = now.Add(m.cfg.Interval)
		return []Action{ActSendAdvert{Priority: m.priority}}
	}
	var reason string
	switch {
	case p.Priority > m.priority:
		reason = TransitionHigherPrio
	case p.Priority == m.priority && src.Unmap().Compare(m.cfg.Self.Unmap()) > 0:
		reason = TransitionTieBreak
	default:
		// A router ranked below us still claims the VIP: if we took over
		// by silence moments ago, it is the master we replaced, alive.
		if !m.hasPred && now.Sub(m.masterSince) <= m.MasterDownInterval() {
			m.hasPred = true
			return []Action{ActPredecessor{Addr: src}}
		}
		return nil
	}
	interval := m.cfg.Interval
	if m.cfg.Version == 3 && p.Interval > 0 {
		interval = p.Interval
	}
	return m.becomeBackup(now, interval, src, reason)
}

func (m *Machine) adoptInterval(p Packet) {
	if m.cfg.Version == 3 && p.Interval > 0 {
		m.masterAdverInterval = p.Interval
	}
}

// Tick fires the timers that are due at now: Adver_Timer as master (send an
// advert), Master_Down_Timer as backup (become master).
func (m *Machine) Tick(now time.Time) []Action {
	switch m.state {
	case StateMaster:
		if now.Before(m.adverAt) {
			return nil
		}
		// Rearm from the deadline to avoid drift, but never into the past:
		// a late tick sends one advert, not a burst.
		next := m.adverAt.Add(m.cfg.Interval)
		if !next.After(now) {
			next = now.Add(m.cfg.Interval)
		}
		m.adverAt = next
		return []Action{ActSendAdvert{Priority: m.priority}}
	case StateBackup:
		if now.Before(m.masterDownAt) {
			return nil
		}
		return m.becomeMaster(now, TransitionMasterDown)
	}
	return nil
}

func (m *Machine) becomeMaster(now time.Time, reason string) []Action {
	// The VIPs go in before the first advert: peers (and a leaving master
	// waiting for its successor) act on the advert, so the address must
	// already be ours when it goes out.
	pred := m.predecessor(now)
	acts := []Action{ActStateChange{From: m.state, To: StateMaster, Reason: reason, Predecessor: pred}}
	m.forgetHandover()
	// Only a takeover by silence can learn of a live predecessor later.
	m.masterSince, m.hasPred = now, pred.IsValid() || reason != TransitionMasterDown
	if !m.holding {
		m.holding = true
		acts = append(acts, ActTakeVIPs{})
	}
	acts = append(acts, ActSendAdvert{Priority: m.priority}, ActAnnounce{})
	m.state = StateMaster
	m.masterAdverInterval = m.cfg.Interval
	m.masterAddr = netip.Addr{}
	m.masterDownAt, m.lowerSince = time.Time{}, time.Time{}
	m.adverAt = now.Add(m.cfg.Interval)
	return acts
}

// predecessor is the master handing over alive as we take over: one that
// sent priority 0, else a lower-priority one still advertising within the
// last Master_Down_Interval (we preempt it); zero when the master went
// silent.
func (m *Machine) predecessor(now time.Time) netip.Addr {
	if m.leaving.IsValid() {
		return m.leaving
	}
	if m.lower.IsValid() && now.Sub(m.lowerAt) <= m.MasterDownInterval() {
		return m.lower
	}
	return netip.Addr{}
}

func (m *Machine) becomeBackup(now time.Time, interval time.Duration, master netip.Addr, reason string) []Action {
	m.forgetHandover()
	acts := m.release([]Action{ActStateChange{From: m.state, To: StateBackup, Reason: reason}})
	m.state = StateBackup
	if m.cfg.Version == 3 {
		m.masterAdverInterval = interval
	} else {
		m.masterAdverInterval = m.cfg.Interval
	}
	m.masterAddr = master
	m.adverAt, m.lowerSince = time.Time{}, time.Time{}
	m.masterDownAt = now.Add(m.MasterDownInterval())
	return acts
}

func (m *Machine) release(acts []Action) []Action {
	if m.holding {
		m.holding = false
		acts = append(acts, ActReleaseVIPs{})
	}
	return acts
}
