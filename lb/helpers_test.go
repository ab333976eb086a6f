package lb

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"appliance/internal/cluster"
)

// testCA is a CA made for one test run, and a serving certificate it signed.
type testCA struct {
	pool *x509.CertPool
	cert tls.Certificate
}

func newTestCA(t testing.TB, ips ...netip.Addr) *testCA {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lb-test-root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "api.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"api.test", "api-int.test"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return &testCA{pool: pool, cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}}
}

// fakeServer plays kube-apiserver and the MCS: /readyz and /healthz
// switchable, /whoami naming the backend, /config/master echoing Accept.
type fakeServer struct {
	name  string
	addr  string
	ready atomic.Bool
	hits  atomic.Int64 // /whoami and /config requests
	srv   *http.Server
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startFake(t testing.TB, ca *testCA, name, addr string, listen func(string, string) (net.Listener, error)) (*fakeServer, error) {
	if listen == nil {
		listen = net.Listen
	}
	ln, err := listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	f := &fakeServer{name: name, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	f.ready.Store(true)
	mux := http.NewServeMux()
	health := func(w http.ResponseWriter, _ *http.Request) {
		if !f.ready.Load() {
			http.Error(w, "[-]shutdown failed: reason withheld", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}
	mux.HandleFunc("/readyz", health)
	mux.HandleFunc("/healthz", health)
	mux.HandleFunc("/whoami", func(w http.ResponseWriter, _ *http.Request) {
		f.hits.Add(1)
		_, _ = io.WriteString(w, name)
	})
	// /peer names the backend and the address the request came from (the
	// LB's side of the connection), whose family the dual-stack tests check.
	mux.HandleFunc("/peer", func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		_, _ = io.WriteString(w, name+" "+r.RemoteAddr)
	})
	mux.HandleFunc("/config/master", func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		w.Header().Set("X-Echo-Accept", r.Header.Get("Accept"))
		w.Header().Set("Content-Type", "application/vnd.coreos.ignition+json")
		_, _ = fmt.Fprintf(w, `{"ignition":{"version":"3.2.0"},"served-by":%q}`, name)
	})
	f.srv = &http.Server{
		Handler:   mux,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{ca.cert}},
		ErrorLog:  slogDiscard(),
		ConnState: func(c net.Conn, s http.ConnState) {
			f.mu.Lock()
			defer f.mu.Unlock()
			switch s {
			case http.StateNew:
				f.conns[c] = struct{}{}
			case http.StateClosed, http.StateHijacked:
				delete(f.conns, c)
			}
		},
	}
	go func() { _ = f.srv.ServeTLS(ln, "", "") }()
	t.Cleanup(f.kill)
	return f, nil
}

// kill closes the listener and every connection: a crashed process.
func (f *fakeServer) kill() { _ = f.srv.Close() }

func slogDiscard() *log.Logger { return log.New(io.Discard, "", 0) }

// fakeCluster starts masters and a bootstrap on distinct loopback addresses
// sharing one port, as real members share 6443.
type fakeCluster struct {
	ca      *testCA
	port    uint16
	masters []*fakeServer
	boot    *fakeServer
	cfg     *cluster.Config
	state   *cluster.State
}

func newFakeCluster(t *testing.T, masters int) *fakeCluster {
	t.Helper()
	var ips []netip.Addr
	for i := range masters {
		ips = append(ips, netip.AddrFrom4([4]byte{127, 0, 0, byte(11 + i)}))
	}
	bootIP := netip.AddrFrom4([4]byte{127, 0, 0, 19})
	ca := newTestCA(t, append(ips, bootIP, netip.MustParseAddr("127.0.0.1"))...)
	for attempt := 0; ; attempt++ {
		fc := &fakeCluster{ca: ca, cfg: &cluster.Config{}}
		ok := true
		for i, ip := range ips {
			addr := netip.AddrPortFrom(ip, fc.port).String()
			f, err := startFake(t, ca, fmt.Sprintf("master-%d", i), addr, nil)
			if err != nil {
				ok = false
				break
			}
			if fc.port == 0 {
				fc.port = uint16(f.ln.Addr().(*net.TCPAddr).Port)
			}
			fc.masters = append(fc.masters, f)
			fc.cfg.Nodes = append(fc.cfg.Nodes, cluster.Node{Name: f.name, Role: cluster.RoleMaster, IPs: []netip.Addr{ip}})
		}
		if ok {
			f, err := startFake(t, ca, "bootstrap", netip.AddrPortFrom(bootIP, fc.port).String(), nil)
			if err == nil {
				fc.boot = f
				fc.cfg.Nodes = append(fc.cfg.Nodes, cluster.Node{Name: "bootstrap", Role: cluster.RoleBootstrap, IPs: []netip.Addr{bootIP}})
				fc.state = cluster.NewState(fc.cfg)
				return fc
			}
		}
		for _, f := range fc.masters {
			f.kill()
		}
		if attempt > 20 {
			t.Fatal("no port free on every test loopback address")
		}
	}
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}

// fastOptions are loopback options with quick checks.
func fastOptions(port uint16) Options {
	o := DefaultOptions()
	o.API = PoolOptions{Listen: "127.0.0.1:0", BackendPort: port, CheckPath: "/readyz"}
	o.MCS = PoolOptions{Listen: "127.0.0.1:0", BackendPort: port, CheckPath: "/healthz"}
	o.Redirect = false
	o.Health = HealthOptions{Interval: 100 * time.Millisecond, FastInterval: 30 * time.Millisecond, Timeout: 500 * time.Millisecond, Fall: 3, Rise: 2, DownGrace: 200 * time.Millisecond}
	o.DrainTimeout = time.Second
	return o
}

// startLB runs an LB until the test ends and waits for want healthy API backends.
func startLB(t *testing.T, cfg *cluster.Config, st *cluster.State, o Options, want int) *LB {
	t.Helper()
	l, err := New(cfg, st, o, NewMetrics(nil), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("LB did not stop")
		}
	})
	waitFor(t, 5*time.Second, func() bool { return l.Pool(PoolAPI) == nil || l.Pool(PoolAPI).Healthy() >= want })
	return l
}

func waitFor(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// client talks HTTPS through the LB, verifying with the test CA, one
// connection per request (as a short-lived client would).
func (fc *fakeCluster) client(lbAddr string) *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{RootCAs: fc.ca.pool, ServerName: "api.test"},
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", lbAddr)
			},
		},
	}
}

func whoami(c *http.Client) (string, error) {
	resp, err := c.Get("https://api.test/whoami")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
