package scrape

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// run starts s and stops it (waiting for Run) when the test ends.
func run(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func listening(s *Server) string {
	if ls := s.Listening(); len(ls) > 0 {
		return ls[0].String()
	}
	return ""
}

// TestCertificateFileBadInput: without a loadable certificate the endpoint
// does not listen and says why; with one it serves only over TLS; a broken
// rotation keeps the good certificate in service, a good one replaces it
// without a restart.
func TestCertificateFileBadInput(t *testing.T) {
	ca := newCA(t, "kubelet-signer")
	pki := &kubeletPKI{dir: t.TempDir()}
	_, metrics := testRegistry()
	s, err := New(Options{
		Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, CertFile: pki.current(), Metrics: metrics,
		Kubeconfig: filepath.Join(t.TempDir(), "kubeconfig"), // never written: no API
	}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	s.retry = 100 * time.Millisecond
	s.certs.every = 50 * time.Millisecond
	run(t, s)

	notListening := func(why string) {
		t.Helper()
		waitFor(t, "the problem reported: "+why, 5*time.Second, func() (bool, string) {
			err := s.Problem()
			return err != nil && strings.Contains(err.Error(), why) && strings.Contains(err.Error(), pki.current()), fmt.Sprint(err)
		})
		time.Sleep(300 * time.Millisecond) // three retries of the loop
		if a := listening(s); a != "" {
			t.Fatalf("listening on %s without a certificate (%s)", a, why)
		}
		st := s.Status().(Status)
		if st.Certificate.Loaded || !strings.Contains(st.Certificate.Error, why) || !strings.Contains(st.Problem, "not listening") {
			t.Errorf("/status while %s: %+v", why, st)
		}
	}
	notListening("no such file")
	pki.rotate(t, []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"))
	notListening("failed to")
	if err := os.Remove(filepath.Join(pki.dir, "kubelet-server-2026-01-01-00-00-01.pem")); err != nil {
		t.Fatal(err)
	}
	notListening("no such file") // a dangling symlink
	if err := os.Mkdir(filepath.Join(pki.dir, "kubelet-server-2026-01-01-00-00-01.pem"), 0o700); err != nil {
		t.Fatal(err)
	}
	notListening("not a regular file")

	pki.rotate(t, ca.servingPEM(t, 2, net.IPv4(127, 0, 0, 1)))
	waitFor(t, "listening once the certificate loads", 5*time.Second, func() (bool, string) {
		return listening(s) != "", fmt.Sprint(s.Problem())
	})
	url := "https://" + listening(s) + "/metrics"

	// Plain HTTP is never served, not even a refusal of the token.
	resp, err := http.Get("http://" + listening(s) + "/metrics")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || strings.Contains(string(b), "appliance_") {
			t.Fatalf("plain HTTP answered %d:\n%s", resp.StatusCode, b)
		}
	}
	r, err := scrapeWith(url, ca.pool, "")
	if err != nil || r.code != http.StatusUnauthorized || r.serial != 2 {
		t.Fatalf("no token: %+v %v, want 401 from certificate 2", r, err)
	}
	// No kubeconfig yet: a token cannot be checked, so it is refused.
	r, err = scrapeWith(url, ca.pool, "some-token")
	if err != nil || r.code != http.StatusServiceUnavailable || !strings.Contains(r.body, "waiting for kubeconfig") {
		t.Fatalf("a token with no API: %+v %v, want 503 naming the kubeconfig", r, err)
	}
	if err := s.Problem(); err == nil || !strings.Contains(err.Error(), "waiting for kubeconfig") {
		t.Errorf("Problem with no kubeconfig: %v", err)
	}

	// A rotation to a file that does not load: the old certificate stays.
	pki.rotate(t, []byte("garbage"))
	waitFor(t, "the broken rotation reported", 5*time.Second, func() (bool, string) {
		st := s.Status().(Status)
		return st.Certificate.Error != "" && st.Certificate.Loaded, fmt.Sprintf("%+v", st.Certificate)
	})
	if r, err := scrapeWith(url, ca.pool, ""); err != nil || r.serial != 2 {
		t.Fatalf("after a broken rotation: %+v %v, want certificate 2 still served", r, err)
	}
	pki.rotate(t, ca.servingPEM(t, 3, net.IPv4(127, 0, 0, 1)))
	waitFor(t, "the rotated certificate served", 5*time.Second, func() (bool, string) {
		r, err := scrapeWith(url, ca.pool, "")
		return err == nil && r.serial == 3, fmt.Sprintf("%+v %v", r, err)
	})
	if st := s.Status().(Status); st.Certificate.Error != "" || !st.Certificate.Loaded {
		t.Errorf("after a good rotation: %+v", st.Certificate)
	}

	// Another CA's client does not complete the handshake.
	if r, err := scrapeWith(url, newCA(t, "other").pool, ""); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client trusting another CA: %+v %v, want a failed handshake", r, err)
	}
}

// TestFollowsAddresses: the endpoint listens where the node's addresses
// are, and leaves an address the node no longer has.
func TestFollowsAddresses(t *testing.T) {
	ca := newCA(t, "kubelet-signer")
	pki := &kubeletPKI{dir: t.TempDir()}
	pki.rotate(t, ca.servingPEM(t, 2, net.IPv4(127, 0, 0, 1), net.IPv4(127, 0, 0, 2)))
	_, metrics := testRegistry()
	a1, a2 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	s, err := New(Options{Addrs: []netip.Addr{a1}, CertFile: pki.current(), Metrics: metrics,
		Kubeconfig: filepath.Join(t.TempDir(), "kubeconfig")}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	run(t, s)
	on := func(addrs ...netip.Addr) (bool, string) {
		got := s.Listening()
		if len(got) != len(addrs) {
			return false, fmt.Sprint(got)
		}
		for i, a := range got {
			if !strings.HasPrefix(a.String(), addrs[i].String()+":") {
				return false, fmt.Sprint(got)
			}
		}
		return true, ""
	}
	waitFor(t, "listening on 127.0.0.1", 5*time.Second, func() (bool, string) { return on(a1) })
	old := listening(s)
	s.SetAddrs([]netip.Addr{a2})
	waitFor(t, "moved to 127.0.0.2", 5*time.Second, func() (bool, string) { return on(a2) })
	if c, err := net.DialTimeout("tcp", old, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts after the address left", old)
	}
	s.SetAddrs(nil)
	waitFor(t, "no address, no listener", 5*time.Second, func() (bool, string) { return on() })
	if err := s.Problem(); err == nil || !strings.Contains(err.Error(), "no machine-network address") {
		t.Errorf("Problem without addresses: %v", err)
	}
}

// TestBindFailureReported: a port another socket holds is retried and
// named, never given up on silently.
func TestBindFailureReported(t *testing.T) {
	ca := newCA(t, "kubelet-signer")
	pki := &kubeletPKI{dir: t.TempDir()}
	pki.rotate(t, ca.servingPEM(t, 2, net.IPv4(127, 0, 0, 1)))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, metrics := testRegistry()
	s, err := New(Options{Port: taken.Addr().(*net.TCPAddr).Port, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")},
		CertFile: pki.current(), Metrics: metrics, Kubeconfig: filepath.Join(t.TempDir(), "kubeconfig")}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	s.retry = 100 * time.Millisecond
	run(t, s)
	waitFor(t, "the clash reported", 5*time.Second, func() (bool, string) {
		err := s.Problem()
		return err != nil && strings.Contains(err.Error(), "address already in use"), fmt.Sprint(err)
	})
	taken.Close()
	waitFor(t, "listening once the port is free", 5*time.Second, func() (bool, string) {
		return listening(s) != "", fmt.Sprint(s.Problem())
	})
}

func TestBearer(t *testing.T) {
	for _, c := range []struct {
		h, token string
		ok       bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc ", "abc", true},
		{"Bearer ", "", false},
		{"Basic YWI6Y2Q=", "", false},
		{"", "", false},
		{"Bearerabc", "", false},
	} {
		if tok, ok := bearer(c.h); tok != c.token || ok != c.ok {
			t.Errorf("bearer(%q) = %q, %v; want %q, %v", c.h, tok, ok, c.token, c.ok)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	_, metrics := testRegistry()
	if _, err := New(Options{Metrics: metrics}, nil); err == nil || !strings.Contains(err.Error(), "kubeconfig") {
		t.Errorf("no kubeconfig: %v", err)
	}
	if _, err := New(Options{Kubeconfig: "k"}, nil); err == nil {
		t.Error("nothing to serve: no error")
	}
	if _, err := New(Options{Kubeconfig: "k", Metrics: metrics, Port: 70000}, nil); err == nil || !strings.Contains(err.Error(), "admin.metricsPort") {
		t.Errorf("port 70000: %v", err)
	}
}
