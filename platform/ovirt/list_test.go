package ovirt

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestWaitForAddresses(t *testing.T) {
	if testing.Short() {
		t.Skip("the mock reports guest addresses 14 s after start")
	}
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, func(o *Options) { o.Affinity.Disabled = true; o.PollInterval = 500 * time.Millisecond })
	spec := noResize(testSpec(t, 0))
	spec.Machines = spec.Machines[:2]
	if err := apply(ctx, e.p, spec, 8, nil); err != nil {
		t.Fatal(err)
	}
	names := []string{spec.Machines[0].Name, spec.Machines[1].Name}
	// Not started: gives up quickly, naming the VMs.
	if _, err := e.p.WaitForAddresses(ctx, infraID, names, 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), names[1]) {
		t.Fatalf("err = %v", err)
	}
	for _, m := range spec.Machines {
		if err := e.p.Start(ctx, spec, m); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	got, err := e.p.WaitForAddresses(ctx, infraID, names, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("addresses after %s: %v", time.Since(start).Round(time.Millisecond), got)
	for _, n := range names {
		// The mock reports lo (skipped), 192.168.0.123 and fe80::123 (link-local, skipped).
		if len(got[n]) != 1 || got[n][0].String() != "192.168.0.123" {
			t.Errorf("%s: %v", n, got[n])
		}
	}
}
