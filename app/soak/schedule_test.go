package soak

import (
	"slices"
	"testing"
	"time"
)

// TestPlanSameSeedSameSchedule: the schedule is a pure function of the
// seed, the duration and the kinds switched off.
func TestPlanSameSeedSameSchedule(t *testing.T) {
	a, b := Plan(42, 10*time.Minute, nil), Plan(42, 10*time.Minute, nil)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	if c := Plan(43, 10*time.Minute, nil); slices.Equal(a, c) {
		t.Error("seeds 42 and 43 gave the same schedule")
	}
	if len(a) < 20 {
		t.Errorf("%d faults in 10 minutes; want a fault every few seconds", len(a))
	}
}

// TestPlanShape: the teardown comes once, between a sixth and a third of
// the soak; nothing starts in the warm-up or the cool-down; IDs follow
// the times; several kinds show; some faults overlap.
func TestPlanShape(t *testing.T) {
	const d = 30 * time.Minute
	for seed := range uint64(20) {
		plan := Plan(seed, d, nil)
		teardowns, overlaps := 0, 0
		seen := map[Kind]bool{}
		for i, f := range plan {
			seen[f.Kind] = true
			if f.ID != i+1 || (i > 0 && f.At < plan[i-1].At) {
				t.Fatalf("seed %d: fault %d out of order: %+v", seed, i, f)
			}
			if f.At < warmup || f.At > d-cooldown {
				t.Errorf("seed %d: %s at %s, outside [%s, %s]", seed, f.Kind, f.At, warmup, d-cooldown)
			}
			if f.Kind == KindBootstrapTeardown {
				teardowns++
				if f.At < d/6 || f.At > d/3+time.Second {
					t.Errorf("seed %d: teardown at %s, want between %s and %s", seed, f.At, d/6, d/3)
				}
			}
			if ki := infoOf(f.Kind); ki.maxDur > 0 && (f.Dur < ki.minDur || f.Dur > ki.maxDur) {
				t.Errorf("seed %d: %s lasts %s, want %s-%s", seed, f.Kind, f.Dur, ki.minDur, ki.maxDur)
			}
			if i > 0 && f.At < plan[i-1].At+plan[i-1].Dur {
				overlaps++
			}
		}
		if teardowns != 1 {
			t.Errorf("seed %d: %d teardowns, want 1", seed, teardowns)
		}
		if len(seen) < 10 {
			t.Errorf("seed %d: only %d kinds in 30 minutes", seed, len(seen))
		}
		if overlaps == 0 {
			t.Errorf("seed %d: no two faults at once in 30 minutes", seed)
		}
	}
}

// TestPlanOff: a kind switched off never comes, and the rest still do.
func TestPlanOff(t *testing.T) {
	off := []Kind{KindKill9, KindBootstrapTeardown, KindPacketLoss}
	for _, f := range Plan(7, 30*time.Minute, off) {
		if slices.Contains(off, f.Kind) {
			t.Fatalf("%s scheduled while off", f.Kind)
		}
	}
	var all []Kind
	for _, k := range Kinds() {
		all = append(all, k)
	}
	if p := Plan(7, 30*time.Minute, all); len(p) != 0 {
		t.Errorf("every kind off, still %d faults", len(p))
	}
}

func TestParseKinds(t *testing.T) {
	ks, err := ParseKinds(" kill9,br-ex ,,bootstrap-teardown")
	if err != nil || !slices.Equal(ks, []Kind{KindKill9, KindBrEx, KindBootstrapTeardown}) {
		t.Errorf("ParseKinds = %v, %v", ks, err)
	}
	if _, err := ParseKinds("kill9,reboot"); err == nil {
		t.Error("an unknown kind was accepted")
	}
}

// TestPlanEveryKindEarly: a 3-minute soak, the one make test runs, meets
// every kind the random schedule draws from.
func TestPlanEveryKindEarly(t *testing.T) {
	for seed := range uint64(20) {
		seen := map[Kind]bool{}
		for _, f := range Plan(seed, 3*time.Minute, nil) {
			seen[f.Kind] = true
		}
		for _, ki := range kinds {
			if !seen[ki.kind] {
				t.Errorf("seed %d: no %s in 3 minutes", seed, ki.kind)
			}
		}
	}
}
