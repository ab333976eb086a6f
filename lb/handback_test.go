package lb

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"appliance/internal/cluster"
)

func TestHandbackTargets(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := netip.MustParseAddr("192.0.2.10") // the old holder
	c := netip.MustParseAddr("192.0.2.11") // another master
	d := netip.MustParseAddr("192.0.2.12") // a holder before b
	none := netip.Addr{}
	const window = 12 * time.Second
	alive := func(a netip.Addr, at time.Time) cluster.VIPHolder {
		return cluster.VIPHolder{Addr: a, Last: at, Alive: true}
	}
	silent := func(a netip.Addr, at time.Time) cluster.VIPHolder { return cluster.VIPHolder{Addr: a, Last: at} }
	tests := []struct {
		name  string
		st    cluster.VIPStatus
		last  netip.Addr
		now   time.Time
		to    []netip.Addr
		keep  netip.Addr
		until time.Time // zero: none
	}{
		{"backup follows its master, ahead of any takeover",
			cluster.VIPStatus{LocalState: cluster.VIPStateBackup, Master: b}, none, t0, []netip.Addr{b}, b, time.Time{}},
		{"backup: a new master replaces the last one",
			cluster.VIPStatus{LocalState: cluster.VIPStateBackup, Master: c}, b, t0, []netip.Addr{c}, c, time.Time{}},
		{"backup: a priority-0 release clears Master, the leaving master stays the target",
			cluster.VIPStatus{LocalState: cluster.VIPStateBackup}, b, t0, []netip.Addr{b}, b, time.Time{}},
		{"backup: the holders heard within the window too, until their window ends",
			cluster.VIPStatus{LocalState: cluster.VIPStateBackup, Master: c, Holders: []cluster.VIPHolder{alive(d, t0.Add(-20*time.Second)), alive(b, t0.Add(-2*time.Second)), alive(c, t0)}},
			none, t0, []netip.Addr{b, c}, c, t0.Add(window - 2*time.Second)},
		{"master handed over alive: pass back within the window",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Predecessor: b, Since: t0}, b, t0.Add(window - time.Millisecond), []netip.Addr{b}, none, t0.Add(window)},
		{"master: the window is over",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Predecessor: b, Since: t0}, b, t0.Add(window), nil, none, time.Time{}},
		{"master after a silent master: its connections go to it a moment, in case it is only slow",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Since: t0}, b, t0.Add(silenceGrace - time.Millisecond), []netip.Addr{b}, b, t0.Add(silenceGrace)},
		{"master after a silent master: then nothing, it is taken for dead",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Since: t0}, b, t0.Add(silenceGrace), nil, none, time.Time{}},
		{"master after a silent master that turned out alive (vrrp's late predecessor)",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Predecessor: b, Since: t0}, b, t0.Add(5 * time.Second), []netip.Addr{b}, none, t0.Add(window)},
		{"master with nobody followed before",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Since: t0}, none, t0, nil, none, time.Time{}},
		{"two moves: the predecessor and the holder before it, each for its own window",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Predecessor: b, Since: t0,
				Holders: []cluster.VIPHolder{alive(d, t0.Add(-3*time.Second)), alive(b, t0)}},
			b, t0.Add(time.Second), []netip.Addr{b, d}, none, t0.Add(window - 3*time.Second)},
		{"two moves: the older holder's window ends first",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Predecessor: b, Since: t0,
				Holders: []cluster.VIPHolder{alive(d, t0.Add(-3*time.Second)), alive(b, t0)}},
			b, t0.Add(window - 2*time.Second), []netip.Addr{b}, none, t0.Add(window)},
		{"split brain: a router that claimed the VIP after our takeover is a holder too",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Predecessor: b, Since: t0,
				Holders: []cluster.VIPHolder{alive(b, t0), silent(c, t0.Add(200*time.Millisecond))}},
			b, t0.Add(time.Second), []netip.Addr{b, c}, none, t0.Add(window)},
		{"after a silent master, an older live holder keeps its window and the silent one only the grace",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Since: t0,
				Holders: []cluster.VIPHolder{alive(d, t0.Add(-4*time.Second)), silent(b, t0.Add(-350*time.Millisecond))}},
			b, t0.Add(silenceGrace), []netip.Addr{d}, none, t0.Add(window - 4*time.Second)},
		{"fault holds no VIP and keeps the last master",
			cluster.VIPStatus{LocalState: cluster.VIPStateFault}, b, t0, nil, b, time.Time{}},
		{"init", cluster.VIPStatus{LocalState: cluster.VIPStateInit}, none, t0, nil, none, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			to, keep, until := handbackTargets(tt.st, tt.last, tt.now, window)
			if !slices.Equal(to, tt.to) || keep != tt.keep || !until.Equal(tt.until) {
				t.Errorf("handbackTargets = %v, %v, until %v; want %v, %v, until %v", to, keep, until, tt.to, tt.keep, tt.until)
			}
		})
	}
}
