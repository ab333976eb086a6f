package kubevirt

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/platform/kubevirt/kubevirttest"
)

// The real kube-apiserver (kubevirttest: KubeVirt's and CDI's own CRDs,
// Multus' NetworkAttachmentDefinition, the garbage collector) that this
// package's tests share. One per test package: each test works in a
// namespace of its own.
var kube struct {
	srv        *kubevirttest.Server
	kubeconfig string        // the admin's kubeconfig; "" when no server runs
	cfg        *rest.Config  // the admin's
	c          client.Client // the admin's, strict: an unknown field fails
	scheme     *runtime.Scheme
	assets     string // the server binaries and kubectl
	skip       string // why no server runs
}

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		// A fuzzing run (make fuzz) needs no server.
		kube.skip = "fuzzing"
		os.Exit(m.Run())
	}
	t0 := time.Now()
	srv, skip, err := kubevirttest.Start(true)
	if err != nil {
		srv.Stop()
		fmt.Fprintln(os.Stderr, "platform/kubevirt tests:", err)
		os.Exit(1)
	}
	kube.skip = skip
	if srv != nil {
		kube.srv, kube.kubeconfig, kube.cfg, kube.c, kube.scheme, kube.assets = srv, srv.Kubeconfig, srv.Config, srv.Client, srv.Scheme, srv.Assets
		fmt.Fprintf(os.Stderr, "platform/kubevirt tests: kube-apiserver with KubeVirt and CDI CRDs ready in %s\n", time.Since(t0).Round(time.Millisecond))
	}
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

// needAPI skips a test without the server, or fails it under CI, where a
// missing setup must never pass quietly.
func needAPI(t *testing.T) {
	t.Helper()
	if kube.kubeconfig == "" {
		kubevirttest.Skip(t, kube.skip)
	}
}

// newNamespace makes a fresh namespace holding the NetworkAttachmentDefinition
// "machine-net", and returns its name.
func newNamespace(t *testing.T) string {
	t.Helper()
	needAPI(t)
	return kube.srv.Namespace(t)
}

// newProvider connects a provider to the shared server as a user would:
// through New, a kubeconfig file and its checks. mut adjusts the options
// (namespace ns, network machine-net, storage class fast by default).
func newProvider(t *testing.T, ns string, mut func(*Options)) (*Provider, *bytes.Buffer) {
	t.Helper()
	opts := Options{Kubeconfig: kube.kubeconfig, Namespace: ns, Network: "machine-net", StorageClass: "fast"}
	if mut != nil {
		mut(&opts)
	}
	var logs bytes.Buffer
	p, err := New(context.Background(), opts, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	p.poll, p.wait = 20*time.Millisecond, 30*time.Second
	return p, &logs
}

// impersonating is a provider whose requests act as user (in no group
// beyond system:authenticated), for RBAC checks.
func impersonating(t *testing.T, ns, user string) *Provider {
	t.Helper()
	cfg := rest.CopyConfig(kube.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: kube.scheme})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewWithClient(client.WithFieldValidation(c, metav1.FieldValidationStrict), Options{Namespace: ns, Network: "machine-net", StorageClass: "fast"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.poll, p.wait = 20*time.Millisecond, 30*time.Second
	return p
}

// grant gives user a Role in ns with rules.
func grant(t *testing.T, ns, user string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns}, Rules: rules}
	if err := kube.c.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}
	if err := kube.c.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}
}
