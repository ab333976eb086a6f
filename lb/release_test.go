package lb

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"appliance/internal/cluster"
)

func TestTrackRelease(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.5"), netip.MustParseAddr("2001:db8::5")
	other := netip.MustParseAddr("192.0.2.6") // an ingress VIP: not the LB's
	vips := []netip.Addr{v4, v6}
	snap := func(states map[netip.Addr]cluster.VIPState) *cluster.Snapshot {
		s := &cluster.Snapshot{}
		for v, st := range states {
			s.VIPs = append(s.VIPs, cluster.VIPStatus{VIP: v, LocalState: st})
		}
		return s
	}
	t0 := time.Unix(1000, 0)
	M, B, F := cluster.VIPStateMaster, cluster.VIPStateBackup, cluster.VIPStateFault
	held := map[netip.Addr]bool{}
	lost := map[netip.Addr]time.Time{}
	steps := []struct {
		name   string
		states map[netip.Addr]cluster.VIPState
		want   map[netip.Addr]time.Time
	}{
		{"backup from the start loses nothing", map[netip.Addr]cluster.VIPState{v4: B, v6: B, other: M}, map[netip.Addr]time.Time{}},
		{"takes both", map[netip.Addr]cluster.VIPState{v4: M, v6: M, other: B}, map[netip.Addr]time.Time{}},
		{"preempted on v4", map[netip.Addr]cluster.VIPState{v4: B, v6: M, other: B}, map[netip.Addr]time.Time{v4: t0.Add(2 * time.Second)}},
		{"still backup: the clock runs on", map[netip.Addr]cluster.VIPState{v4: F, v6: M}, map[netip.Addr]time.Time{v4: t0.Add(2 * time.Second)}},
		{"v4 back: nothing to end; v6 lost", map[netip.Addr]cluster.VIPState{v4: M, v6: B}, map[netip.Addr]time.Time{v6: t0.Add(4 * time.Second)}},
	}
	for i, s := range steps {
		trackRelease(vips, snap(s.states), held, lost, t0.Add(time.Duration(i)*time.Second))
		if len(lost) != len(s.want) {
			t.Fatalf("%s: lost %v, want %v", s.name, lost, s.want)
		}
		for v, at := range s.want {
			if !lost[v].Equal(at) {
				t.Fatalf("%s: lost %v, want %v", s.name, lost, s.want)
			}
		}
	}

	drain := 10 * time.Second
	lost = map[netip.Addr]time.Time{v4: t0, v6: t0.Add(3 * time.Second)}
	for _, c := range []struct {
		now  time.Time
		due  []netip.Addr
		next time.Time
	}{
		{t0.Add(5 * time.Second), nil, t0.Add(10 * time.Second)},
		{t0.Add(10 * time.Second), []netip.Addr{v4}, t0.Add(13 * time.Second)},
		{t0.Add(20 * time.Second), []netip.Addr{v4, v6}, time.Time{}},
	} {
		due, next := releaseDue(lost, c.now, drain)
		if !slices.Equal(due, c.due) || !next.Equal(c.next) {
			t.Errorf("releaseDue at +%s: %v, next %v; want %v, next %v", c.now.Sub(t0), due, next, c.due, c.next)
		}
	}
}
