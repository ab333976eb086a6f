package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "appliance_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	ready := errors.New("VIP api-v4 is FAULT")
	var note error
	s, err := New(Options{
		Listen:   "127.0.0.1:0",
		Registry: reg,
		Status:   func() any { return map[string]string{"api-v4": "MASTER"} },
		Ready:    func() error { return ready },
		Notes:    func() error { return note },
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	base := "http://" + s.Addr().String()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "FAULT") {
		t.Errorf("/readyz = %d %q, want 503 naming the cause", code, body)
	}
	ready = nil
	if code, body := get("/readyz"); code != 200 || body != "ok\n" {
		t.Errorf("/readyz after ready = %d %q", code, body)
	}
	// A note is listed, and counts for nothing.
	note = errors.Join(errors.New("scrape: not listening: no certificate"), errors.New("second line"))
	if code, body := get("/readyz"); code != 200 || body != "ok\nnot counted: scrape: not listening: no certificate\nnot counted: second line\n" {
		t.Errorf("/readyz with a note = %d %q, want 200 listing it", code, body)
	}
	ready = errors.New("lb: no backend")
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "lb: no backend") || !strings.Contains(body, "not counted: scrape") {
		t.Errorf("/readyz not ready with a note = %d %q", code, body)
	}
	ready, note = nil, nil
	if _, body := get("/metrics"); !strings.Contains(body, "appliance_test_total 3") {
		t.Errorf("/metrics lacks the counter:\n%s", body)
	}
	_, body := get("/status")
	var st map[string]string
	if err := json.Unmarshal([]byte(body), &st); err != nil || st["api-v4"] != "MASTER" {
		t.Errorf("/status = %q (%v)", body, err)
	}
}

func TestListenClashNamesTheFix(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := New(Options{Listen: "127.0.0.1:0", Registry: reg}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.ln.Close()
	_, err = New(Options{Listen: a.Addr().String(), Registry: reg}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "admin.listen") {
		t.Fatalf("want an error naming admin.listen, got %v", err)
	}
}
