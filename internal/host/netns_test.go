package host

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// TestHostFollowsAddress runs a Host on a lab node and moves the node's
// address around under it the way NetworkManager and OVN-Kubernetes do.
func TestHostFollowsAddress(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 1, Name: "host"})
	n := lab.Nodes[0]
	cfg := parse(t, testConfig)
	h := New(cfg, Options{}, "/run/netns/"+n.NS, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	views := h.Subscribe(ctx)
	ip := func(args ...string) {
		t.Helper()
		if out, err := n.Run(context.Background(), "ip", args...); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// await waits for a view that satisfies ok, failing after a loose bound.
	await := func(what string, ok func(*View) bool) *View {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case v := <-views:
				if ok(v) {
					return v
				}
			case <-deadline:
				t.Fatalf("no view with %s; last: %+v", what, h.View())
			}
		}
	}
	v := await("master-0 on eth0", func(v *View) bool { return v.Interface == "eth0" && v.Usable() })
	if v.Name != "master-0" || v.Role != "master" || joinPrefixes(v.Prefixes) != "[192.168.126.10/24]" {
		t.Fatalf("first view %+v", v)
	}

	// A VIP arriving changes nothing the subscribers see.
	before := h.View().Version
	ip("addr", "add", "192.168.126.5/24", "dev", "eth0")
	ip("addr", "add", "192.168.126.200/24", "dev", "eth0")
	await("the second own address", func(v *View) bool { return len(v.Prefixes) == 2 })
	if got := joinPrefixes(h.View().Prefixes); got != "[192.168.126.10/24 192.168.126.200/24]" || h.View().Version != before+1 {
		t.Fatalf("after adding a VIP and an address: %s (version %d, was %d)", got, h.View().Version, before)
	}

	// The address moves onto a new bridge.
	ip("link", "add", "br-ex", "type", "bridge")
	ip("link", "set", "br-ex", "up")
	ip("addr", "flush", "dev", "eth0")
	lost := await("no address", func(v *View) bool { return !v.Usable() })
	if !strings.Contains(lost.Problem, "no interface has an address") {
		t.Fatalf("problem %q", lost.Problem)
	}
	ip("addr", "add", "192.168.126.10/24", "dev", "br-ex")
	moved := await("br-ex", func(v *View) bool { return v.Interface == "br-ex" && v.Usable() })
	if moved.Name != "master-0" || joinPrefixes(moved.Prefixes) != "[192.168.126.10/24]" {
		t.Fatalf("after the move: %+v", moved)
	}

	// The interface is deleted: the view says so.
	ip("link", "del", "br-ex")
	await("no interface", func(v *View) bool { return v.Interface == "" && !v.Usable() })
}

func TestResolve(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 1, Name: "hostres"})
	cfg := parse(t, testConfig)
	var v *View
	err := lab.Nodes[0].Do(func() error {
		var err error
		v, err = Resolve(cfg, Options{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The lab's link may not have carrier yet; who and where is what counts.
	if v.Name != "master-0" || v.Interface != "eth0" || joinPrefixes(v.Prefixes) != "[192.168.126.10/24]" {
		t.Fatalf("Resolve: %+v", v)
	}
}

// warnCounter counts the WARN records logged through it.
type warnCounter struct {
	slog.Handler
	mu    sync.Mutex
	warns []string
}

func (w *warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		w.mu.Lock()
		w.warns = append(w.warns, r.Message)
		w.mu.Unlock()
	}
	return nil
}

func (w *warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnCounter) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *warnCounter) WithGroup(string) slog.Handler            { return w }

// TestRoleConflictWarnsOnce: a --role that disagrees with the configured
// role loses to it, with one warning naming both, however often the view is
// published afterwards.
func TestRoleConflictWarnsOnce(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 1, Name: "hostrole"})
	n := lab.Nodes[0]
	cfg := parse(t, testConfig)
	log := &warnCounter{}
	h := New(cfg, Options{Role: "worker"}, "/run/netns/"+n.NS, slog.New(log))
	v, err := h.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if v.Name != "master-0" || v.Role != "master" || !v.Configured {
		t.Fatalf("identified %+v, want master-0 with its configured role", v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	views := h.Subscribe(ctx)
	// A new address makes Run publish a new view.
	netlabtest.Run(t, n, "ip", "addr", "add", "192.168.126.200/24", "dev", "eth0")
	deadline := time.After(5 * time.Second)
	for len(h.View().Prefixes) < 2 {
		select {
		case <-views:
		case <-deadline:
			t.Fatalf("no view with the second address; last %+v", h.View())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := h.View(); got.Name != "master-0" || got.Role != "master" {
		t.Errorf("after a change: %+v", got)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.warns) != 1 || !strings.Contains(log.warns[0], "--role worker") || !strings.Contains(log.warns[0], "role master") {
		t.Errorf("warnings %q, want one naming --role worker and the configured role master", log.warns)
	}
}
