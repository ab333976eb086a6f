package vrrp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"
)

// Addresses of the FSM tests: we are fsmSelf; fsmLow and fsmHigh are peers
// whose addresses sort below and above ours (for the tie-break).
var (
	fsmSelf = netip.MustParseAddr("192.0.2.10")
	fsmLow  = netip.MustParseAddr("192.0.2.5")
	fsmHigh = netip.MustParseAddr("192.0.2.20")
	fsmT0   = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

const fsmMS = time.Millisecond

// fsmStep is one event at an offset from fsmT0 and what must follow.
type fsmStep struct {
	at    time.Duration
	desc  string
	do    func(m *Machine, now time.Time) []Action
	want  []Action
	state State

	checkDeadline bool
	deadline      time.Duration // offset from fsmT0; -1 = no deadline
	checkMaster   bool
	master        netip.Addr
	checkInterval bool
	interval      time.Duration
}

func (s fsmStep) expect(st State, acts ...Action) fsmStep {
	s.state, s.want = st, acts
	return s
}

func (s fsmStep) dl(d time.Duration) fsmStep {
	s.checkDeadline, s.deadline = true, d
	return s
}

func (s fsmStep) mst(a netip.Addr) fsmStep {
	s.checkMaster, s.master = true, a
	return s
}

func (s fsmStep) mai(d time.Duration) fsmStep {
	s.checkInterval, s.interval = true, d
	return s
}

func evStart(at time.Duration) fsmStep {
	return fsmStep{at: at, desc: "Start", do: func(m *Machine, now time.Time) []Action { return m.Start(now) }}
}

func evStop(at time.Duration) fsmStep {
	return fsmStep{at: at, desc: "Stop", do: func(m *Machine, now time.Time) []Action { return m.Stop(now) }}
}

func evTick(at time.Duration) fsmStep {
	return fsmStep{at: at, desc: "Tick", do: func(m *Machine, now time.Time) []Action { return m.Tick(now) }}
}

// evRecv is an advert with the machine's own interval (1s unless evRecvI).
func evRecv(at time.Duration, prio uint8, src netip.Addr) fsmStep {
	return evRecvI(at, prio, src, 0)
}

func evRecvI(at time.Duration, prio uint8, src netip.Addr, interval time.Duration) fsmStep {
	return fsmStep{at: at, desc: fmt.Sprintf("Receive(prio %d from %s, %v)", prio, src, interval),
		do: func(m *Machine, now time.Time) []Action {
			iv := interval
			if iv == 0 {
				iv = m.Config().Interval
			}
			p := Packet{Version: m.Config().Version, VRID: 1, Priority: prio, Interval: iv,
				Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.100")}}
			return m.Receive(now, p, src)
		}}
}

func evPrio(at time.Duration, p uint8) fsmStep {
	return fsmStep{at: at, desc: fmt.Sprintf("SetPriority(%d)", p),
		do: func(m *Machine, now time.Time) []Action { return m.SetPriority(now, p) }}
}

func evFault(at time.Duration, f bool) fsmStep {
	return fsmStep{at: at, desc: fmt.Sprintf("SetFault(%v)", f),
		do: func(m *Machine, now time.Time) []Action { return m.SetFault(now, f) }}
}

func actChg(from, to State, why string) Action {
	return ActStateChange{From: from, To: to, Reason: why}
}

func actSend(p uint8) Action { return ActSendAdvert{Priority: p} }

// toMaster is what becoming master emits.
func fsmToMaster(from State, why string, prio uint8) []Action {
	return []Action{actChg(from, StateMaster, why), ActTakeVIPs{}, actSend(prio), ActAnnounce{}}
}

func fsmFromBackup(prio uint8) []Action { return fsmToMaster(StateBackup, TransitionMasterDown, prio) }

// fsmHandedOver is becoming master from backup with the old master handing
// over alive (ActStateChange.Predecessor).
func fsmHandedOver(prio uint8, pred netip.Addr) []Action {
	acts := fsmFromBackup(prio)
	acts[0] = ActStateChange{From: StateBackup, To: StateMaster, Reason: TransitionMasterDown, Predecessor: pred}
	return acts
}

// skewOf is (256-prio)/256 of d, the reference the machine is checked against.
func fsmSkew(prio int, d time.Duration) time.Duration { return time.Duration(256-prio) * d / 256 }

func TestMachineSkewAndMasterDownValues(t *testing.T) {
	// The values the RFC formula gives, written out so a change in rounding shows.
	tests := []struct {
		version  uint8
		prio     uint8
		interval time.Duration
		want     time.Duration
	}{
		{3, 100, time.Second, 3609375 * time.Microsecond},
		{3, 100, 100 * fsmMS, 360937500 * time.Nanosecond},
		{3, 254, time.Second, 3*time.Second + 7812500*time.Nanosecond},
		{3, 1, 10 * fsmMS, 30*fsmMS + 9960937*time.Nanosecond},
		{2, 100, time.Second, 3609375 * time.Microsecond},
		{2, 100, 3 * time.Second, 9609375 * time.Microsecond}, // v2 skew is in seconds, not intervals
	}
	for _, tc := range tests {
		m := NewMachine(MachineConfig{Version: tc.version, Priority: tc.prio, Interval: tc.interval, Self: fsmSelf})
		if got := m.MasterDownInterval(); got != tc.want {
			t.Errorf("v%d prio %d interval %v: Master_Down_Interval %v, want %v", tc.version, tc.prio, tc.interval, got, tc.want)
		}
		m.Start(fsmT0)
		if got := m.Deadline().Sub(fsmT0); got != tc.want {
			t.Errorf("v%d prio %d interval %v: deadline after Start %v, want %v", tc.version, tc.prio, tc.interval, got, tc.want)
		}
	}
}

func TestMachineTransitions(t *testing.T) {
	base := MachineConfig{Version: 3, Priority: 100, Interval: time.Second, Preempt: true, Self: fsmSelf}
	with := func(f func(*MachineConfig)) MachineConfig {
		c := base
		f(&c)
		return c
	}
	mdi := 3609375 * time.Microsecond // prio 100, 1s
	// becomeMaster starts as backup and lets Master_Down fire.
	becomeMaster := []fsmStep{
		evStart(0).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)),
		evTick(mdi).expect(StateMaster, fsmFromBackup(100)...).dl(mdi + time.Second),
	}
	seq := func(parts ...[]fsmStep) []fsmStep { return slices.Concat(parts...) }

	tests := []struct {
		name  string
		cfg   MachineConfig
		steps []fsmStep
	}{
		{
			name: "owner starts as master and advertises every interval",
			cfg:  with(func(c *MachineConfig) { c.Priority = 255; c.Preempt = false }),
			steps: []fsmStep{
				evStart(0).expect(StateMaster, fsmToMaster(StateInit, TransitionStart, 255)...).dl(time.Second).mst(fsmSelf),
				evTick(999 * fsmMS).expect(StateMaster).dl(time.Second),
				evTick(time.Second).expect(StateMaster, actSend(255)).dl(2 * time.Second),
				evRecv(1500*fsmMS, 200, fsmHigh).expect(StateMaster),
				evRecv(1600*fsmMS, 255, fsmLow).expect(StateMaster),
				evStart(1700 * fsmMS).expect(StateMaster), // Start is a no-op once running
			},
		},
		{
			name: "backup: Master_Down fires at exactly 3*I+skew (prio 100, 1s)",
			cfg:  base,
			steps: []fsmStep{
				evStart(0).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)).dl(mdi).mst(netip.Addr{}),
				evTick(mdi - 1).expect(StateBackup).dl(mdi),
				evTick(mdi).expect(StateMaster, fsmFromBackup(100)...).dl(mdi + time.Second).mst(fsmSelf).mai(time.Second),
				evTick(mdi + 500*fsmMS).expect(StateMaster),
				evTick(mdi+time.Second).expect(StateMaster, actSend(100)).dl(mdi + 2*time.Second),
			},
		},
		{
			name: "backup: Master_Down at 100ms interval",
			cfg:  with(func(c *MachineConfig) { c.Interval = 100 * fsmMS }),
			steps: []fsmStep{
				evStart(0).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)).dl(360937500),
				evTick(360937499).expect(StateBackup),
				evTick(360937500).expect(StateMaster, fsmFromBackup(100)...).dl(460937500),
			},
		},
		{
			name: "late tick as master sends one advert, not a burst",
			cfg:  base,
			steps: seq(becomeMaster, []fsmStep{
				evTick(mdi+10*time.Second).expect(StateMaster, actSend(100)).dl(mdi + 11*time.Second),
			}),
		},
		{
			name: "backup accepts a higher master and restarts Master_Down",
			cfg:  base,
			steps: []fsmStep{
				evStart(0).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)),
				evRecv(time.Second, 150, fsmLow).expect(StateBackup).dl(time.Second + mdi).mst(fsmLow),
				evRecv(2*time.Second, 150, fsmLow).expect(StateBackup).dl(2*time.Second + mdi),
				evTick(time.Second + mdi).expect(StateBackup),
				evRecv(3*time.Second, 100, fsmHigh).expect(StateBackup).dl(3*time.Second + mdi).mst(fsmHigh), // equal counts as >=
			},
		},
		{
			name: "master preempted by higher priority",
			cfg:  base,
			steps: seq(becomeMaster, []fsmStep{
				evRecv(4*time.Second, 150, fsmLow).expect(StateBackup,
					actChg(StateMaster, StateBackup, TransitionHigherPrio), ActReleaseVIPs{}).
					dl(4*time.Second + mdi).mst(fsmLow),
				evTick(4*time.Second + mdi - 1).expect(StateBackup),
			}),
		},
		{
			name: "master ignores lower priority",
			cfg:  base,
			steps: seq(becomeMaster, []fsmStep{
				// Moments after a takeover by silence, a lower router still
				// advertising is the master we replaced, alive: said once.
				evRecv(4*time.Second, 99, fsmHigh).expect(StateMaster, ActPredecessor{Addr: fsmHigh}).dl(mdi + time.Second),
				evRecv(4100*fsmMS, 99, fsmHigh).expect(StateMaster),
			}),
		},
		{
			name: "a lower router long after a takeover by silence is no predecessor",
			cfg:  base,
			steps: seq(becomeMaster, []fsmStep{
				evRecv(2*mdi+fsmMS, 99, fsmHigh).expect(StateMaster),
			}),
		},
		{
			name: "an owner at start has no predecessor to learn of",
			cfg:  with(func(c *MachineConfig) { c.Priority = 255; c.Preempt = false }),
			steps: []fsmStep{
				evStart(0).expect(StateMaster, fsmToMaster(StateInit, TransitionStart, 255)...),
				evRecv(500*fsmMS, 100, fsmHigh).expect(StateMaster),
			},
		},
		{
			name: "backup with preempt takes over from a lower-priority live master",
			cfg:  with(func(c *MachineConfig) { c.Priority = 200 }),
			steps: []fsmStep{
				evStart(0).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)).dl(3*time.Second + fsmSkew(200, time.Second)),
				evRecv(time.Second, 100, fsmLow).expect(StateBackup).dl(3*time.Second + fsmSkew(200, time.Second)),
				evRecv(2*time.Second, 100, fsmLow).expect(StateBackup),
				evRecv(3*time.Second, 100, fsmLow).expect(StateBackup),
				evTick(3*time.Second+fsmSkew(200, time.Second)).expect(StateMaster, fsmHandedOver(200, fsmLow)...),
				evRecv(4*time.Second, 100, fsmLow).expect(StateMaster),
			},
		},
		{
			name: "no preempt: higher backup never takes over from a live master",
			cfg:  with(func(c *MachineConfig) { c.Priority = 200; c.Preempt = false }),
			steps: []fsmStep{
				evStart(0).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)),
				evRecv(time.Second, 50, fsmLow).expect(StateBackup).dl(4*time.Second + fsmSkew(200, time.Second)).mst(fsmLow),
				evRecv(2*time.Second, 50, fsmLow).expect(StateBackup),
				evTick(3*time.Second + fsmSkew(200, time.Second)).expect(StateBackup),
				evRecv(3*time.Second, 50, fsmLow).expect(StateBackup),
				evRecv(4*time.Second, 50, fsmLow).expect(StateBackup),
				evTick(5 * time.Second).expect(StateBackup),
				// The master goes silent: now we take over.
				evTick(7*time.Second+fsmSkew(200, time.Second)).expect(StateMaster, fsmFromBackup(200)...),
			},
		},
		{
			name: "no preempt: owner in backup still preempts",
			cfg:  with(func(c *MachineConfig) { c.Priority = 255; c.Preempt = false }),
			steps: []fsmStep{
				evStart(0).expect(StateMaster, fsmToMaster(StateInit, TransitionStart, 255)...),
				// Another owner with a higher address wins the tie.
				evRecv(100*fsmMS, 255, fsmHigh).expect(StateBackup, actChg(StateMaster, StateBackup, TransitionTieBreak), ActReleaseVIPs{}).
					dl(100*fsmMS + 3*time.Second + fsmSkew(255, time.Second)),
				// A lower-priority master is ignored, so the timer runs out.
				evRecv(time.Second, 100, fsmLow).expect(StateBackup).dl(100*fsmMS + 3*time.Second + fsmSkew(255, time.Second)),
				evTick(100*fsmMS+3*time.Second+fsmSkew(255, time.Second)).expect(StateMaster, fsmHandedOver(255, fsmLow)...),
			},
		},
		{
			name: "equal priority: peer with higher address wins",
			cfg:  base,
			steps: seq(becomeMaster, []fsmStep{
				evRecv(4*time.Second, 100, fsmHigh).expect(StateBackup,
					actChg(StateMaster, StateBackup, TransitionTieBreak), ActReleaseVIPs{}).mst(fsmHigh),
			}),
		},
		{
			name: "equal priority: peer with lower address loses",
			cfg:  base,
			steps: seq(becomeMaster, []fsmStep{
				evRecv(4*time.Second, 100, fsmLow).expect(StateMaster, ActPredecessor{Addr: fsmLow}).mst(fsmSelf),
			}),
		},
		{
			name: "priority 0: backup takes over after skew only",
			cfg:  base,
			steps: []fsmStep{
				evStart(0).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)),
				evRecv(time.Second, 150, fsmLow).expect(StateBackup).dl(time.Second + mdi),
				evRecv(2*time.Second, 0, fsmLow).expect(StateBackup).dl(2*time.Second + fsmSkew(100, time.Second)).mst(netip.Addr{}),
				evTick(2*time.Second + fsmSkew(100, time.Second) - 1).expect(StateBackup),
				evTick(2*time.Second+fsmSkew(100, time.Second)).expect(StateMaster, fsmHandedOver(100, fsmLow)...),
			},
		},
		{
			name: "a master that went silent is no predecessor, even after a priority-0 release earlier",
			cfg:  base,
			steps: []fsmStep{
				evStart(0).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)),
				evRecv(time.Second, 150, fsmLow).expect(StateBackup),
				evRecv(2*time.Second, 0, fsmLow).expect(StateBackup),
				// Another master answers the release before our skew runs out...
				evRecv(2*time.Second+fsmMS, 150, fsmHigh).expect(StateBackup).mst(fsmHigh),
				// ...then dies.
				evTick(2*time.Second+fsmMS+mdi).expect(StateMaster, fsmFromBackup(100)...),
			},
		},
		{
			name: "priority 0: skew uses the learned v3 interval",
			cfg:  base,
			steps: []fsmStep{
				evStart(0).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)),
				evRecvI(time.Second, 150, fsmLow, 100*fsmMS).expect(StateBackup),
				evRecvI(1100*fsmMS, 0, fsmLow, 100*fsmMS).expect(StateBackup).dl(1100*fsmMS + fsmSkew(100, 100*fsmMS)),
			},
		},
		{
			name: "priority 0: master answers at once",
			cfg:  base,
			steps: seq(becomeMaster, []fsmStep{
				evRecv(4*time.Second, 0, fsmHigh).expect(StateMaster, actSend(100)).dl(5 * time.Second),
			}),
		},
		{
			name: "v3 backup adopts the master's interval",
			cfg:  base,
			steps: []fsmStep{
				evStart(0).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)).mai(time.Second),
				evRecvI(500*fsmMS, 150, fsmLow, 200*fsmMS).expect(StateBackup).mai(200 * fsmMS).
					dl(500*fsmMS + 600*fsmMS + fsmSkew(100, 200*fsmMS)),
				evTick(500*fsmMS+600*fsmMS+fsmSkew(100, 200*fsmMS)).expect(StateMaster, fsmFromBackup(100)...).
					mai(time.Second).dl(500*fsmMS + 600*fsmMS + fsmSkew(100, 200*fsmMS) + time.Second),
				// A master yielding adopts the winner's interval too.
				evRecvI(2*time.Second, 150, fsmLow, 300*fsmMS).expect(StateBackup,
					actChg(StateMaster, StateBackup, TransitionHigherPrio), ActReleaseVIPs{}).
					mai(300 * fsmMS).dl(2*time.Second + 900*fsmMS + fsmSkew(100, 300*fsmMS)),
			},
		},
		{
			name: "v2 backup keeps its own interval",
			cfg:  with(func(c *MachineConfig) { c.Version = 2 }),
			steps: []fsmStep{
				evStart(0).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)),
				evRecvI(time.Second, 150, fsmLow, 2*time.Second).expect(StateBackup).mai(time.Second).dl(time.Second + mdi),
			},
		},
		{
			name: "SetPriority drop: master advertises lower priority, a peer preempts",
			cfg:  base,
			steps: seq(becomeMaster, []fsmStep{
				evPrio(4*time.Second, 50).expect(StateMaster, actSend(50)).dl(5 * time.Second),
				evTick(5*time.Second).expect(StateMaster, actSend(50)).dl(6 * time.Second),
				evPrio(5500*fsmMS, 50).expect(StateMaster), // unchanged: nothing to say
				evRecv(5600*fsmMS, 100, fsmLow).expect(StateBackup,
					actChg(StateMaster, StateBackup, TransitionHigherPrio), ActReleaseVIPs{}).
					dl(5600*fsmMS + 3*time.Second + fsmSkew(50, time.Second)),
			}),
		},
		{
			name: "SetPriority clamps to 1..254 and backup stays silent",
			cfg:  base,
			steps: []fsmStep{
				evStart(0).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)),
				evPrio(fsmMS, 0).expect(StateBackup),
				evPrio(2*fsmMS, 255).expect(StateBackup),
				evRecv(3*fsmMS, 254, fsmLow).expect(StateBackup).dl(3*fsmMS + 3*time.Second + fsmSkew(254, time.Second)),
			},
		},
		{
			name: "SetPriority is ignored for the owner",
			cfg:  with(func(c *MachineConfig) { c.Priority = 255 }),
			steps: []fsmStep{
				evStart(0).expect(StateMaster, fsmToMaster(StateInit, TransitionStart, 255)...),
				evPrio(fsmMS, 10).expect(StateMaster),
				evTick(time.Second).expect(StateMaster, actSend(255)),
			},
		},
		{
			name: "fault in and out from master",
			cfg:  base,
			steps: seq(becomeMaster, []fsmStep{
				evFault(4*time.Second, true).expect(StateFault,
					actChg(StateMaster, StateFault, TransitionFault), actSend(0), ActReleaseVIPs{}).dl(-1).mst(netip.Addr{}),
				evFault(4100*fsmMS, true).expect(StateFault),
				evRecv(4200*fsmMS, 0, fsmLow).expect(StateFault),
				evRecv(4300*fsmMS, 200, fsmLow).expect(StateFault),
				evTick(20 * time.Second).expect(StateFault),
				evFault(21*time.Second, false).expect(StateBackup,
					actChg(StateFault, StateBackup, TransitionFaultCleared)).dl(21*time.Second + mdi),
				evFault(21500*fsmMS, false).expect(StateBackup),
				evTick(21*time.Second+mdi).expect(StateMaster, fsmFromBackup(100)...),
			}),
		},
		{
			name: "fault from backup and from init",
			cfg:  base,
			steps: []fsmStep{
				evFault(0, true).expect(StateFault, actChg(StateInit, StateFault, TransitionFault)).dl(-1),
				evStart(fsmMS).expect(StateFault),
				evFault(time.Second, false).expect(StateBackup, actChg(StateFault, StateBackup, TransitionFaultCleared)).dl(time.Second + mdi),
				evFault(2*time.Second, true).expect(StateFault, actChg(StateBackup, StateFault, TransitionFault)),
			},
		},
		{
			name: "fault cleared for the owner goes straight to master",
			cfg:  with(func(c *MachineConfig) { c.Priority = 255 }),
			steps: []fsmStep{
				evStart(0).expect(StateMaster, fsmToMaster(StateInit, TransitionStart, 255)...),
				evFault(time.Second, true).expect(StateFault, actChg(StateMaster, StateFault, TransitionFault), actSend(0), ActReleaseVIPs{}),
				evFault(2*time.Second, false).expect(StateMaster, fsmToMaster(StateFault, TransitionFaultCleared, 255)...),
			},
		},
		{
			name: "stop as master: priority 0 and release",
			cfg:  base,
			steps: seq(becomeMaster, []fsmStep{
				evStop(4*time.Second).expect(StateInit, actChg(StateMaster, StateInit, TransitionStop), actSend(0), ActReleaseVIPs{}).dl(-1),
				evStop(5 * time.Second).expect(StateInit),
				evTick(6 * time.Second).expect(StateInit),
				evRecv(6*time.Second, 200, fsmLow).expect(StateInit),
				evStart(7*time.Second).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)).dl(7*time.Second + mdi),
			}),
		},
		{
			name: "stop as backup: no advert, no release",
			cfg:  base,
			steps: []fsmStep{
				evStop(0).expect(StateInit),
				evStart(0).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)),
				evStop(time.Second).expect(StateInit, actChg(StateBackup, StateInit, TransitionStop)).dl(-1),
			},
		},
		{
			name: "preempt delay tolerates a lower master for a while",
			cfg:  with(func(c *MachineConfig) { c.Priority = 200; c.PreemptDelay = 5 * time.Second }),
			steps: []fsmStep{
				evStart(0).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)),
				evRecv(1*time.Second, 100, fsmLow).expect(StateBackup).dl(4*time.Second + fsmSkew(200, time.Second)),
				evRecv(2*time.Second, 100, fsmLow).expect(StateBackup),
				evRecv(3*time.Second, 100, fsmLow).expect(StateBackup),
				evRecv(4*time.Second, 100, fsmLow).expect(StateBackup),
				evRecv(5*time.Second, 100, fsmLow).expect(StateBackup).dl(8*time.Second + fsmSkew(200, time.Second)),
				// 5s since the lower master was first seen: stop accepting it.
				evRecv(6*time.Second, 100, fsmLow).expect(StateBackup).dl(8*time.Second + fsmSkew(200, time.Second)),
				evRecv(7*time.Second, 100, fsmLow).expect(StateBackup),
				evRecv(8*time.Second, 100, fsmLow).expect(StateBackup),
				evTick(8*time.Second+fsmSkew(200, time.Second)).expect(StateMaster, fsmHandedOver(200, fsmLow)...),
			},
		},
		{
			name: "preempt delay restarts when a higher master intervenes",
			cfg:  with(func(c *MachineConfig) { c.Priority = 200; c.PreemptDelay = 2 * time.Second }),
			steps: []fsmStep{
				evStart(0).expect(StateBackup, actChg(StateInit, StateBackup, TransitionStart)),
				evRecv(1*time.Second, 100, fsmLow).expect(StateBackup),
				evRecv(2*time.Second, 250, fsmHigh).expect(StateBackup),
				evRecv(3*time.Second, 100, fsmLow).expect(StateBackup).dl(6*time.Second + fsmSkew(200, time.Second)),
				evRecv(4*time.Second, 100, fsmLow).expect(StateBackup).dl(7*time.Second + fsmSkew(200, time.Second)),
				evRecv(5*time.Second, 100, fsmLow).expect(StateBackup).dl(7*time.Second + fsmSkew(200, time.Second)),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMachine(tc.cfg)
			for i, s := range tc.steps {
				now := fsmT0.Add(s.at)
				got := s.do(m, now)
				if !reflect.DeepEqual(fsmNorm(got), fsmNorm(s.want)) {
					t.Fatalf("step %d %s at %v:\n got %v\nwant %v", i, s.desc, s.at, got, s.want)
				}
				if m.State() != s.state {
					t.Fatalf("step %d %s at %v: state %v, want %v", i, s.desc, s.at, m.State(), s.state)
				}
				if s.checkDeadline {
					want := time.Time{}
					if s.deadline >= 0 {
						want = fsmT0.Add(s.deadline)
					}
					if !m.Deadline().Equal(want) {
						t.Fatalf("step %d %s at %v: deadline %v, want %v", i, s.desc, s.at, fsmOffset(m.Deadline()), fsmOffset(want))
					}
				}
				if s.checkMaster && m.MasterAddr() != s.master {
					t.Fatalf("step %d %s: MasterAddr %v, want %v", i, s.desc, m.MasterAddr(), s.master)
				}
				if s.checkInterval && m.MasterInterval() != s.interval {
					t.Fatalf("step %d %s: MasterInterval %v, want %v", i, s.desc, m.MasterInterval(), s.interval)
				}
			}
		})
	}
}

func fsmNorm(a []Action) []Action {
	if len(a) == 0 {
		return nil
	}
	return a
}

func fsmOffset(t time.Time) any {
	if t.IsZero() {
		return "none"
	}
	return t.Sub(fsmT0)
}

func TestMachineStateString(t *testing.T) {
	for s, want := range map[State]string{StateInit: "INIT", StateBackup: "BACKUP", StateMaster: "MASTER",
		StateFault: "FAULT", State(9): "State(9)"} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", s, s.String(), want)
		}
	}
}

// TestParseState pins ParseState as String's inverse over every value a
// State can take: a state given a name must be given back by its name.
func TestParseState(t *testing.T) {
	for i := range 256 {
		s := State(i)
		named := s.String() != fmt.Sprintf("State(%d)", i)
		got, ok := ParseState(s.String())
		if ok != named || (named && got != s) {
			t.Errorf("ParseState(%q) = %v, %v; want %v, %v", s.String(), got, ok, s, named)
		}
	}
	for _, name := range []string{"", "master", "Master", "STOPPED"} {
		if s, ok := ParseState(name); ok {
			t.Errorf("ParseState(%q) = %v; want no state", name, s)
		}
	}
}

// TestStateInJSONLogs: a state change logged as the static pod logs it
// (JSON, to the container's log) names the states, as the text handler
// does; a kubelet-run pod logged "from":1,"to":2 before State had
// MarshalText.
func TestStateInJSONLogs(t *testing.T) {
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("state changed", "from", StateBackup, "to", StateMaster)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["from"] != "BACKUP" || rec["to"] != "MASTER" {
		t.Errorf("JSON record %s; want from BACKUP to MASTER", buf.Bytes())
	}
}

func TestMachineConfigValidate(t *testing.T) {
	ok := MachineConfig{Version: 3, Priority: 100, Interval: time.Second, Self: fsmSelf}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []MachineConfig{
		{Version: 4, Self: fsmSelf},
		{Version: 3, Interval: -1, Self: fsmSelf},
		{Version: 3, PreemptDelay: -1, Self: fsmSelf},
		{Version: 3},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	m := NewMachine(MachineConfig{Self: fsmSelf})
	if c := m.Config(); c.Version != 3 || c.Priority != 100 || c.Interval != time.Second {
		t.Errorf("defaults: %+v", c)
	}
}

// fsmSim runs several machines on one simulated link: every advert reaches
// every other running machine at the instant it is sent. Timers due at the
// same instant all fire before the adverts they produce are delivered, as
// on a real link where two routers' timers can expire together.
type fsmSim struct {
	t       *testing.T
	fsmMS   []*Machine
	holding []bool
	now     time.Time
}

func newFSMSim(t *testing.T, cfgs ...MachineConfig) *fsmSim {
	s := &fsmSim{t: t, now: fsmT0, holding: make([]bool, len(cfgs))}
	for _, c := range cfgs {
		s.fsmMS = append(s.fsmMS, NewMachine(c))
	}
	return s
}

type simSend struct {
	from int
	prio uint8
}

// apply records VIP ownership and returns the adverts to deliver.
func (s *fsmSim) apply(i int, acts []Action) []simSend {
	var out []simSend
	for _, a := range acts {
		switch a := a.(type) {
		case ActSendAdvert:
			out = append(out, simSend{i, a.Priority})
		case ActTakeVIPs:
			if s.holding[i] {
				s.t.Fatalf("machine %d: TakeVIPs while holding", i)
			}
			s.holding[i] = true
		case ActReleaseVIPs:
			if !s.holding[i] {
				s.t.Fatalf("machine %d: ReleaseVIPs while not holding", i)
			}
			s.holding[i] = false
		}
	}
	return out
}

func (s *fsmSim) deliver(sends []simSend) {
	for len(sends) > 0 {
		var next []simSend
		for _, snd := range sends {
			c := s.fsmMS[snd.from].Config()
			p := Packet{Version: c.Version, VRID: 1, Priority: snd.prio, Interval: c.Interval,
				Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.100")}}
			for j, m := range s.fsmMS {
				if j != snd.from {
					next = append(next, s.apply(j, m.Receive(s.now, p, c.Self))...)
				}
			}
		}
		sends = next
	}
}

// do runs an external event on machine i at the current time.
func (s *fsmSim) do(i int, f func(m *Machine, now time.Time) []Action) {
	s.deliver(s.apply(i, f(s.fsmMS[i], s.now)))
}

// runUntil fires timers in order until the clock reaches end.
func (s *fsmSim) runUntil(end time.Time) {
	for steps := 0; ; steps++ {
		if steps > 100000 {
			s.t.Fatal("simulation does not converge")
		}
		next := end
		for _, m := range s.fsmMS {
			if d := m.Deadline(); !d.IsZero() && d.Before(next) {
				next = d
			}
		}
		s.now = next
		if next.Equal(end) {
			return
		}
		var sends []simSend
		for i, m := range s.fsmMS {
			sends = append(sends, s.apply(i, m.Tick(s.now))...)
		}
		s.deliver(sends)
		s.checkOneHolder()
	}
}

func (s *fsmSim) checkOneHolder() {
	n := 0
	for i, h := range s.holding {
		if h != (s.fsmMS[i].State() == StateMaster) {
			s.t.Fatalf("machine %d: holding %v in state %v", i, h, s.fsmMS[i].State())
		}
		if h {
			n++
		}
	}
	if n > 1 {
		s.t.Fatalf("at %v: %d machines hold the VIPs after adverts settled", s.now.Sub(fsmT0), n)
	}
}

func (s *fsmSim) states() []State {
	var out []State
	for _, m := range s.fsmMS {
		out = append(out, m.State())
	}
	return out
}

func (s *fsmSim) want(states ...State) {
	s.t.Helper()
	if got := s.states(); !slices.Equal(got, states) {
		s.t.Fatalf("at %v: states %v, want %v", s.now.Sub(fsmT0), got, states)
	}
}

func TestMachineSimulatedPeers(t *testing.T) {
	cfg := func(prio uint8, self netip.Addr, preempt bool) MachineConfig {
		return MachineConfig{Version: 3, Priority: prio, Interval: time.Second, Preempt: preempt, Self: self}
	}
	start := func(m *Machine, now time.Time) []Action { return m.Start(now) }
	stop := func(m *Machine, now time.Time) []Action { return m.Stop(now) }
	at := func(d time.Duration) time.Time { return fsmT0.Add(d) }

	t.Run("highest priority wins, then a priority drop hands over", func(t *testing.T) {
		s := newFSMSim(t, cfg(100, fsmLow, true), cfg(150, fsmHigh, true))
		s.do(0, start)
		s.do(1, start)
		s.runUntil(at(10 * time.Second))
		s.want(StateBackup, StateMaster)
		s.do(1, func(m *Machine, now time.Time) []Action { return m.SetPriority(now, 50) })
		// A ignores B's lower adverts; its Master_Down fires within 3.61s.
		s.runUntil(at(10*time.Second + 3609375*time.Microsecond + fsmMS))
		s.want(StateMaster, StateBackup)
		if s.fsmMS[1].MasterAddr() != fsmLow {
			t.Fatalf("B sees master %v", s.fsmMS[1].MasterAddr())
		}
	})

	t.Run("equal priority started together: higher address keeps it", func(t *testing.T) {
		s := newFSMSim(t, cfg(100, fsmLow, true), cfg(100, fsmHigh, true))
		s.do(0, start)
		s.do(1, start)
		s.runUntil(at(30 * time.Second))
		s.want(StateBackup, StateMaster)
	})

	t.Run("no preempt: a higher backup joining later stays backup", func(t *testing.T) {
		s := newFSMSim(t, cfg(100, fsmLow, false), cfg(200, fsmHigh, false))
		s.do(0, start)
		s.runUntil(at(5 * time.Second))
		s.do(1, start)
		s.runUntil(at(60 * time.Second))
		s.want(StateMaster, StateBackup)
	})

	t.Run("master stops: the backup takes over after its skew", func(t *testing.T) {
		s := newFSMSim(t, cfg(100, fsmLow, true), cfg(200, fsmHigh, true))
		s.do(0, start)
		s.do(1, start)
		s.runUntil(at(10 * time.Second))
		s.want(StateBackup, StateMaster)
		s.do(1, stop)
		s.runUntil(at(10*time.Second + fsmSkew(100, time.Second) - 1))
		s.want(StateBackup, StateInit)
		s.runUntil(at(10*time.Second + fsmSkew(100, time.Second) + 1))
		s.want(StateMaster, StateInit)
		// It comes back and preempts.
		s.do(1, start)
		s.runUntil(at(20 * time.Second))
		s.want(StateBackup, StateMaster)
	})

	t.Run("three routers, master faults and recovers", func(t *testing.T) {
		s := newFSMSim(t, cfg(100, fsmLow, true), cfg(150, fsmSelf, true), cfg(200, fsmHigh, true))
		for i := range 3 {
			s.do(i, start)
		}
		s.runUntil(at(10 * time.Second))
		s.want(StateBackup, StateBackup, StateMaster)
		s.do(2, func(m *Machine, now time.Time) []Action { return m.SetFault(now, true) })
		s.runUntil(at(12 * time.Second))
		s.want(StateBackup, StateMaster, StateFault)
		s.do(2, func(m *Machine, now time.Time) []Action { return m.SetFault(now, false) })
		s.runUntil(at(20 * time.Second))
		s.want(StateBackup, StateBackup, StateMaster)
	})
}
