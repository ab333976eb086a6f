package kubevirt

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// secretToken is a credential that must never appear in an error or log.
const secretToken = "sekr1t-T0KEN-4a9f2c7e"

// fakeAPI is a minimal API server: discovery for core, KubeVirt and CDI,
// and list answers chosen per test.
type fakeAPI struct {
	mu    sync.Mutex
	auth  []string // Authorization headers seen
	list  func(w http.ResponseWriter, r *http.Request)
	paths []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.paths = append(f.paths, r.URL.Path)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	res := func(gv string, names ...string) metav1.APIResourceList {
		l := metav1.APIResourceList{GroupVersion: gv}
		for _, n := range names {
			kind, plural, _ := strings.Cut(n, ":")
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: plural, Kind: kind, Namespaced: true, Verbs: metav1.Verbs{"get", "list", "create", "delete", "patch", "update"}})
		}
		return l
	}
	group := func(name, version string) metav1.APIGroup {
		gv := metav1.GroupVersionForDiscovery{GroupVersion: name + "/" + version, Version: version}
		return metav1.APIGroup{Name: name, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
	}
	var body any
	switch p := r.URL.Path; {
	case p == "/api":
		body = metav1.APIVersions{Versions: []string{"v1"}}
	case p == "/apis":
		body = metav1.APIGroupList{Groups: []metav1.APIGroup{group("kubevirt.io", "v1"), group("cdi.kubevirt.io", "v1beta1")}}
	case p == "/api/v1":
		body = res("v1", "Secret:secrets", "PersistentVolumeClaim:persistentvolumeclaims")
	case p == "/apis/kubevirt.io/v1":
		body = res("kubevirt.io/v1", "VirtualMachine:virtualmachines", "VirtualMachineInstance:virtualmachineinstances")
	case p == "/apis/cdi.kubevirt.io/v1beta1":
		body = res("cdi.kubevirt.io/v1beta1", "DataVolume:datavolumes")
	case strings.Contains(p, "/namespaces/"):
		f.list(w, r)
		return
	default:
		w.WriteHeader(http.StatusNotFound)
		body = metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Code: 404, Reason: metav1.StatusReasonNotFound}
	}
	_ = json.NewEncoder(w).Encode(body)
}

// emptyList answers every list with no items.
func emptyList(w http.ResponseWriter, r *http.Request) {
	kind := "VirtualMachineList"
	apiVersion := "kubevirt.io/v1"
	if strings.Contains(r.URL.Path, "datavolumes") {
		kind, apiVersion = "DataVolumeList", "cdi.kubevirt.io/v1beta1"
	}
	fmt.Fprintf(w, `{"apiVersion":%q,"kind":%q,"metadata":{},"items":[]}`, apiVersion, kind)
}

// status answers with a failure whose message echoes the token, as a
// careless proxy might.
func status(code int) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   "Failure", Code: int32(code),
			Message: "rejected " + r.Header.Get("Authorization"),
		})
	}
}

// quietTLSServer is an HTTPS test server that does not log the handshake
// failures some tests provoke.
func quietTLSServer(h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = stdlog.New(io.Discard, "", 0)
	srv.StartTLS()
	return srv
}

// writeKubeconfig writes a kubeconfig for server with the token; ca is PEM
// or nil; extra is appended verbatim to the user entry.
func writeKubeconfig(t *testing.T, server string, ca []byte, extra string) string {
	t.Helper()
	caLine := ""
	if ca != nil {
		caLine = "    certificate-authority-data: " + b64(ca) + "\n"
	}
	cfg := "apiVersion: v1\nkind: Config\nclusters:\n- name: infra\n  cluster:\n    server: " + server + "\n" + caLine +
		"users:\n- name: tenant\n  user:\n    token: " + secretToken + "\n" + extra +
		"contexts:\n- name: infra\n  context:\n    cluster: infra\n    user: tenant\n    namespace: ocp\ncurrent-context: infra\n"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func b64(b []byte) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	_ = enc.Encode(b) // JSON encodes []byte as base64
	return strings.Trim(strings.TrimSpace(buf.String()), `"`)
}

func TestNewKubeconfigNeverLeaksToken(t *testing.T) {
	api := &fakeAPI{list: emptyList}
	srv := quietTLSServer(api)
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	tests := []struct {
		name    string
		path    func(t *testing.T) string
		opts    Options
		list    func(http.ResponseWriter, *http.Request)
		wantErr string // "" means success
	}{
		{"verified TLS, connects", func(t *testing.T) string { return writeKubeconfig(t, srv.URL, ca, "") }, Options{}, emptyList, ""},
		{"unknown CA is refused", func(t *testing.T) string { return writeKubeconfig(t, srv.URL, nil, "") }, Options{}, emptyList, "x509"},
		{"insecure only when asked", func(t *testing.T) string { return writeKubeconfig(t, srv.URL, nil, "") }, Options{Insecure: true}, emptyList, ""},
		{"insecure with a CA too", func(t *testing.T) string { return writeKubeconfig(t, srv.URL, ca, "") }, Options{Insecure: true}, emptyList, ""},
		{"401", func(t *testing.T) string { return writeKubeconfig(t, srv.URL, ca, "") }, Options{}, status(401), "refused the kubeconfig's credentials"},
		{"500 echoing the token", func(t *testing.T) string { return writeKubeconfig(t, srv.URL, ca, "") }, Options{}, status(500), "[REDACTED]"},
		{"missing context", func(t *testing.T) string { return writeKubeconfig(t, srv.URL, ca, "") }, Options{Context: "nope"}, emptyList, `context "nope"`},
		{"missing file", func(t *testing.T) string { return filepath.Join(t.TempDir(), "absent") }, Options{}, emptyList, "absent"},
		{"malformed file quoting the token", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "kubeconfig")
			_ = os.WriteFile(p, []byte("users:\n- name: x\n  user: {token: \""+secretToken+"\" ]\n"), 0o600)
			return p
		}, Options{}, emptyList, "kubeconfig"},
		{"bad client key data is not echoed", func(t *testing.T) string {
			return writeKubeconfig(t, srv.URL, ca, "    client-key-data: "+b64([]byte(secretToken))+"\n    client-certificate-data: "+b64([]byte("junk"))+"\n")
		}, Options{}, emptyList, "client for"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api.mu.Lock()
			api.list, api.auth = tt.list, nil
			api.mu.Unlock()
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			opts := tt.opts
			opts.Kubeconfig = tt.path(t)
			opts.Network = "machine-net"
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			p, err := New(ctx, opts, log)
			if err != nil && strings.Contains(err.Error(), secretToken) {
				t.Fatalf("error leaks the token: %v", err)
			}
			if strings.Contains(logs.String(), secretToken) {
				t.Fatalf("log leaks the token: %s", logs.String())
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if p.Options().Namespace != "ocp" {
					t.Errorf("namespace %q, want the context's", p.Options().Namespace)
				}
				if !strings.Contains(logs.String(), "connected") {
					t.Errorf("no connect log: %s", logs.String())
				}
				api.mu.Lock()
				defer api.mu.Unlock()
				if len(api.auth) == 0 || api.auth[len(api.auth)-1] != "Bearer "+secretToken {
					t.Errorf("token not sent: %q", api.auth)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
			}
			t.Logf("error: %v", err)
		})
	}
}

func TestKubeconfigFromEnvironment(t *testing.T) {
	api := &fakeAPI{list: emptyList}
	srv := quietTLSServer(api)
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	t.Setenv("KUBECONFIG", writeKubeconfig(t, srv.URL, ca, ""))
	p, err := New(context.Background(), Options{Network: "machine-net", Namespace: "mine"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Options().Namespace != "mine" {
		t.Errorf("namespace %q: the option must win over the context", p.Options().Namespace)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	found := false
	for _, path := range api.paths {
		found = found || strings.Contains(path, "/namespaces/mine/")
	}
	if !found {
		t.Errorf("no request in namespace mine: %v", api.paths)
	}
}

func TestRedactor(t *testing.T) {
	r := redactor{secretToken, "password1"}
	err := r.errorf("kubevirt: x: %w", fmt.Errorf("got %s and password1", secretToken))
	if strings.Contains(err.Error(), secretToken) || strings.Contains(err.Error(), "password1") || strings.Count(err.Error(), "[REDACTED]") != 2 {
		t.Errorf("redacted: %v", err)
	}
	inner := fmt.Errorf("clean")
	if err := r.errorf("kubevirt: %w", inner); err.Error() != "kubevirt: clean" {
		t.Errorf("clean error altered: %v", err)
	}
}
