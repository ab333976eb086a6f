//go:build bench

package libvirt

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"appliance/platform"
)

// TestBenchProvisionLibvirt times apply (image, define + volumes, start) of
// 1 + 3 + N nodes on the test:///default driver of a private libvirtd:
// all machines at once (8 in flight, as the engine runs them) against one
// at a time. test:///default does no I/O, so this measures our RPC round
// trips and the daemon's handling, not disks or qemu.
func TestBenchProvisionLibvirt(t *testing.T) {
	d := startDaemon(t)
	imgPath := filepath.Join(d.Dir, "base.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", imgPath, "64M")
	st, err := os.Stat(imgPath)
	if err != nil {
		t.Fatal(err)
	}
	img := platform.Image{Path: imgPath, Format: "qcow2", SHA256: strings.Repeat("be", 32), Size: st.Size(), Flavor: platform.FlavorQEMU}
	const rounds = 3
	run := func(workers, parallel int) time.Duration {
		var times []time.Duration
		for range rounds {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			// A fresh connection is a fresh test:///default state.
			p, err := New(ctx, testDriverOptions(d), nil)
			if err != nil {
				t.Fatal(err)
			}
			spec := clusterSpec("bench"+uniq(), img, workers)
			start := time.Now()
			// The engine as `provision apply` runs it: plan, image, create, start.
			res, err := platform.Apply(ctx, p, spec, platform.ApplyOptions{Parallel: parallel})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Started) != len(spec.Machines) {
				t.Fatalf("started %d of %d", len(res.Started), len(spec.Machines))
			}
			times = append(times, time.Since(start))
			if lines, err := p.Destroy(ctx, spec.InfraID); err != nil || len(lines) == 0 {
				t.Fatalf("destroy: %v", err)
			}
			p.Close()
			cancel()
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		return times[len(times)/2]
	}
	var b strings.Builder
	b.WriteString("\n| nodes (1+3+N) | one at a time | parallel (8) | speedup |\n|---|---|---|---|\n")
	for _, n := range []int{2, 10, 50} {
		seq := run(n, 1)
		par := run(n, 8)
		fmt.Fprintf(&b, "| %d (N=%d) | %v | %v | %.2fx |\n", 4+n, n, seq.Round(time.Millisecond/10), par.Round(time.Millisecond/10), float64(seq)/float64(par))
	}
	t.Logf("libvirt test:///default provisioning, median of %d runs:%s", rounds, b.String())
}
