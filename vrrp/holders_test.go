package vrrp

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

// holderVerdicts turns Holders into "addr alive"/"addr dead" strings,
// oldest first.
func holderVerdicts(hs []Holder) []string {
	var out []string
	for _, h := range hs {
		v := "dead"
		if h.Alive {
			v = "alive"
		}
		out = append(out, h.Addr.String()+" "+v)
	}
	return out
}

// TestMachineHoldersTeardown is the bootstrap teardown: the bootstrap's
// priority drops below two equal masters, both take over at once, the one
// with the higher address keeps the VIPs. Its holders are both the
// bootstrap and the master that stepped back, alive: each may hold
// connections it accepted.
func TestMachineHoldersTeardown(t *testing.T) {
	cfg := func(prio uint8, self netip.Addr) MachineConfig {
		return MachineConfig{Version: 3, Priority: prio, Interval: 100 * time.Millisecond, Preempt: true, Self: self}
	}
	boot, m0, m1 := fsmLow, fsmSelf, fsmHigh
	s := newFSMSim(t, cfg(50, boot), cfg(40, m0), cfg(40, m1))
	for i := range 3 {
		s.do(i, func(m *Machine, now time.Time) []Action { return m.Start(now) })
	}
	s.runUntil(fsmT0.Add(5 * time.Second))
	s.want(StateMaster, StateBackup, StateBackup)
	if got := holderVerdicts(s.fsmMS[2].Holders(s.now)); !slices.Equal(got, []string{boot.String() + " alive"}) {
		t.Errorf("a backup's holders while the bootstrap serves: %v", got)
	}
	s.do(0, func(m *Machine, now time.Time) []Action { return m.SetPriority(now, 30) })
	s.runUntil(fsmT0.Add(10 * time.Second))
	s.want(StateBackup, StateBackup, StateMaster)
	got := holderVerdicts(s.fsmMS[2].Holders(s.now))
	want := []string{boot.String() + " alive", m0.String() + " alive"}
	if !slices.Equal(got, want) {
		t.Errorf("the winner's holders: %v, want %v (the bootstrap it preempted, the master that stepped back)", got, want)
	}
	// Two minutes later nobody but the winner has advertised: the others
	// are forgotten.
	s.runUntil(fsmT0.Add(10*time.Second + holderMemory + time.Second))
	if got := s.fsmMS[2].Holders(s.now); len(got) != 0 {
		t.Errorf("holders %v remembered past holderMemory", holderVerdicts(got))
	}
}

// TestMachineHoldersVerdicts: a master that yields (another begins right
// after its last advert) or releases (priority 0) ended alive; one
// replaced through Master_Down_Timer after its silence may be dead, until
// it advertises again.
func TestMachineHoldersVerdicts(t *testing.T) {
	a, b, c := netip.MustParseAddr("192.0.2.31"), netip.MustParseAddr("192.0.2.32"), netip.MustParseAddr("192.0.2.33")
	m := NewMachine(MachineConfig{Version: 3, Priority: 100, Interval: time.Second, Preempt: true, Self: fsmSelf})
	at := func(d time.Duration) time.Time { return fsmT0.Add(d) }
	adv := func(d time.Duration, src netip.Addr, prio uint8) {
		m.Receive(at(d), Packet{Version: 3, VRID: 1, Priority: prio, Interval: time.Second}, src)
	}
	m.Start(at(0))
	for i := range 5 {
		adv(time.Duration(i)*time.Second, a, 200)
	}
	// b preempts a: a's last advert at 4 s, b's first at 4.3 s.
	for i := range 5 {
		adv(4300*time.Millisecond+time.Duration(i)*time.Second, b, 250)
	}
	if got, want := holderVerdicts(m.Holders(at(9*time.Second))), []string{a.String() + " alive", b.String() + " alive"}; !slices.Equal(got, want) {
		t.Errorf("after a yield: %v, want %v", got, want)
	}
	// b falls silent after 8.3 s; c (lower than us: we would have taken
	// over first, but c ranks higher elsewhere) begins 3.6 s later.
	adv(11900*time.Millisecond, c, 250)
	if got, want := holderVerdicts(m.Holders(at(12*time.Second))), []string{a.String() + " alive", b.String() + " dead", c.String() + " alive"}; !slices.Equal(got, want) {
		t.Errorf("after a silence: %v, want %v", got, want)
	}
	// b was only slow: its late advert makes it alive again.
	adv(12500*time.Millisecond, b, 250)
	if got := holderVerdicts(m.Holders(at(12600 * time.Millisecond))); !slices.Contains(got, b.String()+" alive") {
		t.Errorf("after b's late advert: %v", got)
	}
	// c releases with priority 0 and falls silent: alive, whatever follows.
	adv(13*time.Second, c, 0)
	acts := m.Tick(at(13*time.Second + m.skew()))
	if m.State() != StateMaster {
		t.Fatalf("after c's release: %v (%v)", m.State(), acts)
	}
	if got := holderVerdicts(m.Holders(at(20 * time.Second))); !slices.Contains(got, c.String()+" alive") {
		t.Errorf("c released with priority 0: %v", got)
	}
}

// TestMachineHoldersTakeoverBySilence: the master we followed went silent
// and we took over through Master_Down_Timer: it is a holder that may be
// dead.
func TestMachineHoldersTakeoverBySilence(t *testing.T) {
	m := NewMachine(MachineConfig{Version: 3, Priority: 100, Interval: time.Second, Preempt: true, Self: fsmSelf})
	m.Start(fsmT0)
	last := fsmT0.Add(2 * time.Second)
	for d := time.Duration(0); d <= 2*time.Second; d += time.Second {
		m.Receive(fsmT0.Add(d), Packet{Version: 3, VRID: 1, Priority: 200, Interval: time.Second}, fsmHigh)
	}
	m.Tick(last.Add(m.MasterDownInterval()))
	if m.State() != StateMaster {
		t.Fatalf("state %v after Master_Down", m.State())
	}
	now := last.Add(m.MasterDownInterval() + time.Millisecond)
	if got, want := holderVerdicts(m.Holders(now)), []string{fsmHigh.String() + " dead"}; !slices.Equal(got, want) {
		t.Errorf("holders %v, want %v", got, want)
	}
}
