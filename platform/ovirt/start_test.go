package ovirt

import (
	"context"
	"strings"
	"testing"

	"appliance/platform"
)

func TestStartHonoursAffinity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("enforcing", func(t *testing.T) {
		t.Parallel()
		// The mock has one host: enforcing anti-affinity lets only one master run.
		e := newEnv(t, nil)
		spec := noResize(testSpec(t, 0))
		if err := apply(ctx, e.p, spec, 8, nil); err != nil {
			t.Fatal(err)
		}
		for i, m := range spec.Machines[:3] { // bootstrap, master-0, master-1
			err := e.p.Start(ctx, spec, m)
			if i < 2 && err != nil {
				t.Fatalf("start %s: %v", m.Name, err)
			}
			if i == 2 && (err == nil || !strings.Contains(err.Error(), "no suitable host")) {
				t.Fatalf("start %s on one host with enforcing anti-affinity: %v", m.Name, err)
			}
		}
		// Starting a started VM is fine.
		if err := e.p.Start(ctx, spec, spec.Machines[0]); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("soft", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, func(o *Options) { o.Affinity.Soft = true })
		spec := noResize(testSpec(t, 1))
		if err := apply(ctx, e.p, spec, 8, nil); err != nil {
			t.Fatal(err)
		}
		for _, m := range spec.Machines {
			if err := e.p.Start(ctx, spec, m); err != nil {
				t.Fatal(err)
			}
		}
		vms, err := e.p.List(ctx, infraID)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vms {
			if v.Power != platform.PowerStarting && v.Power != platform.PowerRunning {
				t.Errorf("%s %s", v.Name, v.Power)
			}
		}
		// Destroy stops running VMs first.
		if _, err := e.p.Destroy(ctx, infraID); err != nil {
			t.Fatal(err)
		}
		if got := e.inventory(t); got != (inventory{Templates: 1}) {
			t.Errorf("after destroy: %+v", got)
		}
	})
}
