package scrape

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeAPI is a real kube-apiserver (and etcd) started for one test by the
// shared tools' start.sh.
type kubeAPI struct {
	kubeconfig string
	client     kubernetes.Interface
	stop       func()
}

// startKubeAPI starts the server, or skips the test (fails it under CI)
// when its binaries are not built.
func startKubeAPI(t *testing.T) *kubeAPI {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		if cache, err := os.UserCacheDir(); err == nil {
			if d := filepath.Join(cache, "appliance-kube", "v1.37.1", "bin"); fileExists(filepath.Join(d, "kube-apiserver")) {
				assets = d
			}
		}
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	tools := filepath.Join(root, "..", "shared", "tools", "kube-apiserver")
	if v := os.Getenv("APPLIANCE_TOOLS"); v != "" {
		tools = filepath.Join(v, "kube-apiserver")
	}
	if assets == "" || !fileExists(filepath.Join(tools, "start.sh")) {
		msg := "no kube-apiserver: run KUBEBUILDER_ASSETS=$(../shared/tools/kube-apiserver/build.sh) go test ./internal/scrape (make test does)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	state, err := os.MkdirTemp("", "scrape-test-api-")
	if err == nil {
		state, err = filepath.EvalSymlinks(state) // stop.sh compares this spelling
	}
	if err != nil {
		t.Fatal(err)
	}
	sh := func(name string, args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(tools, name), args...)
		cmd.Env = append(os.Environ(), "KUBEBUILDER_ASSETS="+assets, fmt.Sprintf("KUBE_OWNER_PID=%d", os.Getpid()))
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("%s: %w\n%s", name, err, errb.String())
		}
		return strings.TrimSpace(out.String()), nil
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_, _ = sh("stop.sh", state)
		}
	}
	t.Cleanup(stop)
	kc, err := sh("start.sh", state)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &kubeAPI{kubeconfig: kc, client: client, stop: stop}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for !fileExists(filepath.Join(dir, "go.mod")) {
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
	return dir, nil
}

// nodeKubeconfig is a kubelet's kubeconfig as the API sees it: the admin's
// token acting as system:node:NAME in the group system:nodes, so the
// reviews are allowed exactly as RBAC allows a kubelet.
func (k *kubeAPI) nodeKubeconfig(t *testing.T, name string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(k.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range cfg.AuthInfos {
		u.Impersonate, u.ImpersonateGroups = "system:node:"+name, []string{"system:nodes", "system:authenticated"}
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// serviceAccountToken makes namespace/name exist and returns a token of it
// from the TokenRequest API, as a pod's projected token is.
func (k *kubeAPI) serviceAccountToken(t *testing.T, namespace, name string) string {
	t.Helper()
	ctx := context.Background()
	_, _ = k.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if _, err := k.client.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := k.client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// grant makes a ClusterRole of rules and binds it to subject.
func (k *kubeAPI) grant(t *testing.T, name string, rules []rbacv1.PolicyRule, subject rbacv1.Subject) {
	t.Helper()
	ctx := context.Background()
	if _, err := k.client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestAgainstRealAPIServer: the secure endpoint, with a kubelet's
// credentials, against a real kube-apiserver: cluster monitoring's token
// scrapes, another account's gets 403, no token or a made-up one 401, a
// client trusting another CA fails the handshake, a rotated certificate is
// served without a restart, and with the API down nothing is served.
func TestAgainstRealAPIServer(t *testing.T) {
	k := startKubeAPI(t)
	// What `appliance manifests` grants (bootstrap's test checks the
	// manifest itself): kubelets may review, Prometheus may get /metrics.
	k.grant(t, "test-auth-reviewer", []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "system:nodes"})
	k.grant(t, "test-metrics-reader", []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
		rbacv1.Subject{Kind: "ServiceAccount", Namespace: "openshift-monitoring", Name: "prometheus-k8s"})
	prometheus := k.serviceAccountToken(t, "openshift-monitoring", "prometheus-k8s")
	stranger := k.serviceAccountToken(t, "default", "stranger")

	ca := newCA(t, "kubelet-signer")
	pki := &kubeletPKI{dir: t.TempDir()}
	pki.rotate(t, ca.servingPEM(t, 2, net.IPv4(127, 0, 0, 1)))
	_, metrics := testRegistry()
	s, err := New(Options{
		Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, CertFile: pki.current(), Metrics: metrics,
		Kubeconfig: k.nodeKubeconfig(t, "node-0"),
		// Short, so the outage below is seen past the cache quickly.
		AllowTTL: 500 * time.Millisecond, DenyTTL: 500 * time.Millisecond,
	}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	run(t, s)
	waitFor(t, "listening", 10*time.Second, func() (bool, string) { return listening(s) != "", fmt.Sprint(s.Problem()) })
	url := "https://" + listening(s) + "/metrics"

	want := func(what, token string, code int, body string) scrapeResult {
		t.Helper()
		r, err := scrapeWith(url, ca.pool, token)
		if err != nil || r.code != code || !strings.Contains(r.body, body) {
			t.Fatalf("%s: %d %v\n%s\nwant %d with %q", what, r.code, err, r.body, code, body)
		}
		return r
	}
	// RBAC reads through an informer: the grants made above may take a
	// moment to be seen (a refusal is cached only for DenyTTL).
	waitFor(t, "prometheus-k8s allowed", 10*time.Second, func() (bool, string) {
		r, err := scrapeWith(url, ca.pool, prometheus)
		return err == nil && r.code == http.StatusOK, fmt.Sprintf("%d %v %.200s", r.code, err, r.body)
	})
	want("prometheus-k8s", prometheus, http.StatusOK, "appliance_scrape_test_total 7")
	want("prometheus-k8s again (cached)", prometheus, http.StatusOK, "appliance_scrape_test_total 7")
	want("another service account", stranger, http.StatusForbidden, "system:serviceaccount:default:stranger may not get /metrics")
	want("no token", "", http.StatusUnauthorized, "bearer token")
	want("a made-up token", "made-up", http.StatusUnauthorized, "not valid")
	if err := s.Problem(); err != nil {
		t.Errorf("Problem while serving: %v", err)
	}
	if st := s.Status().(Status); st.API.LastAnswer.IsZero() || st.API.Error != "" || !strings.HasPrefix(st.API.Server, "https://") {
		t.Errorf("/status api: %+v", st.API)
	}

	if r, err := scrapeWith(url, newCA(t, "other").pool, prometheus); err == nil {
		t.Fatalf("a client trusting another CA was served: %+v", r)
	} else if !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("another CA: %v", err)
	}

	pki.rotate(t, ca.servingPEM(t, 3, net.IPv4(127, 0, 0, 1)))
	waitFor(t, "the rotated certificate served", 10*time.Second, func() (bool, string) {
		r, err := scrapeWith(url, ca.pool, prometheus)
		return err == nil && r.serial == 3 && r.code == http.StatusOK, fmt.Sprintf("%+v %v", r, err)
	})

	// The API goes away: no decision, nothing served, past the cache.
	k.stop()
	time.Sleep(600 * time.Millisecond)
	want("prometheus-k8s with the API down", prometheus, http.StatusServiceUnavailable, "cannot be checked")
	want("a new token with the API down", "another-token", http.StatusServiceUnavailable, "cannot be checked")
	if err := s.Problem(); err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("Problem with the API down: %v", err)
	}
}

// TestRefusedCredentialsNameTheFix: a kubelet without the review grant is
// refused by the API; the scrape is refused and the error names the
// manifest that grants it.
func TestRefusedCredentialsNameTheFix(t *testing.T) {
	k := startKubeAPI(t)
	token := k.serviceAccountToken(t, "openshift-monitoring", "prometheus-k8s")
	ca := newCA(t, "kubelet-signer")
	pki := &kubeletPKI{dir: t.TempDir()}
	pki.rotate(t, ca.servingPEM(t, 2, net.IPv4(127, 0, 0, 1)))
	_, metrics := testRegistry()
	s, err := New(Options{Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, CertFile: pki.current(), Metrics: metrics,
		Kubeconfig: k.nodeKubeconfig(t, "node-0")}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	run(t, s)
	waitFor(t, "listening", 10*time.Second, func() (bool, string) { return listening(s) != "", fmt.Sprint(s.Problem()) })
	r, err := scrapeWith("https://"+listening(s)+"/metrics", ca.pool, token)
	if err != nil || r.code != http.StatusServiceUnavailable || !strings.Contains(r.body, MonitoringManifest) {
		t.Fatalf("without the grant: %+v %v, want 503 naming %s", r, err, MonitoringManifest)
	}
}
