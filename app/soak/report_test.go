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
