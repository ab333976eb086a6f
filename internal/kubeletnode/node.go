package kubeletnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"appliance/internal/netlab"
)

// Spec is what one node's kubelet starts with.
type Spec struct {
	// Node is the netlab node whose namespace plays the node.
	Node *netlab.Node
	// Name is the node's name: the kubelet's node name (a static pod P
	// becomes P-Name) and the host name its pods see.
	Name string
	// Files are the node's files (absolute path → contents), e.g. what a
	// MachineConfig carries; those under /etc, /run and /var/lib are put
	// in the node's overlays before the kubelet starts, the rest ignored.
	// The static pod's manifest is not among them: see Put.
	Files map[string][]byte
	// Images are OCI or docker archives imported before the kubelet
	// starts (nothing is pulled).
	Images []string
	// ConfigExtra is appended to the KubeletConfiguration, e.g.
	// "seccompDefault: true".
	ConfigExtra string
}

// overlaid are the node's folders start.sh overlays.
var overlaid = []string{"/etc/", "/run/", "/var/lib/"}

// Node is one kubelet with its containerd in a netlab node.
type Node struct {
	// Node is the netlab node; Name the node's name.
	Node *netlab.Node
	Name string

	tools Tools
	state string            // start.sh's STATEDIR
	env   map[string]string // start.sh's KEY='value' lines

	mu       sync.Mutex
	manifest []byte      // in place; nil when removed
	pod      *corev1.Pod // the manifest last put, decoded
}

// Start starts the specs' kubelets side by side, each with its state under
// dir (start.sh takes about 2 s), and returns those that started (in the
// order of specs, nil for one that did not) with every failure. Stop each
// returned node, also after an error. The scripts' watchdog stops them
// should this process die first.
func Start(ctx context.Context, tools Tools, dir string, specs ...Spec) ([]*Node, error) {
	nodes := make([]*Node, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, sp := range specs {
		k := &Node{Node: sp.Node, Name: sp.Name, tools: tools, state: filepath.Join(dir, "kubelet-"+sp.Name)}
		wg.Go(func() {
			if errs[i] = k.start(ctx, sp); errs[i] == nil {
				nodes[i] = k
			}
		})
	}
	wg.Wait()
	return nodes, errors.Join(errs...)
}

func (k *Node) start(ctx context.Context, sp Spec) error {
	for p, b := range sp.Files {
		for _, d := range overlaid {
			if !strings.HasPrefix(p, d) {
				continue
			}
			full := filepath.Join(k.state, "node", p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(full, b, 0o600); err != nil {
				return err
			}
		}
	}
	out, err := k.startScript(ctx, sp)
	if err != nil && strings.Contains(err.Error(), " exited; logs in ") {
		// start.sh checks that containerd and the kubelet run by their
		// command lines naming STATEDIR/; on a loaded machine it may look
		// before the background child has exec'd (its command line is
		// still start.sh's) and take it for dead. It stopped what it
		// started and kept the folder: once more.
		out, err = k.startScript(ctx, sp)
	}
	if err != nil {
		return err
	}
	k.env = map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if key, v, ok := strings.Cut(l, "="); ok {
			k.env[key] = strings.Trim(v, "'")
		}
	}
	if k.env["KUBELET_MANIFESTS"] == "" || k.env["CRICTL"] == "" {
		return fmt.Errorf("kubelet on %s: start.sh printed no environment:\n%s", sp.Name, out)
	}
	return nil
}

// startScript runs start.sh for sp and returns what it printed.
func (k *Node) startScript(ctx context.Context, sp Spec) ([]byte, error) {
	// The node's own host name: its pods share the node's UTS namespace
	// (hostNetwork), and containerd and the kubelet, started by start.sh,
	// live in this one.
	args := []string{"--uts", "--", "sh", "-c", `hostname "$1" && shift && exec "$@"`, "sh", sp.Name,
		filepath.Join(k.tools.Dir, "start.sh"), "/run/netns/" + sp.Node.NS, k.state}
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.Env = append(os.Environ(), "KUBELET_ASSETS="+k.tools.Assets, "KUBELET_IMAGES="+strings.Join(sp.Images, " "),
		"KUBELET_NODE_NAME="+sp.Name, "KUBELET_NODE_IP="+sp.Node.IPv4.Addr().String(),
		"KUBELET_OWNER_PID="+strconv.Itoa(os.Getpid()), "KUBELET_CONFIG_EXTRA="+sp.ConfigExtra)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubelet on %s: start.sh: %w\n%s%s", sp.Name, err, out, stderr.String())
	}
	return out, nil
}

// State is the node's state folder (the kubelet's and containerd's logs,
// kubelet.log and containerd.log, are there).
func (k *Node) State() string { return k.state }

// Stop runs stop.sh: the static pods stopped with their grace period, then
// the kubelet and containerd, their cgroup and state removed (keep keeps
// the state folder, with the logs).
func (k *Node) Stop(keep bool) error {
	args := []string{k.state}
	if keep {
		args = append(args, "--keep")
	}
	out, err := exec.Command(filepath.Join(k.tools.Dir, "stop.sh"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubelet on %s: stop.sh: %w\n%s", k.Name, err, out)
	}
	return nil
}

// manifestName is the static pod's file in the kubelet's folder.
const manifestName = "appliance.yaml"

// Put writes a static pod's manifest into the kubelet's folder the way a
// node's tools must: a dot-file renamed into place, so the kubelet never
// reads half of it. A manifest already there is replaced: the kubelet stops
// that pod and starts this one.
func (k *Node) Put(manifest []byte) error {
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(manifest, &pod); err != nil {
		return fmt.Errorf("kubelet on %s: static pod: %w", k.Name, err)
	}
	if len(pod.Spec.Containers) != 1 {
		return fmt.Errorf("kubelet on %s: static pod %s has %d containers, want one", k.Name, pod.Name, len(pod.Spec.Containers))
	}
	dir := k.env["KUBELET_MANIFESTS"]
	tmp := filepath.Join(dir, "."+manifestName+".tmp")
	if err := os.WriteFile(tmp, manifest, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, manifestName)); err != nil {
		return err
	}
	k.mu.Lock()
	k.manifest, k.pod = manifest, &pod
	k.mu.Unlock()
	return nil
}

// Remove takes the manifest away, as bootkube's teardown and the Machine
// Config Operator do: the kubelet stops the pod with its grace period.
func (k *Node) Remove() error {
	if err := os.Remove(filepath.Join(k.env["KUBELET_MANIFESTS"], manifestName)); err != nil {
		return fmt.Errorf("kubelet on %s: %w", k.Name, err)
	}
	k.mu.Lock()
	k.manifest = nil
	k.mu.Unlock()
	return nil
}

// Manifest is the manifest in place, nil when removed.
func (k *Node) Manifest() []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.manifest
}

// Pod is the static pod last put in place (also after Remove), decoded:
// names, ports and settings are read from it, never assumed. nil before
// the first Put.
func (k *Node) Pod() *corev1.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.pod
}

// PodName is the name the kubelet gives the static pod on this node.
func (k *Node) PodName() string { return k.Pod().Name + "-" + k.Name }

// kubeletPIDs reads start.sh's pids file: the kubelet's and containerd's.
func (k *Node) kubeletPIDs() (kubelet, containerd int, rest []string, err error) {
	b, err := os.ReadFile(filepath.Join(k.state, "pids"))
	if err != nil {
		return 0, 0, nil, err
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		pid, _ := strconv.Atoi(f[0])
		switch f[1] {
		case "kubelet":
			kubelet = pid
			continue
		case "containerd":
			containerd = pid
		}
		rest = append(rest, l)
	}
	if kubelet == 0 || containerd == 0 {
		return 0, 0, nil, fmt.Errorf("kubelet on %s: no kubelet or containerd in %s/pids", k.Name, k.state)
	}
	return kubelet, containerd, rest, nil
}

// ours reports whether pid runs with this node's state in its command line
// (pids are checked before they are signalled: a pid may be reused).
func (k *Node) ours(pid int) ([]byte, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return b, err == nil && bytes.Contains(b, []byte(k.state+"/"))
}

// KillKubelet SIGKILLs the kubelet: with the node's power gone, nothing
// may restart its pods. containerd and the containers keep running until
// Stop (kill the containers' processes too for a dead node).
func (k *Node) KillKubelet() error {
	kubelet, _, _, err := k.kubeletPIDs()
	if err != nil {
		return err
	}
	if _, ok := k.ours(kubelet); !ok {
		return nil
	}
	return syscall.Kill(kubelet, syscall.SIGKILL)
}

// RestartKubelet stops the kubelet (SIGTERM, as systemd stops it) and
// starts it again with the same command line in the same namespaces, as
// `systemctl restart kubelet` does: containerd and the containers keep
// running meanwhile. It returns once the new kubelet's /healthz answers.
func (k *Node) RestartKubelet(ctx context.Context) error {
	kubelet, containerd, rest, err := k.kubeletPIDs()
	if err != nil {
		return err
	}
	argv, ok := k.ours(kubelet)
	if !ok {
		return fmt.Errorf("kubelet on %s: pid %d is not its kubelet", k.Name, kubelet)
	}
	args := strings.Split(strings.TrimRight(string(argv), "\x00"), "\x00")
	if err := syscall.Kill(kubelet, syscall.SIGTERM); err != nil {
		return fmt.Errorf("kubelet on %s: %w", k.Name, err)
	}
	if err := poll(ctx, 15*time.Second, func() error {
		if _, ok := k.ours(kubelet); ok {
			return errors.New("still running after SIGTERM")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("kubelet on %s: %w", k.Name, err)
	}
	log, err := os.OpenFile(filepath.Join(k.state, "kubelet.log"), os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command("nsenter", append([]string{"--target", strconv.Itoa(containerd), "--mount", "--net", "--uts", "--"}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	// A session of its own: it outlives this call as the first one
	// outlived start.sh; stop.sh finds it in the pids file.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kubelet on %s: %w", k.Name, err)
	}
	go func() { _ = cmd.Wait() }()
	rest = append(rest, fmt.Sprintf("%d kubelet", cmd.Process.Pid))
	if err := os.WriteFile(filepath.Join(k.state, "pids"), []byte(strings.Join(rest, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	return poll(ctx, 60*time.Second, func() error {
		body, err := k.get("127.0.0.1:10248", "/healthz", false)
		if err == nil && strings.TrimSpace(body) != "ok" {
			err = fmt.Errorf("healthz: %q", body)
		}
		return err
	})
}

// poll calls f every 100 ms until it returns nil, within passes (the last
// error then) or ctx ends.
func poll(ctx context.Context, within time.Duration, f func() error) error {
	end := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("not within %s: %w", within, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
