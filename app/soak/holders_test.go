package soak

import (
	"strings"
	"testing"
	"time"
)

// TestHolderGapBound plays holder timelines through holderInvariants: a
// gap that an unplanned fault explains passes while every node that could
// take over is hit by a fault, and breaks the invariant once one is not
// (the 30-minute soak's ingress gap: worker-1's link down 5.3 s, worker-0
// hit by nothing and never taking over).
func TestHolderGapBound(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	c := &cluster{}
	for _, n := range []struct{ name, role string }{{"bootstrap", roleBootstrap}, {"master-0", roleMaster},
		{"master-1", roleMaster}, {"worker-0", roleWorker}, {"worker-1", roleWorker}} {
		c.nodes = append(c.nodes, &node{name: n.name, role: n.role})
	}
	run := func(id int, kind Kind, node string, start, end float64) *faultRun {
		return &faultRun{Fault: Fault{ID: id, Kind: kind}, Node: node, Start: at(start), End: at(end)}
	}
	// gap: the ingress VIP without a holder from 100 s for gap seconds,
	// worker-1 holding it before and after.
	gap := func(d float64) []holderChange {
		return []holderChange{
			{At: at(0), VIP: "ingress", Holders: []string{"worker-1"}},
			{At: at(100), VIP: "ingress", Holders: nil},
			{At: at(100 + d), VIP: "ingress", Holders: []string{"worker-1"}},
		}
	}
	for _, tc := range []struct {
		name    string
		holders []holderChange
		runs    []*faultRun
		want    string // a violation containing it; "" none
	}{
		{"a Master_Down's gap", gap(0.35), []*faultRun{run(1, KindLinkFlap, "worker-1", 99.9, 105)}, ""},
		{"long, the other worker hit too", gap(5.6),
			[]*faultRun{run(1, KindLinkFlap, "worker-1", 99.9, 105.2), run(2, KindKill9, "worker-0", 90, 93)}, ""},
		{"long, the other worker hit by nothing", gap(5.6),
			[]*faultRun{run(1, KindLinkFlap, "worker-1", 99.9, 105.2)}, "though worker-0, hit by no fault, could hold it"},
		{"long, its fault long over", gap(5.6),
			[]*faultRun{run(1, KindLinkFlap, "worker-1", 99.9, 105.2), run(2, KindKill9, "worker-0", 10, 13)}, "though worker-0"},
		{"no fault at all", gap(2), nil, "with no unplanned fault to explain it"},
		{"a skipped fault explains nothing", gap(2),
			[]*faultRun{{Fault: Fault{ID: 1, Kind: KindLinkFlap}, Node: "worker-1", Skipped: "busy"}}, "with no unplanned fault"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &soak{c: c, rec: &recorder{holders: tc.holders}, loadStart: t0}
			_, present := s.holderInvariants(tc.runs, at(200))
			got := strings.Join(present.Violations, "\n")
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("violations %q, want one with %q", got, tc.want)
			}
		})
	}
	// The API VIP: the bootstrap may hold it until its teardown only.
	s := &soak{c: c}
	teardown := []*faultRun{run(1, KindBootstrapTeardown, "bootstrap", 50, 60)}
	if got := strings.Join(s.candidates("api", teardown, at(40)), " "); got != "bootstrap master-0 master-1" {
		t.Errorf("API VIP candidates before the teardown: %s", got)
	}
	if got := strings.Join(s.candidates("api", teardown, at(70)), " "); got != "master-0 master-1" {
		t.Errorf("API VIP candidates after the teardown: %s", got)
	}
}
