package service

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"appliance/internal/admin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder notes the order services stop in.
type recorder struct {
	mu    sync.Mutex
	order []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.order = append(r.order, s)
	r.mu.Unlock()
}

// fake is a service that runs until told to stop, taking hold to clean up.
func fake(rec *recorder, name string, hold time.Duration, ready error) Func {
	return Func{ID: name,
		RunFunc: func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(hold)
			rec.add(name)
			return nil
		},
		ReadyFn:  func() error { return ready },
		StatusFn: func() any { return map[string]string{"name": name} },
	}
}

func opts() Options {
	return Options{Admin: admin.Options{Listen: "127.0.0.1:0", Registry: prometheus.NewRegistry()}}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestStagesStopInOrder(t *testing.T) {
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log, logged := captureLog()
	go func() {
		// The first stage takes longest to stop; the later ones must wait.
		done <- Run(ctx, log, opts(),
			Stage{fake(rec, "vrrp-api", 50*time.Millisecond, nil), fake(rec, "vrrp-ingress", 30*time.Millisecond, nil)},
			Stage{fake(rec, "lb", 0, nil)},
			Stage{fake(rec, "dns", 0, nil)})
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	got := strings.Join(rec.order, " ")
	if got != "vrrp-ingress vrrp-api lb dns" {
		t.Errorf("stop order %q; want both VRRP services, then lb, then dns", got)
	}
	// Each stage's stop is logged with its time, in order.
	all := logged()
	var stopped []string
	for _, l := range strings.Split(all, "\n") {
		if strings.Contains(l, "msg=stopped") && strings.Contains(l, "took=") {
			_, svcs, _ := strings.Cut(l, "services=")
			svcs, _, _ = strings.Cut(svcs, " took=")
			stopped = append(stopped, svcs)
		}
	}
	if got := strings.Join(stopped, " "); got != "\"[vrrp-api vrrp-ingress]\" [lb] [dns]" {
		t.Errorf("stop log lines %q; want one per stage, in order:\n%s", got, all)
	}
}

func TestAFailingServiceStopsTheOthersLoudly(t *testing.T) {
	rec := &recorder{}
	boom := Func{ID: "mdns", RunFunc: func(context.Context) error { return errors.New("socket closed") }}
	quitter := Func{ID: "quitter", RunFunc: func(context.Context) error { return nil }}
	for _, c := range []struct {
		svc  Func
		want string
	}{{boom, "mdns: socket closed"}, {quitter, "quitter stopped on its own"}} {
		rec.order = nil
		err := Run(context.Background(), quiet(), opts(), Stage{fake(rec, "vrrp", 0, nil)}, Stage{c.svc, fake(rec, "dns", 0, nil)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run = %v, want an error saying %q", err, c.want)
		}
		if got := strings.Join(rec.order, " "); got != "vrrp dns" {
			t.Errorf("after %s failed, stopped %q; want every other service stopped in order", c.svc.ID, got)
		}
	}
}

func TestAdminShowsEveryService(t *testing.T) {
	rec := &recorder{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	o := opts()
	o.Admin.Listen = addr
	o.Extra = map[string]func() any{"members": func() any { return []string{"master-0"} }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, quiet(), o, Stage{fake(rec, "vrrp", 0, nil)}, Stage{fake(rec, "lb", 0, errors.New("no healthy backend"))})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	get := func(path string) (int, string) {
		t.Helper()
		var resp *http.Response
		var err error
		for range 100 {
			if resp, err = http.Get("http://" + addr + path); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "lb: no healthy backend") {
		t.Errorf("/readyz = %d %q; want 503 naming the service that is not ready", code, body)
	}
	_, body := get("/status")
	for _, want := range []string{`"vrrp"`, `"lb"`, `"members"`, `"master-0"`} {
		if !strings.Contains(body, want) {
			t.Errorf("/status lacks %s:\n%s", want, body)
		}
	}
}

func TestAdminPortClashStartsNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	o := opts()
	o.Admin.Listen = ln.Addr().String()
	started := false
	svc := Func{ID: "vrrp", RunFunc: func(context.Context) error { started = true; return nil }}
	if err := Run(context.Background(), quiet(), o, Stage{svc}); err == nil || !strings.Contains(err.Error(), "admin.listen") {
		t.Errorf("Run = %v, want the admin listener's clash naming the setting", err)
	}
	if started {
		t.Error("a service started although the admin port was taken")
	}
}

func TestDuplicateNamesAreRefused(t *testing.T) {
	rec := &recorder{}
	err := Run(context.Background(), quiet(), opts(), Stage{fake(rec, "lb", 0, nil)}, Stage{fake(rec, "lb", 0, nil)})
	if err == nil || !strings.Contains(err.Error(), `"lb"`) {
		t.Errorf("Run = %v", err)
	}
}

// TestReleasesPagesOnceReady: the binary's pages are released after every
// service is ready, once at Info and then periodically at Debug, and the
// releaser ends with the services.
func TestReleasesPagesOnceReady(t *testing.T) {
	saved := releaseAt
	t.Cleanup(func() { releaseAt = saved })
	releaseAt.settle, releaseAt.every = 10*time.Millisecond, 20*time.Millisecond
	log, logged := captureLog()
	ready := errors.New("not yet")
	var readyMu sync.Mutex
	svc := Func{ID: "s", RunFunc: func(ctx context.Context) error { <-ctx.Done(); return nil },
		ReadyFn: func() error { readyMu.Lock(); defer readyMu.Unlock(); return ready }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		releasePages(ctx, log, []Service{svc})
	}()
	time.Sleep(100 * time.Millisecond)
	early := logged()
	if strings.Contains(early, "released") {
		t.Fatalf("released before the service was ready:\n%s", early)
	}
	readyMu.Lock()
	ready = nil
	readyMu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := logged()
		if strings.Contains(got, "level=INFO msg=\"released") && strings.Contains(got, "level=DEBUG msg=\"released") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no release at Info then Debug:\n%s", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
}

// captureLog is a debug-level logger and a function returning what it
// logged so far.
func captureLog() (*slog.Logger, func() string) {
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(b)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	return log, func() string {
		mu.Lock()
		defer mu.Unlock()
		return logs.String()
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
