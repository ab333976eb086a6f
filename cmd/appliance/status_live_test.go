package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"appliance/app/node"
	"appliance/internal/admin"
	"appliance/internal/cluster"
	"appliance/internal/service"
	"appliance/lb"
)

// lockedBuffer collects a logger's lines from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runStatusCmd runs `appliance status ARGS...` in-process.
func runStatusCmd(ctx context.Context, args ...string) (string, error) {
	cmd := newStatusCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// TestStatusCommandAgainstLB runs a real load balancer behind the real
// admin listener (service.Run on 127.0.0.1:0, no redirect, so no root) and
// reads it with `appliance status`: one master answers /readyz, the other
// does not exist, and the tables say so.
func TestStatusCommandAgainstLB(t *testing.T) {
	apiserver := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	defer apiserver.Close()
	port := uint16(apiserver.Listener.Addr().(*net.TCPAddr).Port)

	// master-1's address is loopback too, but nothing listens there on port.
	cfg := &cluster.Config{Nodes: []cluster.Node{
		{Name: "master-0", Role: cluster.RoleMaster, IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
		{Name: "master-1", Role: cluster.RoleMaster, IPs: []netip.Addr{netip.MustParseAddr("127.0.0.2")}},
	}}
	state := cluster.NewState(cfg)
	opts := lb.DefaultOptions()
	opts.API = lb.PoolOptions{Listen: "127.0.0.1:0", BackendPort: port, CheckPath: "/readyz"}
	opts.MCS.Disabled = true
	opts.Redirect = false
	opts.Health = lb.HealthOptions{Interval: 100 * time.Millisecond, FastInterval: 30 * time.Millisecond,
		Timeout: 500 * time.Millisecond, Fall: 2, Rise: 1}
	opts.DrainTimeout = time.Second
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	balancer, err := lb.New(cfg, state, opts, lb.NewMetrics(nil), log)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- service.Run(runCtx, log, service.Options{
			Admin: admin.Options{Listen: "127.0.0.1:0", Registry: newRegistry()},
			Extra: map[string]func() any{"members": func() any { return state.Snapshot().Members }},
		}, service.Stage{node.LBService(balancer)})
	}()
	defer func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("service.Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("service.Run did not stop")
		}
	}()

	// The listener's port is only known from the start-up log line.
	adminRE := regexp.MustCompile(`admin=(127\.0\.0\.1:\d+)`)
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == ""; {
		if m := adminRE.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no admin address logged:\n%s", logs.String())
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}

	backend := func(out, name string) []string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 8 && f[0] == lb.PoolAPI && f[1] == name {
				return f
			}
		}
		return nil
	}
	var out string
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, err = runStatusCmd(ctx, "--admin", addr)
		if err != nil {
			t.Fatalf("appliance status: %v\n%s", err, out)
		}
		up, down := backend(out, "master-0"), backend(out, "master-1")
		if up != nil && up[4] == "up" && down != nil && down[4] == "down" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the LB table should show master-0 up and master-1 down:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("appliance status:\n%s", out)
	if f := backend(out, "master-0"); f[3] != "127.0.0.1:"+strconv.Itoa(int(port)) || f[5] != "no" {
		t.Errorf("master-0's row: %q", f)
	}
	for _, want := range []string{
		"LB\nPOOL", "redirect: none installed",
		"MEMBERS\nNAME", "master-0  master  127.0.0.1  config",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q", want)
		}
	}
	if strings.Contains(out, "OTHER SECTIONS") || strings.Contains(out, "cannot read") {
		t.Error("every section of a real appliance should be drawn")
	}

	// --json is the document as served.
	raw, err := runStatusCmd(ctx, "--admin", addr, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		LB      lb.Status        `json:"lb"`
		Members []cluster.Member `json:"members"`
	}
	if err := json.Unmarshal([]byte(raw), &doc); err != nil || len(doc.LB.Pools[lb.PoolAPI]) != 2 || len(doc.Members) != 2 {
		t.Errorf("--json: %v\n%s", err, raw)
	}
}

// TestStatusCommandNoAppliance: with nothing on the admin port, the error
// says what was asked and which flag to change.
func TestStatusCommandNoAppliance(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = runStatusCmd(t.Context(), "--admin", addr)
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "--admin") {
		t.Errorf("error: %v", err)
	}
}
