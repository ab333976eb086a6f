package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"appliance/bootstrap"
	"appliance/internal/kubeapi"
	"appliance/internal/netlab"
	"appliance/platform/kubevirt/kubevirttest"
)

// testImage is the reference the manifests name; nothing pulls it here.
const testImage = "localhost/appliance@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// roleFiles is what one role's MachineConfig puts on a node: path →
// contents, decoded from the Ignition config inside it.
type roleFiles map[string][]byte

// manifests runs `appliance manifests` on config (a file's contents) and
// returns each role's files as the Machine Config Operator would write them,
// and the asset folder it wrote.
func manifests(t *testing.T, exe, config string) (map[string]roleFiles, string) {
	t.Helper()
	return manifestsFor(t, exe, config, testImage)
}

// manifestsFor is manifests with the nodes' image given.
func manifestsFor(t *testing.T, exe, config, image string) (map[string]roleFiles, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "appliance.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	assets := filepath.Join(dir, "assets")
	if out, err := exec.Command(exe, "manifests", "--config", cfg, "--dir", assets, "--image", image).CombinedOutput(); err != nil {
		t.Fatalf("appliance manifests: %v\n%s", err, out)
	}
	out := map[string]roleFiles{}
	for _, role := range []string{"master", "worker"} {
		raw, err := os.ReadFile(filepath.Join(assets, "openshift", "99-appliance-"+role+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var mc bootstrap.MachineConfig
		if err := yaml.UnmarshalStrict(raw, &mc); err != nil {
			t.Fatalf("%s MachineConfig: %v", role, err)
		}
		var ign struct {
			Storage struct {
				Files []struct {
					Path     string `json:"path"`
					Mode     *int   `json:"mode"`
					Contents struct {
						Source string `json:"source"`
					} `json:"contents"`
				} `json:"files"`
			} `json:"storage"`
		}
		if err := json.Unmarshal(mc.Spec.Config, &ign); err != nil {
			t.Fatalf("%s MachineConfig's Ignition: %v", role, err)
		}
		files := roleFiles{}
		for _, f := range ign.Storage.Files {
			b64, ok := strings.CutPrefix(f.Contents.Source, "data:;base64,")
			if !ok {
				t.Fatalf("%s: %s: source %.40q is not a base64 data URL", role, f.Path, f.Contents.Source)
			}
			b, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				t.Fatal(err)
			}
			files[f.Path] = b
		}
		out[role] = files
	}
	return out, assets
}

// podCommand is the appliance container's command line in the static pod
// the files carry.
func (f roleFiles) podCommand(t *testing.T) (command, args []string) {
	t.Helper()
	c := f.pod(t).Spec.Containers[0]
	return c.Command, c.Args
}

// pod is the static pod the files carry, with its one container.
func (f roleFiles) pod(t testing.TB) *corev1.Pod {
	t.Helper()
	raw, ok := f[bootstrap.StaticPodPath]
	if !ok {
		t.Fatalf("no static pod at %s", bootstrap.StaticPodPath)
	}
	return parsePod(t, raw)
}

// parsePod decodes a static pod manifest strictly, as the kubelet reads it.
func parsePod(t testing.TB, raw []byte) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(raw, &pod); err != nil {
		t.Fatalf("static pod: %v", err)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("static pod has %d containers", len(pod.Spec.Containers))
	}
	return &pod
}

// deployed is one node started as the kubelet would start the static pod:
// its own host name (UTS namespace), the MachineConfig's files in place
// under /etc, /var/lib and /run (overlays in a mount namespace of its own,
// so the machine's own folders are never written), and the pod's exact
// arguments.
type deployed struct {
	node *netlab.Node
	host string
	proc *netlab.Process
}

// startDeployed starts files' static pod on n as host. extra are more
// files of the node (path → contents), e.g. NetworkManager's resolv.conf or
// the kubelet's kubeconfig.
func startDeployed(t *testing.T, exe string, n *netlab.Node, host string, files roleFiles, extra map[string]string) *deployed {
	t.Helper()
	root := t.TempDir()
	write := func(path string, b []byte, mode os.FileMode) {
		full := filepath.Join(root, "upper", path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, b, mode); err != nil {
			t.Fatal(err)
		}
	}
	for p, b := range files {
		write(p, b, 0o644)
	}
	for p, s := range extra {
		write(p, []byte(s), 0o644)
	}
	for _, d := range []string{"etc", "var/lib", "run"} {
		for _, sub := range []string{"upper", "work"} {
			if err := os.MkdirAll(filepath.Join(root, sub, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, args := files.podCommand(t)
	// The pod's command is the image's /appliance; here it is the binary
	// just built, with the pod's arguments unchanged.
	script := `set -e
hostname "$APPLIANCE_HOST"
for d in etc var/lib run; do
	mount -t overlay overlay -o "lowerdir=/$d,upperdir=$APPLIANCE_ROOT/upper/$d,workdir=$APPLIANCE_ROOT/work/$d" "/$d"
done
exec "$@"`
	cmdline := append([]string{"APPLIANCE_HOST=" + host, "APPLIANCE_ROOT=" + root,
		"unshare", "--mount", "--uts", "--propagation", "private", "--", "sh", "-c", script, "sh", exe}, args...)
	p, err := n.Start(context.Background(), "env", cmdline...)
	if err != nil {
		t.Fatalf("start %s: %v", host, err)
	}
	return &deployed{node: n, host: host, proc: p}
}

// get fetches path from the node's admin listener (127.0.0.1:9447, as the
// node config spells it out).
func (d *deployed) get(path string) (string, error) {
	c, err := d.node.DialTimeout("tcp", "127.0.0.1:9447", 2*time.Second)
	if err != nil {
		return "", err
	}
	tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return c, nil }, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("http://127.0.0.1:9447" + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%s: %s", path, resp.Status)
	}
	return string(b), err
}

// status decodes the node's /status.
func (d *deployed) status() (map[string]json.RawMessage, error) {
	body, err := d.get("/status")
	if err != nil {
		return nil, err
	}
	var st map[string]json.RawMessage
	return st, json.Unmarshal([]byte(body), &st)
}

// waitReady waits for /readyz, as the kubelet's readiness probe does.
func (d *deployed) waitReady(t *testing.T, within time.Duration) {
	t.Helper()
	var last error
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		select {
		case <-d.proc.Done():
			t.Fatalf("%s exited: %v\n%s", d.host, d.proc.Wait(), tail(d.proc.Output()))
		default:
		}
		if _, last = d.get("/readyz"); last == nil {
			return
		}
	}
	t.Fatalf("%s not ready within %s: %v\n%s", d.host, within, last, tail(d.proc.Output()))
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

// dig asks server for name from inside n with the real dig and returns its
// status and answers ("NOERROR 192.168.126.5").
func dig(t *testing.T, n *netlab.Node, server, qtype, name string) string {
	t.Helper()
	args := []string{"+tries=1", "+time=2", "@" + server, qtype, name}
	if qtype == "PTR" {
		args = []string{"+tries=1", "+time=2", "@" + server, "-x", name}
	}
	out, err := n.Run(context.Background(), "dig", args...)
	if err != nil && !strings.Contains(out, "status:") {
		t.Fatalf("dig %v in %s: %v", args, n.Name, err)
	}
	return digSummary(out)
}

var (
	digStatus = regexp.MustCompile(`status: ([A-Z]+)`)
	digAnswer = regexp.MustCompile(`(?m)^\S+\s+\d+\s+IN\s+(?:A|AAAA|PTR)\s+(\S+)$`)
)

func digSummary(out string) string {
	m := digStatus.FindStringSubmatch(out)
	if m == nil {
		return "NO ANSWER"
	}
	parts := []string{m[1]}
	for _, a := range digAnswer.FindAllStringSubmatch(out, -1) {
		parts = append(parts, a[1])
	}
	return strings.Join(parts, " ")
}

// waitFor polls ok until it holds or within passes.
func waitFor(t *testing.T, what string, within time.Duration, ok func() (bool, string)) {
	t.Helper()
	var last string
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		var done bool
		if done, last = ok(); done {
			return
		}
	}
	t.Fatalf("%s: not within %s (last: %s)", what, within, last)
}

// kubeAPI is a real kube-apiserver started by the shared tools in a node of
// the lab.
type kubeAPI struct {
	node     *netlab.Node
	upstream string // https://IP:port
	token    string
	assets   string
}

// startKubeAPI starts etcd and kube-apiserver inside n, or skips the test
// (fails it under CI) when the binaries are not built.
func startKubeAPI(t *testing.T, n *netlab.Node) *kubeAPI {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		msg := "no kube-apiserver: run KUBEBUILDER_ASSETS=$(../../shared/tools/kube-apiserver/build.sh) go test"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	srv := startSharedKubeAPI(t, n, assets)
	return &kubeAPI{node: n, upstream: srv.URL, token: srv.Token, assets: assets}
}

// kubeconfig is a kubelet-like kubeconfig for node name: the API by the
// cluster's internal name, as a node's kubelet has it, acting as that node
// (the group system:nodes), so what it may read is what the appliance's
// RBAC grants a kubelet.
func (k *kubeAPI) kubeconfig(server, node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: kubelet
  user:
    token: %s
    as: system:node:%s
    as-groups: [system:nodes, system:authenticated]
contexts:
- name: kubelet
  context: {cluster: cluster, user: kubelet}
current-context: kubelet
`, server, k.token, node)
}

// kubectl runs kubectl as the admin against the API, from the API's node.
func (k *kubeAPI) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: %s}}]
contexts: [{name: c, context: {cluster: c, user: admin}}]
current-context: c
`, k.upstream, k.token)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := k.node.Run(context.Background(), filepath.Join(k.assets, "kubectl"), append([]string{"--kubeconfig", kc}, args...)...)
	if err != nil {
		t.Fatalf("kubectl %v: %v", args, err)
	}
	return out
}

// startSharedKubeAPI starts the shared tools' etcd and kube-apiserver
// inside n (kubeapi.Start: bound to n's address, once more when start.sh
// fails) and stops them when the test ends.
func startSharedKubeAPI(t *testing.T, n *netlab.Node, assets string) *kubeapi.Server {
	t.Helper()
	root, err := kubevirttest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	tools := filepath.Join(root, "..", "shared", "tools", "kube-apiserver")
	state := filepath.Join(t.TempDir(), "kube")
	srv, err := kubeapi.Start(t.Context(), n, tools, assets, state)
	t.Cleanup(func() {
		for _, st := range []string{state, state + "-again"} {
			if _, err := os.Stat(filepath.Join(st, "pids")); err == nil {
				if out, err := exec.Command(filepath.Join(tools, "stop.sh"), st).CombinedOutput(); err != nil {
					t.Logf("stop.sh %s: %v\n%s", st, err, out)
				}
			}
		}
	})
	if err != nil {
		t.Fatalf("kube-apiserver in %s: %v", n.Name, err)
	}
	return srv
}
