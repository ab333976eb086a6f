package scrape

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// testCA is a certificate authority playing the cluster's kubelet-serving
// signer.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// servingPEM is a kubelet-like serving certificate for ips, with its key,
// in one PEM (the shape of kubelet-server-current.pem).
func (ca *testCA) servingPEM(t *testing.T, serial int64, ips ...net.IP) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "system:node:node-0", Organization: []string{"system:nodes"}},
		DNSNames:     []string{"node-0"}, IPAddresses: ips,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	out := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return append(out, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})...)
}

// kubeletPKI is a folder laid out as the kubelet's pki: dated files and
// the kubelet-server-current.pem symlink it repoints at each rotation.
type kubeletPKI struct {
	dir string
	n   int
}

func (p *kubeletPKI) current() string { return filepath.Join(p.dir, "kubelet-server-current.pem") }

// rotate writes b as a new dated file and repoints the symlink at it
// atomically, as the kubelet's certificate manager does.
func (p *kubeletPKI) rotate(t *testing.T, b []byte) {
	t.Helper()
	p.n++
	name := fmt.Sprintf("kubelet-server-2026-01-01-00-00-%02d.pem", p.n)
	if err := os.WriteFile(filepath.Join(p.dir, name), b, 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(p.dir, ".current.tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(name, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p.current()); err != nil {
		t.Fatal(err)
	}
}

// testRegistry holds one appliance counter to find in a scrape.
func testRegistry() (*prometheus.Registry, http.Handler) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "appliance_scrape_test_total", Help: "test"})
	c.Add(7)
	reg.MustRegister(c)
	return reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// scrapeResult is one request's outcome.
type scrapeResult struct {
	code   int
	body   string
	serial int64 // of the certificate the server showed
}

// scrapeWith GETs url verifying the server with pool, sending token when
// it is not empty. A failed handshake or connection is the error.
func scrapeWith(url string, pool *x509.CertPool, token string) (scrapeResult, error) {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return scrapeResult{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return scrapeResult{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := scrapeResult{code: resp.StatusCode, body: string(b)}
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		r.serial = resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	return r, nil
}

// waitFor polls ok until it holds or within passes.
func waitFor(t *testing.T, what string, within time.Duration, ok func() (bool, string)) {
	t.Helper()
	var last string
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		var done bool
		if done, last = ok(); done {
			return
		}
	}
	t.Fatalf("%s: not within %s (last: %s)", what, within, last)
}

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(b))
	return len(b), nil
}
