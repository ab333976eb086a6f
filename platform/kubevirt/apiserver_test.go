package kubevirt

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The real kube-apiserver (with kube-controller-manager's garbage
// collector, started after the CRDs) that this package's tests share, with KubeVirt's and CDI's own
// CRDs and a Multus NetworkAttachmentDefinition CRD. One per test package:
// each test works in a namespace of its own.
var kube struct {
	kubeconfig string        // the admin's kubeconfig; "" when no server runs
	cfg        *rest.Config  // the admin's
	c          client.Client // the admin's, strict: an unknown field fails
	scheme     *runtime.Scheme
	tools      string // ../shared/tools
	assets     string // the server binaries
	skip       string // why no server runs
}

func TestMain(m *testing.M) {
	stop, err := startAPIServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "platform/kubevirt tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

// startAPIServer starts the shared server, or sets kube.skip when its
// binaries are absent. The returned stop never fails the run.
func startAPIServer() (stop func(), err error) {
	stop = func() {}
	root, err := moduleRoot()
	if err != nil {
		return stop, err
	}
	kube.tools = filepath.Join(root, "..", "shared", "tools")
	if v := os.Getenv("APPLIANCE_TOOLS"); v != "" {
		kube.tools = v
	}
	kube.assets = serverAssets()
	if kube.assets == "" {
		kube.skip = "no kube-apiserver: run KUBEBUILDER_ASSETS=$(../shared/tools/kube-apiserver/build.sh) go test ./platform/kubevirt (make test does)"
		return stop, nil
	}
	if _, err := os.Stat(filepath.Join(kube.tools, "kube-apiserver", "start.sh")); err != nil {
		kube.skip = fmt.Sprintf("no %s/kube-apiserver/start.sh (set APPLIANCE_TOOLS to the shared tools folder)", kube.tools)
		return stop, nil
	}
	state, err := os.MkdirTemp("", "kubevirt-test-api-")
	if err != nil {
		return stop, err
	}
	t0 := time.Now()
	if state, err = filepath.EvalSymlinks(state); err != nil { // stop.sh compares this spelling
		return stop, err
	}
	kc, err := startServer(state)
	// stop.sh ends exactly the processes start.sh recorded, even after a
	// failed start; the watchdog covers a test binary that is killed.
	stop = func() { stopServer(state) }
	if err != nil {
		stop()
		return func() {}, err
	}
	// gen.sh does nothing when the folder holds its current output.
	crds, err := script(nil, "kubevirt-crds/gen.sh", kubevirtCRDs())
	if err != nil {
		stop()
		return func() {}, err
	}
	for _, dir := range []string{crds, filepath.Join("testdata", "crds")} {
		if _, err := script(nil, "kubevirt-crds/install.sh", kc, dir); err != nil {
			stop()
			return func() {}, err
		}
	}
	kube.kubeconfig = kc
	if kube.cfg, err = clientcmd.BuildConfigFromFlags("", kc); err != nil {
		stop()
		return func() {}, err
	}
	kube.cfg.QPS, kube.cfg.Burst = -1, 0
	if kube.scheme, err = NewScheme(); err == nil {
		err = rbacv1.AddToScheme(kube.scheme)
	}
	if err != nil {
		stop()
		return func() {}, err
	}
	c, err := client.New(kube.cfg, client.Options{Scheme: kube.scheme})
	if err != nil {
		stop()
		return func() {}, err
	}
	kube.c = client.WithFieldValidation(c, metav1.FieldValidationStrict)
	// The garbage collector starts after the CRDs: it discovers resources
	// when it starts and then only every 30 s, and until it knows
	// VirtualMachines their foreground deletion waits.
	if err := startGarbageCollector(state, kc); err != nil {
		stop()
		return func() {}, err
	}
	// Cluster-scoped, shared by every test: "fast" exists, nothing is the
	// default class (TestPreflightDefaultStorageClass makes one briefly).
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: "example.com/fast"}
	if err := kube.c.Create(context.Background(), sc); err != nil {
		stop()
		return func() {}, err
	}
	fmt.Fprintf(os.Stderr, "platform/kubevirt tests: kube-apiserver with KubeVirt and CDI CRDs ready in %s\n", time.Since(t0).Round(time.Millisecond))
	return stop, nil
}

// startServer runs start.sh once more when it fails: it picks free ports
// before binding them, and another program on the machine may take one in
// between.
func startServer(state string) (kubeconfig string, err error) {
	env := map[string]string{"KUBE_OWNER_PID": fmt.Sprint(os.Getpid())}
	kc, err := script(env, "kube-apiserver/start.sh", state)
	if err == nil {
		return kc, nil
	}
	fmt.Fprintf(os.Stderr, "platform/kubevirt tests: once more after %v\n", err)
	stopServer(state) // removes state
	return script(env, "kube-apiserver/start.sh", state)
}

// startGarbageCollector runs kube-controller-manager as start.sh does with
// KUBE_CONTROLLER_MANAGER=1, records it in state/pids (so stop.sh and the
// watchdog end it), and waits until its garbage collector completes a
// foreground deletion of a VirtualMachine that owns a DataVolume.
func startGarbageCollector(state, kc string) error {
	cmd := exec.Command(filepath.Join(kube.assets, "kube-controller-manager"), "--kubeconfig="+kc, "--leader-elect=false", "--secure-port=0",
		"--controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller",
		"--service-account-private-key-file="+filepath.Join(state, "sa.key"), "--root-ca-file="+filepath.Join(state, "serving.crt"))
	logf, err := os.Create(filepath.Join(state, "kube-controller-manager.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait(); logf.Close() }()
	pids, err := os.OpenFile(filepath.Join(state, "pids"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(pids, "%d kube-controller-manager\n", cmd.Process.Pid)
	pids.Close()
	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gc-canary"}}
	spec := testSpec()
	vm := BuildVirtualMachine(spec, spec.Machines[0], Options{Namespace: ns.Name, Network: "machine-net"}.withDefaults())
	if err := kube.c.Create(ctx, ns); err != nil {
		return err
	}
	if err := kube.c.Create(ctx, vm); err != nil {
		return err
	}
	dv := BuildGoldenDataVolume(spec, Options{Namespace: ns.Name}, 1)
	dv.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)}
	if err := kube.c.Create(ctx, dv); err != nil {
		return err
	}
	if err := kube.c.Delete(ctx, vm, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		return err
	}
	for {
		err := kube.c.Get(ctx, client.ObjectKeyFromObject(vm), &kubevirtv1.VirtualMachine{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-controller-manager's garbage collector did not remove a VirtualMachine within 60 s (log in %s): %v", state, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stopServer ends what start.sh (and startGarbageCollector) recorded in
// state/pids. The API servers go first, each awaited: stop.sh signals etcd
// with them, and a kube-apiserver that loses etcd while shutting down
// takes stop.sh's SIGKILL 10 s later (1 s when it goes first). stop.sh
// then ends the rest and removes state.
func stopServer(state string) {
	data, _ := os.ReadFile(filepath.Join(state, "pids"))
	for _, name := range []string{"kube-controller-manager", "kube-apiserver"} {
		for _, line := range strings.Split(string(data), "\n") {
			pid, n, _ := strings.Cut(line, " ")
			if n != name {
				continue
			}
			var id int
			if _, err := fmt.Sscan(pid, &id); err != nil {
				continue
			}
			// Ours while its command line names state, as stop.sh checks.
			ours := func() bool {
				cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", id))
				return err == nil && bytes.Contains(cl, []byte(state+"/"))
			}
			if !ours() {
				continue
			}
			if p, err := os.FindProcess(id); err == nil && p.Signal(syscall.SIGTERM) == nil {
				for end := time.Now().Add(5 * time.Second); ours() && time.Now().Before(end); {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}
	}
	_, _ = script(nil, "kube-apiserver/stop.sh", state)
}

// kubevirtCRDs is where gen.sh keeps KubeVirt's and CDI's CRDs:
// $APPLIANCE_KUBEVIRT_CRDS, else a folder in the user's cache.
func kubevirtCRDs() string {
	if d := os.Getenv("APPLIANCE_KUBEVIRT_CRDS"); d != "" {
		return d
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return filepath.Join(cache, "appliance-kube", "kubevirt-crds")
}

// moduleRoot is the folder holding go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// serverAssets is $KUBEBUILDER_ASSETS, else build.sh's default folder when
// an earlier build.sh filled it; "" when neither holds the binaries.
func serverAssets() string {
	dirs := []string{os.Getenv("KUBEBUILDER_ASSETS")}
	if cache, err := os.UserCacheDir(); err == nil && dirs[0] == "" {
		dirs = append(dirs, filepath.Join(cache, "appliance-kube", "v1.37.1", "bin"))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		ok := true
		for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				ok = false
			}
		}
		if ok {
			return d
		}
	}
	return ""
}

// script runs one of the shared tools and returns its stdout's last line;
// a failure carries its stderr.
func script(env map[string]string, name string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(kube.tools, name), args...)
	cmd.Env = append(os.Environ(), "KUBEBUILDER_ASSETS="+kube.assets)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	out := strings.TrimSpace(stdout.String())
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	return out, nil
}

// needAPI skips a test without the server, or fails it under CI, where a
// missing setup must never pass quietly.
func needAPI(t *testing.T) {
	t.Helper()
	if kube.kubeconfig != "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal(kube.skip)
	}
	t.Skip(kube.skip)
}

// newNamespace makes a fresh namespace holding the NetworkAttachmentDefinition
// "machine-net", and returns its name.
func newNamespace(t *testing.T) string {
	t.Helper()
	needAPI(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := strings.ToLower(t.Name())
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, name)
	name = strings.Trim(name[:min(len(name), 50)], "-") + "-" + hex.EncodeToString(b)
	ctx := context.Background()
	if err := kube.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	createNAD(t, name, "machine-net")
	return name
}

// createNAD makes a Multus network in ns.
func createNAD(t *testing.T, ns, name string) {
	t.Helper()
	nad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"config": `{"cniVersion":"0.3.1","type":"bridge","bridge":"br-machine"}`},
	}}
	if err := kube.c.Create(context.Background(), nad); err != nil {
		t.Fatal(err)
	}
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
