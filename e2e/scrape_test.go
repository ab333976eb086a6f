package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"appliance/bootstrap"
	"appliance/internal/kubecrds"
	"appliance/internal/netlab"
)

// kubeletSigner plays the cluster's kubelet-serving signer: the CA that
// cluster monitoring mounts for the kubelet, and that signs each kubelet's
// serving certificate (kubelet-server-current.pem).
type kubeletSigner struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newKubeletSigner(t *testing.T) *kubeletSigner {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubelet-signer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &kubeletSigner{cert: cert, key: key, pool: pool}
}

// servingPEM is node's kubelet serving certificate and key in one PEM, for
// its host name and node IP, as the kubelet writes them.
func (s *kubeletSigner) servingPEM(t *testing.T, node, ip string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:  pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		DNSNames: []string{node}, IPAddresses: []net.IP{net.ParseIP(ip)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.cert, &key.PublicKey, s.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})) +
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
}

// kubeletServingFile is where the kubelet keeps its serving certificate.
const kubeletServingFile = "/var/lib/kubelet/pki/kubelet-server-current.pem"

// applyMonitoring gives the API what `appliance manifests` writes for
// cluster monitoring, as the bootstrap node applies the installer's
// manifests (prometheus-operator's ServiceMonitor CRD first, as cluster
// monitoring installs it), and returns a token of cluster monitoring's
// Prometheus service account.
func applyMonitoring(t *testing.T, kube *kubeAPI, assets string) string {
	t.Helper()
	kube.kubectl(t, "create", "-f", filepath.Join(kubecrds.Monitoring(t, kubecrds.ServiceMonitors), kubecrds.ServiceMonitors))
	kube.kubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/"+kubecrds.ServiceMonitorCRD)
	for _, f := range []string{bootstrap.NamespaceFile, bootstrap.MonitoringFile} {
		kube.kubectl(t, "apply", "--validate=strict", "-f", filepath.Join(assets, f))
	}
	kube.kubectl(t, "create", "namespace", bootstrap.PrometheusNamespace)
	kube.kubectl(t, "create", "serviceaccount", "-n", bootstrap.PrometheusNamespace, bootstrap.PrometheusServiceAccount)
	return strings.TrimSpace(kube.kubectl(t, "create", "token", "-n", bootstrap.PrometheusNamespace, bootstrap.PrometheusServiceAccount))
}

// scrapeFrom GETs https://addr/metrics from inside n, as Prometheus would
// from another host: verifying the server with pool against addr's IP,
// with token when set.
func scrapeFrom(n *netlab.Node, addr string, pool *x509.CertPool, token string) (int, string, error) {
	c, err := n.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0, "", err
	}
	tr := &http.Transport{
		DialContext:       func(context.Context, string, string) (net.Conn, error) { return c, nil },
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
