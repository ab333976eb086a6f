package health

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A proxy from the environment is never used: the check is about the
// server at URL. This test comes first in the package because net/http
// reads the proxy variables once per process, at the first use.
func TestHTTPCheckIgnoresProxy(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://proxy.test:3128")
	t.Setenv("http_proxy", "http://proxy.test:3128")
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	var asked string
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		asked = addr
		var d net.Dialer
		return d.DialContext(ctx, network, srv.Listener.Addr().String())
	}
	// A name, not a loopback address: Go never proxies loopback anyway.
	if err := (HTTPCheck{URL: "http://backend.test:6443/readyz", Dial: dial}).Do(context.Background()); err != nil {
		t.Fatal(err)
	}
	if asked != "backend.test:6443" {
		t.Errorf("dialed %q, want the server itself (backend.test:6443)", asked)
	}
}

func testMux(sawClose *atomic.Bool, ua *atomic.Value) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		sawClose.Store(r.Close)
		ua.Store(r.UserAgent())
		_, _ = w.Write([]byte(strings.Repeat("x", 100<<10))) // longer than what a check drains
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not ready", http.StatusInternalServerError)
	})
	mux.HandleFunc("/nocontent", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	})
	return mux
}

func TestHTTPCheck(t *testing.T) {
	var sawClose atomic.Bool
	var ua atomic.Value
	mux := testMux(&sawClose, &ua)
	plain := httptest.NewServer(mux)
	defer plain.Close()
	tlsSrv := httptest.NewUnstartedServer(mux)
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the rejected handshake is expected
	tlsSrv.StartTLS()
	defer tlsSrv.Close()

	// toTLS dials the TLS server whatever address the check asks for, as
	// the LB's Dial puts the connection where it chooses.
	var dialed []string
	var dialMu sync.Mutex
	toTLS := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialMu.Lock()
		dialed = append(dialed, addr)
		dialMu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, tlsSrv.Listener.Addr().String())
	}

	tests := []struct {
		name string
		c    HTTPCheck
		want string // "" = healthy, else substring of the error
	}{
		{"2xx", HTTPCheck{URL: plain.URL + "/ok"}, ""},
		{"204 is 2xx", HTTPCheck{URL: plain.URL + "/nocontent"}, ""},
		{"500 names URL and status", HTTPCheck{URL: plain.URL + "/fail"}, "GET " + plain.URL + "/fail: status 500, want 2xx"},
		{"expect exact status", HTTPCheck{URL: plain.URL + "/nocontent", ExpectStatus: 204}, ""},
		{"status mismatch", HTTPCheck{URL: plain.URL + "/ok", ExpectStatus: 204}, "status 200, want 204"},
		{"redirect not followed", HTTPCheck{URL: plain.URL + "/redirect"}, "status 302, want 2xx"},
		{"redirect not followed with 200 expected", HTTPCheck{URL: plain.URL + "/redirect", ExpectStatus: 200}, "status 302, want 200"},
		{"TLS self-signed rejected", HTTPCheck{URL: tlsSrv.URL + "/ok"}, "certificate"},
		{"TLS self-signed accepted when insecure", HTTPCheck{URL: tlsSrv.URL + "/ok", InsecureSkipVerify: true}, ""},
		{"TLS insecure still checks status", HTTPCheck{URL: tlsSrv.URL + "/fail", InsecureSkipVerify: true}, "status 500"},
		{"own client", HTTPCheck{URL: tlsSrv.URL + "/ok", Client: tlsSrv.Client()}, ""},
		{"own client follows no redirect", HTTPCheck{URL: tlsSrv.URL + "/redirect", Client: tlsSrv.Client()}, "status 302"},
		{"dial chosen by the caller", HTTPCheck{URL: "https://backend.test:6443/ok", InsecureSkipVerify: true, Dial: toTLS, ExpectStatus: 200}, ""},
		{"dial failure names URL", HTTPCheck{URL: "http://127.0.0.1:1/readyz"}, "GET http://127.0.0.1:1/readyz: "},
		{"hanging handler times out", HTTPCheck{URL: plain.URL + "/hang", Timeout: 100 * time.Millisecond}, "deadline exceeded"},
		{"bad URL", HTTPCheck{URL: "http://[::1"}, "GET http://[::1"},
		{"password not shown", HTTPCheck{URL: "http://user:secret@127.0.0.1:1/"}, "user:xxxxx@"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			err := tt.c.Do(context.Background())
			if time.Since(start) > 5*time.Second {
				t.Errorf("check took %s", time.Since(start))
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Do: %v, want healthy", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Do: %v, want error containing %q", err, tt.want)
			case err != nil && strings.Contains(err.Error(), "secret"):
				t.Fatalf("Do: %v shows the password", err)
			}
		})
	}
	if !sawClose.Load() {
		t.Error("request did not ask to close the connection")
	}
	if len(dialed) != 1 || dialed[0] != "backend.test:6443" {
		t.Errorf("Dial asked for %q, want [backend.test:6443]", dialed)
	}

	// The caller's ctx bounds a check without its own timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := (HTTPCheck{URL: plain.URL + "/hang"}).Do(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("check under expiring ctx: %v", err)
	}

	if err := (HTTPCheck{URL: plain.URL + "/ok", UserAgent: "appliance-test"}).Do(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := ua.Load(); got != "appliance-test" {
		t.Errorf("User-Agent %q, want appliance-test", got)
	}
}

// A server that died behind a kept-alive connection must be noticed, so
// every check opens a connection of its own.
func TestHTTPCheckFreshConnection(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := HTTPCheck{URL: srv.URL}
	for range 3 {
		if err := c.Do(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("3 checks opened %d connections, want 3", n)
	}
}
