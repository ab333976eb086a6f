package lb

import (
	"net/netip"
	"testing"
	"time"

	"appliance/internal/cluster"
)

func TestHandbackTo(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := netip.MustParseAddr("192.0.2.10") // the old holder
	c := netip.MustParseAddr("192.0.2.11") // another master
	none := netip.Addr{}
	const window = 12 * time.Second
	tests := []struct {
		name      string
		st        cluster.VIPStatus
		last      netip.Addr
		now       time.Time
		to, keep  netip.Addr
		untilZero bool
	}{
		{"backup follows its master, ahead of any takeover",
			cluster.VIPStatus{LocalState: cluster.VIPStateBackup, Master: b}, none, t0, b, b, true},
		{"backup: a new master replaces the last one",
			cluster.VIPStatus{LocalState: cluster.VIPStateBackup, Master: c}, b, t0, c, c, true},
		{"backup: a priority-0 release clears Master, the leaving master stays the target",
			cluster.VIPStatus{LocalState: cluster.VIPStateBackup}, b, t0, b, b, true},
		{"master handed over alive: pass back within the window",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Predecessor: b, Since: t0}, b, t0.Add(window - time.Millisecond), b, none, false},
		{"master: the window is over",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Predecessor: b, Since: t0}, b, t0.Add(window), none, none, true},
		{"master after a silent master: its connections go to it a moment, in case it is only slow",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Since: t0}, b, t0.Add(silenceGrace - time.Millisecond), b, b, false},
		{"master after a silent master: then nothing, it is taken for dead",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Since: t0}, b, t0.Add(silenceGrace), none, none, true},
		{"master after a silent master that turned out alive (vrrp's late predecessor)",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Predecessor: b, Since: t0}, b, t0.Add(5 * time.Second), b, none, false},
		{"master with nobody followed before",
			cluster.VIPStatus{LocalState: cluster.VIPStateMaster, Since: t0}, none, t0, none, none, true},
		{"fault holds no VIP and keeps the last master",
			cluster.VIPStatus{LocalState: cluster.VIPStateFault}, b, t0, none, b, true},
		{"init", cluster.VIPStatus{LocalState: cluster.VIPStateInit}, none, t0, none, none, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			to, keep, until := handbackTo(tt.st, tt.last, tt.now, window)
			if to != tt.to || keep != tt.keep || until.IsZero() != tt.untilZero {
				t.Errorf("handbackTo = %v, %v, until %v; want %v, %v, until zero %v", to, keep, until, tt.to, tt.keep, tt.untilZero)
			}
			if !until.IsZero() && !until.Equal(tt.st.Since.Add(window)) && !until.Equal(tt.st.Since.Add(silenceGrace)) {
				t.Errorf("until %v, want the window's or the grace's end", until)
			}
		})
	}
}
