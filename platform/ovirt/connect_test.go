package ovirt

import (
	"bytes"
	"context"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeEngine is an HTTPS server that refuses every login and echoes the
// submitted form (password included) in its error, the worst case for a
// leak; it records whether any password reached it.
type fakeEngine struct {
	srv *httptest.Server
	mu  sync.Mutex
	got bool // the password arrived
}

func newFakeEngine(t *testing.T) *fakeEngine {
	f := &fakeEngine{}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		echo := string(body) + " " + r.URL.RawQuery + " " + r.Header.Get("Authorization")
		f.mu.Lock()
		f.got = f.got || strings.Contains(echo, canary)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":"access_denied","error_description":"Cannot authenticate user with `+
			strings.ReplaceAll(echo, `"`, `'`)+` password `+secret+`"}`)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeEngine) sawPassword() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.got
}

func connect(t *testing.T, c Credentials) (error, string) {
	t.Helper()
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := New(ctx, Options{Credentials: c, ClusterID: "c", StorageDomainID: "s", VNICProfileID: "v"}, log)
	if err == nil {
		_ = p.Close()
		t.Fatal("connected to a fake engine")
	}
	t.Logf("error: %v", err)
	return err, buf.String()
}

func assertNoLeak(t *testing.T, err error, logs string) {
	t.Helper()
	// The distinctive core survives any encoding that keeps letters.
	if strings.Contains(err.Error(), canary) {
		t.Errorf("error leaks the password: %v", err)
	}
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, canary) {
			t.Errorf("log line leaks the password: %s", l)
		}
	}
}

func TestConnectUnverifiedServerGetsNoPassword(t *testing.T) {
	t.Parallel()
	f := newFakeEngine(t)
	err, logs := connect(t, Credentials{URL: f.srv.URL + "/ovirt-engine/api", Username: "admin@internal", Password: secret})
	assertNoLeak(t, err, logs)
	if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("want a certificate error with default TLS, got: %v", err)
	}
	if f.sawPassword() {
		t.Error("the password was sent to a server whose certificate was not verified")
	}
}

func TestConnectTrustedCAEchoingServer(t *testing.T) {
	t.Parallel()
	f := newFakeEngine(t)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	err, logs := connect(t, Credentials{URL: f.srv.URL + "/ovirt-engine/api", Username: "admin@internal",
		Password: secret, CABundle: string(ca)})
	assertNoLeak(t, err, logs)
	if strings.Contains(err.Error(), "x509") {
		t.Errorf("CA bundle not used: %v", err)
	}
	if !f.sawPassword() {
		t.Error("login never reached the fake engine (test is not testing the echo)")
	}
}

func TestConnectInsecureEchoingServer(t *testing.T) {
	t.Parallel()
	f := newFakeEngine(t)
	err, logs := connect(t, Credentials{URL: f.srv.URL + "/ovirt-engine/api", Username: "admin@internal",
		Password: secret, Insecure: true})
	assertNoLeak(t, err, logs)
	if strings.Contains(err.Error(), "x509") {
		t.Errorf("insecure not honoured: %v", err)
	}
}

func TestConnectRefused(t *testing.T) {
	t.Parallel()
	// Port 1 on loopback: nothing listens, the connection is refused.
	err, logs := connect(t, Credentials{URL: "https://127.0.0.1:1/ovirt-engine/api", Username: "admin@internal", Password: secret})
	assertNoLeak(t, err, logs)
}

func TestConnectInvalidCredentialsNoLeak(t *testing.T) {
	err, logs := connect(t, Credentials{URL: "ftp://" + secret, Username: secret, Password: secret})
	assertNoLeak(t, err, logs)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
