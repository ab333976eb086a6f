package soak

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Two reports of one schedule come back from report.json and print side
// by side, each kind's costs and each invariant's verdict per stack.
func TestCompareSideBySide(t *testing.T) {
	mk := func(stack string, outage time.Duration, failed int, inv invariant) *Report {
		return &Report{Seed: 7, Duration: 3 * time.Minute, Stack: stack,
			Faults: []*faultRun{{Fault: Fault{ID: 1, Kind: KindKill9}, APIOutage: outage, FailedCalls: failed},
				{Fault: Fault{ID: 2, Kind: KindNftFlush}, Skipped: "no node"}},
			Calls: 4500, FailedCalls: failed, Streams: streamTotals{Opened: 10, Ends: map[string]int{"eof": 6, "open": 2, "reset": 2}},
			Invariants: []invariant{inv}}
	}
	dir := t.TempDir()
	var paths []string
	for _, rep := range []*Report{
		mk(StackAppliance, 400*time.Millisecond, 0, invariant{Key: "one-holder", Name: "one holder", Held: true, Checks: 9}),
		// The same invariant by Key, worded differently.
		mk(StackClassic, 3600*time.Millisecond, 17, invariant{Key: "one-holder", Name: "one holder, reworded", Violations: []string{"a", "b"}}),
	} {
		p, err := rep.write(filepath.Join(dir, rep.Stack))
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	a, err := ReadReport(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReadReport(paths[1])
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	Compare(&out, a, b)
	got := out.String()
	for _, want := range []string{
		"appliance | classic (seed 7, 3m0s)",
		"kill9", "1 | 1", "400ms | 3.6s", "0 | 17",
		"nft-flush", "0 | 0",
		"streams broken (reset, stalled, cut)      2          2",
		"one holder", "held", "BROKEN (2)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("side by side lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "reworded") {
		t.Errorf("one invariant on two rows:\n%s", got)
	}
	if strings.Contains(got, "not one schedule") {
		t.Errorf("one schedule called two:\n%s", got)
	}
	b.Seed = 8
	out.Reset()
	Compare(&out, a, b)
	if !strings.Contains(out.String(), "not one schedule: seed 7, 3m0s against seed 8, 3m0s") {
		t.Errorf("two schedules not called out:\n%s", out.String())
	}
}
