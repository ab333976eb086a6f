package soak

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestLSSlope(t *testing.T) {
	x := []float64{0, 1, 2, 3}
	if s := lsSlope(x, []float64{5, 7, 9, 11}); math.Abs(s-2) > 1e-9 {
		t.Errorf("slope %v, want 2", s)
	}
	if s := lsSlope([]float64{1, 1}, []float64{1, 2}); s != 0 {
		t.Errorf("slope of a vertical line %v, want 0", s)
	}
}

// TestSlopes: a process that leaks two goroutines a minute is caught; a
// flat one passes, and so does one whose descriptors grow with the LB's
// pipes and sessions only (it took the API VIP); one sampled too briefly is
// not judged.
func TestSlopes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ss []procSample
	for i := range 200 { // 5-s samples: 16 minutes
		at := t0.Add(time.Duration(i) * 5 * time.Second)
		ss = append(ss,
			procSample{At: at, Node: "leaky", Pid: 1, Since: t0, RSSKiB: 30000 + float64(i%7)*100, Goroutines: 100 + float64(i)/6, FDs: 40},
			procSample{At: at, Node: "flat", Pid: 2, Since: t0, RSSKiB: 30000 + float64(i%7)*300, Goroutines: 100 + float64(i%3), FDs: 40 + float64(i%2)})
		var pipes, sessions float64
		if i >= 100 {
			pipes, sessions = 40, 6
		}
		ss = append(ss, procSample{At: at, Node: "holder", Pid: 4, Since: t0, RSSKiB: 30000, Goroutines: 100, FDs: 40 + pipes + 2*sessions,
			Pipes: pipes, Sessions: sessions})
		if i < 30 {
			ss = append(ss, procSample{At: at, Node: "young", Pid: 3, Since: t0, RSSKiB: 30000 + float64(i)*1000, Goroutines: float64(i), FDs: float64(i)})
		}
	}
	got, inv := slopes(ss)
	verdict := map[string]string{}
	for _, s := range got {
		verdict[s.Node] = s.Verdict
	}
	if !strings.HasPrefix(verdict["leaky"], "leak: goroutines") {
		t.Errorf("leaky: %q", verdict["leaky"])
	}
	for _, n := range []string{"flat", "holder"} {
		if verdict[n] != "flat" {
			t.Errorf("%s: %q", n, verdict[n])
		}
	}
	if !strings.HasPrefix(verdict["young"], "too short") {
		t.Errorf("young: %q", verdict["young"])
	}
	if len(inv.Violations) != 1 {
		t.Errorf("violations %q, want the leaky one only", inv.Violations)
	}
}

// TestAttribute plays failures against faults through attribute: which
// kinds explain which failures, on which nodes, within which window (half
// a second before a fault's start to its recovery after its end).
func TestAttribute(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	c := &cluster{}
	for _, n := range []struct{ name, role string }{{"bootstrap", roleBootstrap}, {"master-0", roleMaster},
		{"master-1", roleMaster}, {"worker-0", roleWorker}, {"worker-1", roleWorker}} {
		c.nodes = append(c.nodes, &node{name: n.name, role: n.role})
	}
	s := &soak{c: c}
	// fault: kind on node from 100 s to 103 s.
	fault := func(kind Kind, node, note string) *faultRun {
		return &faultRun{Fault: Fault{ID: 7, Kind: kind}, Node: node, Note: note, Start: at(100), End: at(103)}
	}
	rec := recoveryBound.Seconds()
	for _, tc := range []struct {
		name          string
		run           *faultRun
		class, target string
		from, to      float64
		want          bool
	}{
		{"kill9 of a master: a call", fault(KindKill9, "master-0", ""), "api", "", 101, 101.1, true},
		{"kill9 of a worker: a call", fault(KindKill9, "worker-0", ""), "api", "", 101, 101.1, false},
		{"kill9 of a worker: a stream", fault(KindKill9, "worker-0", ""), "stream", "", 90, 101, false},
		{"kill9 of a worker: the ingress VIP", fault(KindKill9, "worker-0", ""), "ingress-gap", "", 101, 102, true},
		{"kill9 of the bootstrap: the ingress VIP", fault(KindKill9, "bootstrap", ""), "ingress-gap", "", 101, 102, false},
		{"link flap: its node's DNS", fault(KindLinkFlap, "master-1", ""), "dns", "master-1", 101, 102, true},
		{"link flap: another node's DNS", fault(KindLinkFlap, "master-1", ""), "dns", "master-0", 101, 102, false},
		{"packet loss on a worker: its DHCP client", fault(KindPacketLoss, "worker-1", ""), "dhcp", "worker-1", 101, 102, true},
		{"packet loss on a worker: another DHCP client", fault(KindPacketLoss, "worker-1", ""), "dhcp", "worker-0", 101, 102, false},
		{"SIGTERM of the holder: a call", fault(KindSigtermHolder, "master-0", ""), "api", "", 101, 101.1, false},
		{"SIGTERM of the holder: a stream", fault(KindSigtermHolder, "master-0", ""), "stream", "", 90, 101, false},
		{"SIGTERM of the holder: its DNS", fault(KindSigtermHolder, "master-0", ""), "dns", "master-0", 101, 102, true},
		{"SIGTERM of the holder: DHCP", fault(KindSigtermHolder, "master-0", ""), "dhcp", "worker-0", 101, 102, true},
		{"teardown: a call", fault(KindBootstrapTeardown, "bootstrap", ""), "api", "", 101, 101.1, false},
		{"API VIP deleted: a call", fault(KindVIPDelete, "master-0", "API VIP"), "api", "", 101, 101.1, true},
		{"API VIP deleted: the ingress VIP", fault(KindVIPDelete, "master-0", "API VIP"), "ingress-gap", "", 101, 102, false},
		{"ingress VIP deleted: the ingress VIP", fault(KindVIPDelete, "worker-0", "ingress VIP"), "ingress-gap", "", 101, 102, true},
		{"ingress VIP deleted: a call", fault(KindVIPDelete, "worker-0", "ingress VIP"), "api", "", 101, 101.1, false},
		{"nft flush: a call", fault(KindNftFlush, "master-0", ""), "api", "", 101, 101.1, true},
		{"nft flush: DNS", fault(KindNftFlush, "master-0", ""), "dns", "master-0", 101, 102, false},
		{"apiserver killed: a stream", fault(KindAPIServerKill, "master-1", ""), "stream", "", 90, 101, true},
		{"upstream black-holed: a forwarded name", fault(KindUpstreamBlackhole, "", ""), "dns-forwarded", "master-0", 101, 102, true},
		{"upstream black-holed: a node's name", fault(KindUpstreamBlackhole, "", ""), "dns", "master-0", 101, 102, false},
		{"kube restarted: a day-2 name", fault(KindKubeRestart, "", ""), "day2", "master-0", 101, 102, true},
		{"kube restarted: a call", fault(KindKubeRestart, "", ""), "api", "", 101, 101.1, false},
		// The window.
		{"just before the start", fault(KindKill9, "master-0", ""), "api", "", 99.6, 99.7, true},
		{"well before the start", fault(KindKill9, "master-0", ""), "api", "", 99.3, 99.4, false},
		{"a call reaching into the start", fault(KindKill9, "master-0", ""), "api", "", 95, 99.6, true},
		{"within the recovery", fault(KindKill9, "master-0", ""), "api", "", 103 + rec - 0.2, 103 + rec - 0.1, true},
		{"after the recovery", fault(KindKill9, "master-0", ""), "api", "", 103 + rec + 0.1, 103 + rec + 0.2, false},
		{"within the kube restart's longer recovery", fault(KindKubeRestart, "", ""), "day2", "master-0", 103 + 39, 103 + 39.5, true},
		{"after it", fault(KindKubeRestart, "", ""), "day2", "master-0", 103 + 40.5, 103 + 41, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := s.attribute([]*faultRun{tc.run}, tc.class, tc.target, at(tc.from), at(tc.to))
			if (got != nil) != tc.want {
				t.Errorf("%s on %s, %s failure for %q at %.1f-%.1fs: attributed %v, want %v",
					tc.run.Kind, tc.run.Node, tc.class, tc.target, tc.from, tc.to, got != nil, tc.want)
			}
		})
	}

	// A skipped fault, or one that never started, explains nothing; of
	// several, the first that explains the failure takes it.
	skipped := fault(KindKill9, "master-0", "")
	skipped.Skipped = "no node to hit"
	unstarted := &faultRun{Fault: Fault{ID: 8, Kind: KindKill9}, Node: "master-0"}
	worker := fault(KindKill9, "worker-0", "")
	worker.ID = 9
	master := fault(KindLinkFlap, "master-1", "")
	master.ID = 10
	if r := s.attribute([]*faultRun{skipped, unstarted}, "api", "", at(101), at(101)); r != nil {
		t.Errorf("attributed to #%d, a fault that did not run", r.ID)
	}
	if r := s.attribute([]*faultRun{skipped, worker, master}, "api", "", at(101), at(101)); r == nil || r.ID != 10 {
		t.Errorf("attributed to %v, want #10 (the master's link flap)", r)
	}
}
