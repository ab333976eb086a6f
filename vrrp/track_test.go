package vrrp

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"appliance/internal/health"
)

// The fall/rise counting itself is tested in internal/health; here, that a
// TrackSet's checks start unhealthy and need Rise successes, and that Fall
// failures take them down again.
func TestTrackSetRecord(t *testing.T) {
	s, err := NewTrackSet([]TrackSpec{{Name: "a", Probe: FuncProbe(okProbe), Rise: 2, Fall: 3, Weight: 10}})
	if err != nil {
		t.Fatal(err)
	}
	fail := errors.New("down")
	steps := []struct {
		err     error
		healthy bool
		changed bool
	}{
		{nil, false, false}, {fail, false, false}, {nil, false, false}, {nil, true, true},
		{fail, true, false}, {fail, true, false}, {nil, true, false},
		{fail, true, false}, {fail, true, false}, {fail, false, true},
	}
	t0 := time.Unix(1000, 0)
	for i, st := range steps {
		now := t0.Add(time.Duration(i) * time.Second)
		changed := s.record(0, st.err, now)
		r := s.Results()[0]
		if changed != st.changed || r.Healthy != st.healthy {
			t.Fatalf("step %d (err %v): healthy=%v changed=%v, want healthy=%v changed=%v", i, st.err, r.Healthy, changed, st.healthy, st.changed)
		}
		if changed && !r.Since.Equal(now) {
			t.Errorf("step %d: Since %v, want %v", i, r.Since, now)
		}
		if (st.err != nil) != (r.Err != "") {
			t.Errorf("step %d: Err %q after err %v", i, r.Err, st.err)
		}
	}
}

func okProbe(context.Context) error { return nil }

func TestTrackSetAdjust(t *testing.T) {
	type tr struct {
		weight  int
		healthy bool
	}
	tests := []struct {
		name      string
		base      uint8
		tracks    []tr
		wantPrio  uint8
		wantFault bool
	}{
		{"no tracks", 100, nil, 100, false},
		{"positive weight healthy adds", 100, []tr{{10, true}}, 110, false},
		{"positive weight failing adds nothing", 100, []tr{{10, false}}, 100, false},
		{"negative weight failing subtracts", 100, []tr{{-30, false}}, 70, false},
		{"negative weight healthy subtracts nothing", 100, []tr{{-30, true}}, 100, false},
		{"mixed", 100, []tr{{10, true}, {20, true}, {-5, false}, {-50, true}, {7, false}}, 125, false},
		{"clamped at 254", 250, []tr{{10, true}}, 254, false},
		{"clamped at 1", 20, []tr{{-50, false}}, 1, false},
		{"never 0 even from base 0", 0, nil, 1, false},
		{"owner unchanged", 255, []tr{{-50, false}, {10, true}}, 255, false},
		{"owner still faults", 255, []tr{{0, false}}, 255, true},
		{"weight 0 failing faults", 100, []tr{{0, false}, {10, true}}, 110, true},
		{"weight 0 healthy does not", 100, []tr{{0, true}}, 100, false},
		{"254 with healthy positive stays 254", 254, []tr{{253, true}}, 254, false},
		{"1 with failing negative stays 1", 1, []tr{{-253, false}}, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var specs []TrackSpec
			for i, x := range tt.tracks {
				specs = append(specs, TrackSpec{Name: string(rune('a' + i)), Probe: FuncProbe(okProbe), Weight: x.weight})
			}
			s, err := NewTrackSet(specs)
			if err != nil {
				t.Fatal(err)
			}
			for i, x := range tt.tracks {
				st := health.Down
				if x.healthy {
					st = health.Up
				}
				s.tracks[i].h = health.NewHysteresis(1, 1, st)
			}
			prio, fault := s.Adjust(tt.base)
			if prio != tt.wantPrio || fault != tt.wantFault {
				t.Errorf("Adjust(%d) = %d, %v; want %d, %v", tt.base, prio, fault, tt.wantPrio, tt.wantFault)
			}
		})
	}
}

func TestTrackSetNilAndInitial(t *testing.T) {
	var nilSet *TrackSet
	if p, f := nilSet.Adjust(100); p != 100 || f {
		t.Errorf("nil Adjust(100) = %d, %v", p, f)
	}
	if r := nilSet.Results(); r != nil {
		t.Errorf("nil Results = %v", r)
	}
	s, err := NewTrackSet([]TrackSpec{
		{Name: "lb", Probe: FuncProbe(okProbe), Weight: 0},
		{Name: "api", Probe: FuncProbe(okProbe), Weight: -20},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Checks start unhealthy: weight 0 faults and negative weights apply.
	if p, f := s.Adjust(100); p != 80 || !f {
		t.Errorf("initial Adjust(100) = %d, %v; want 80, true", p, f)
	}
	res := s.Results()
	if len(res) != 2 || res[0].Name != "lb" || res[1].Name != "api" || res[0].Healthy || res[1].Weight != -20 || res[0].Err == "" {
		t.Errorf("initial Results = %+v", res)
	}
	spec := s.tracks[0].spec
	if spec.Interval != DefaultTrackInterval || spec.Timeout != DefaultTrackInterval || spec.Rise != 2 || spec.Fall != 2 {
		t.Errorf("defaults not applied: %+v", spec)
	}
}

func TestNewTrackSetValidation(t *testing.T) {
	p := FuncProbe(okProbe)
	tests := []struct {
		name  string
		specs []TrackSpec
		want  string // substring of the error
	}{
		{"empty name", []TrackSpec{{Probe: p}}, "track #0: name is empty"},
		{"duplicate", []TrackSpec{{Name: "a", Probe: p}, {Name: "a", Probe: p}}, "track a: defined twice"},
		{"no probe", []TrackSpec{{Name: "a"}}, "track a: no probe"},
		{"negative interval", []TrackSpec{{Name: "a", Probe: p, Interval: -time.Second}}, "interval -1s is negative"},
		{"negative timeout", []TrackSpec{{Name: "a", Probe: p, Timeout: -1}}, "timeout"},
		{"negative rise", []TrackSpec{{Name: "a", Probe: p, Rise: -1}}, "rise -1 must be at least 1"},
		{"negative fall", []TrackSpec{{Name: "a", Probe: p, Fall: -2}}, "fall -2 must be at least 1"},
		{"weight too big", []TrackSpec{{Name: "a", Probe: p, Weight: 254}}, "weight 254 is outside -253..253"},
		{"weight too small", []TrackSpec{{Name: "a", Probe: p, Weight: -300}}, "weight -300"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewTrackSet(tt.specs)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "vrrp: ") {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := NewTrackSet([]TrackSpec{{Name: "a", Probe: p, Weight: 253, Rise: 1, Fall: 5, Interval: time.Millisecond}}); err != nil {
		t.Errorf("valid spec rejected: %v", err)
	}
}

// HTTPProbe is a thin wrapper over internal/health's HTTPCheck, whose own
// tests cover redirects, proxies, draining and fresh connections: this
// checks only that every field reaches it.
func TestHTTPProbe(t *testing.T) {
	var agent atomic.Value
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { agent.Store(r.UserAgent()) })
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	})
	plain := httptest.NewServer(mux)
	defer plain.Close()
	tlsSrv := httptest.NewUnstartedServer(mux)
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the rejected handshake is expected
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	tests := []struct {
		name string
		p    HTTPProbe
		want string // "" = healthy, else substring of the error
	}{
		{"URL", HTTPProbe{URL: plain.URL + "/ok"}, ""},
		{"ExpectStatus", HTTPProbe{URL: plain.URL + "/ok", ExpectStatus: 204}, "status 200, want 204"},
		{"TLS verified by default", HTTPProbe{URL: tlsSrv.URL + "/ok"}, "certificate"},
		{"InsecureSkipVerify", HTTPProbe{URL: tlsSrv.URL + "/ok", InsecureSkipVerify: true}, ""},
		{"Client", HTTPProbe{URL: tlsSrv.URL + "/ok", Client: tlsSrv.Client()}, ""},
		{"Timeout", HTTPProbe{URL: plain.URL + "/hang", Timeout: 100 * time.Millisecond}, "deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Probe(context.Background())
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Probe: %v, want healthy", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Probe: %v, want error containing %q", err, tt.want)
			}
		})
	}
	if got, _ := agent.Load().(string); got != "appliance-vrrp-track" {
		t.Errorf("user agent %q", got)
	}
	// The context from the TrackSet bounds a probe without its own timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := (HTTPProbe{URL: plain.URL + "/hang"}).Probe(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("probe under expiring ctx: %v", err)
	}
}

func TestTCPProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := (TCPProbe{Addr: addr, Timeout: 2 * time.Second}).Probe(context.Background()); err != nil {
		t.Errorf("open port: %v", err)
	}
	ln.Close()
	err = (TCPProbe{Addr: addr, Timeout: 2 * time.Second}).Probe(context.Background())
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("closed port: %v, want an error naming %s", err, addr)
	}
}

func TestTrackSetRun(t *testing.T) {
	var up atomic.Bool
	up.Store(true)
	probe := FuncProbe(func(context.Context) error {
		if up.Load() {
			return nil
		}
		return errors.New("backend down")
	})
	s, err := NewTrackSet([]TrackSpec{
		{Name: "lb", Probe: probe, Interval: 10 * time.Millisecond, Rise: 2, Fall: 2, Weight: -40},
		{Name: "steady", Probe: FuncProbe(okProbe), Interval: 10 * time.Millisecond, Rise: 1, Fall: 1, Weight: 5},
	})
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, func() { changed <- struct{}{} }) }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for !cond() {
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("timed out waiting for %s; results %+v", what, s.Results())
			}
		}
	}
	waitFor("both healthy", func() bool { p, f := s.Adjust(100); return p == 105 && !f })

	if err := s.Run(ctx, nil); err == nil {
		t.Error("second concurrent Run did not fail")
	}

	up.Store(false)
	waitFor("lb failing", func() bool { p, _ := s.Adjust(100); return p == 65 })
	r := s.Results()
	if r[0].Healthy || r[0].Err != "backend down" || !r[1].Healthy {
		t.Errorf("results after failure: %+v", r)
	}
	up.Store(true)
	waitFor("lb back", func() bool { p, _ := s.Adjust(100); return p == 105 })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestTrackSetRunEmpty(t *testing.T) {
	s, err := NewTrackSet(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Run(ctx, func() { t.Error("onChange called") }); err != nil {
		t.Error(err)
	}
}

func TestParseTrackFlag(t *testing.T) {
	tests := []struct {
		kind, in   string
		wantName   string
		wantWeight int
		wantProbe  Probe
		wantErr    string
	}{
		{"http", "https://127.0.0.1:6443/readyz:-50", "https://127.0.0.1:6443/readyz", -50,
			HTTPProbe{URL: "https://127.0.0.1:6443/readyz", InsecureSkipVerify: true}, ""},
		{"http", "http://localhost:9444/haproxy_ready:10", "http://localhost:9444/haproxy_ready", 10,
			HTTPProbe{URL: "http://localhost:9444/haproxy_ready"}, ""},
		{"http", "https://[fd00::1]:6443/readyz:0", "https://[fd00::1]:6443/readyz", 0,
			HTTPProbe{URL: "https://[fd00::1]:6443/readyz", InsecureSkipVerify: true}, ""},
		{"http", "http://host:+5", "http://host", 5, HTTPProbe{URL: "http://host"}, ""},
		{"tcp", "127.0.0.1:9445:-20", "127.0.0.1:9445", -20, TCPProbe{Addr: "127.0.0.1:9445"}, ""},
		{"tcp", "[::1]:6443:3", "[::1]:6443", 3, TCPProbe{Addr: "[::1]:6443"}, ""},
		{"tcp", "api.example.com:6443:0", "api.example.com:6443", 0, TCPProbe{Addr: "api.example.com:6443"}, ""},

		{"http", "https://127.0.0.1/readyz", "", 0, nil, `weight "//127.0.0.1/readyz" is not an integer`},
		{"http", "noweight", "", 0, nil, "no weight"},
		{"http", "https://127.0.0.1:6443/readyz:", "", 0, nil, `weight "" is not an integer`},
		{"http", "https://127.0.0.1:6443/readyz:x", "", 0, nil, `weight "x" is not an integer`},
		{"http", "https://127.0.0.1:6443/readyz:300", "", 0, nil, "weight 300 is outside -253..253"},
		{"http", "ftp://host/x:5", "", 0, nil, "scheme must be http or https"},
		{"http", "/readyz:5", "", 0, nil, "scheme must be http or https"},
		{"http", "http:///readyz:5", "", 0, nil, "has no host"},
		{"tcp", "127.0.0.1:-5", "", 0, nil, "missing port"},
		{"tcp", "127.0.0.1:http:5", "", 0, nil, `port "http" is not 1..65535`},
		{"tcp", "127.0.0.1:0:5", "", 0, nil, `port "0"`},
		{"tcp", ":6443:5", "", 0, nil, "has no host"},
		{"tcp", "::1:6443:5", "", 0, nil, "too many colons"},
		{"udp", "127.0.0.1:53:5", "", 0, nil, `track kind "udp": want http or tcp`},
	}
	for _, tt := range tests {
		t.Run(tt.kind+" "+tt.in, func(t *testing.T) {
			got, err := ParseTrackFlag(tt.kind, tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				if tt.kind != "udp" && !strings.Contains(err.Error(), "--track-"+tt.kind) {
					t.Errorf("error %q does not name the flag", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tt.wantName || got.Weight != tt.wantWeight || got.Probe != tt.wantProbe {
				t.Errorf("got %+v, want name %q weight %d probe %+v", got, tt.wantName, tt.wantWeight, tt.wantProbe)
			}
			if _, err := NewTrackSet([]TrackSpec{got}); err != nil {
				t.Errorf("parsed spec rejected by NewTrackSet: %v", err)
			}
		})
	}
}
