package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/kubeletnode"
	"appliance/internal/netlab"
)

// KubeletOptions run every node's appliance as a node runs it: a real
// kubelet (with containerd and runc) per node namespace, the static pod and
// node files `appliance manifests` and `appliance ignition` write, the
// image `make image` builds (internal/kubeletnode, with the project's
// kubelet tools).
type KubeletOptions struct {
	// Tools is the folder of the kubelet scripts (start.sh, stop.sh,
	// build.sh), ../shared/tools/kubelet in the project's checkout.
	Tools string
	// Assets is the folder build.sh built the binaries into; "" looks in
	// build.sh's default cache.
	Assets string
	// Image is the OCI archive `make image` writes.
	Image string
	// Files returns the files a node of role is given for cfg, its static
	// pod running image (a reference by digest) among them: what
	// `appliance ignition` and `appliance manifests` put on a node (cmd
	// wires bootstrap.Files with app/node's plan).
	Files func(cfg *cluster.Config, role cluster.Role, image string) (map[string][]byte, error)
}

// staticPodPath is where a node's files carry the static pod
// (bootstrap.StaticPodPath).
const staticPodPath = "/etc/kubernetes/manifests/appliance.yaml"

// kubelets is the lab's kubelet mode: one kubelet per node.
type kubelets struct {
	o     KubeletOptions
	tools kubeletnode.Tools
	ref   string // the image by digest
	dir   string // the kubelets' state folders

	mu    sync.Mutex
	nodes map[*netlab.Node]*kubeletnode.Node
}

// newKubelets checks the tools and the image before anything is built, and
// says how to get them when they are missing.
func newKubelets(o KubeletOptions) (*kubelets, error) {
	tools, err := kubeletnode.FindTools(o.Tools, o.Assets)
	if err != nil {
		return nil, fmt.Errorf("lab --kubelet: %w", err)
	}
	ref, err := kubeletnode.ImageRef(o.Image)
	if err != nil {
		return nil, fmt.Errorf("lab --kubelet: %w (make image writes it)", err)
	}
	if o.Files == nil {
		return nil, errors.New("lab --kubelet: no node files given")
	}
	dir, err := os.MkdirTemp("", "appliance-lab-kubelets-")
	if err != nil {
		return nil, fmt.Errorf("lab --kubelet: %w", err)
	}
	return &kubelets{o: o, tools: tools, ref: ref, dir: dir, nodes: map[*netlab.Node]*kubeletnode.Node{}}, nil
}

// startPods starts a kubelet on each of nodes with the files its role is
// given for the config at cfgPath (the lab's Kubernetes API as the
// kubelet's kubeconfig when there is one), puts the static pod in place and
// waits for each to answer /healthz.
func (r *run) startPods(cfgPath string, nodes ...*netlab.Node) error {
	cfg, err := cluster.Load(cfgPath)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	var kubeconfig []byte
	if r.kube != nil && r.kube.kubeconfig != "" {
		if kubeconfig, err = os.ReadFile(r.kube.kubeconfig); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
	}
	var specs []kubeletnode.Spec
	pods := map[string][]byte{}
	for _, n := range nodes {
		name := r.names[n]
		role := cluster.Role(strings.TrimRight(name, "-0123456789"))
		files, err := r.kl.o.Files(cfg, role, r.kl.ref)
		if err != nil {
			return fmt.Errorf("lab: %s's files: %w", name, err)
		}
		pods[name] = files[staticPodPath]
		if pods[name] == nil {
			return fmt.Errorf("lab: %s's files carry no static pod", name)
		}
		delete(files, staticPodPath)
		if kubeconfig != nil {
			// Where the kubelet keeps its own; the appliance reads it.
			files["/var/lib/kubelet/kubeconfig"] = kubeconfig
		}
		specs = append(specs, kubeletnode.Spec{Node: n, Name: name, Files: files, Images: []string{r.kl.o.Image}})
	}
	t0 := time.Now()
	started, err := kubeletnode.Start(r.ctx, r.kl.tools, r.kl.dir, specs...)
	r.kl.mu.Lock()
	for i, k := range started {
		if k != nil {
			r.kl.nodes[nodes[i]] = k
		}
	}
	r.kl.mu.Unlock()
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = r.names[n]
	}
	r.say("kubelets started on %s (%s); their static pods go in place", strings.Join(names, ", "), time.Since(t0).Round(100*time.Millisecond))
	for i, k := range started {
		if err := k.Put(pods[r.names[nodes[i]]]); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
	}
	return nil
}

// podRunning reports whether the kubelet of n runs the appliance's
// container.
func (r *run) podRunning(n *netlab.Node) bool {
	k := r.kubelet(n)
	if k == nil {
		return false
	}
	_, ok, err := k.Running()
	return err == nil && ok
}

func (r *run) kubelet(n *netlab.Node) *kubeletnode.Node {
	r.kl.mu.Lock()
	defer r.kl.mu.Unlock()
	return r.kl.nodes[n]
}

// removePod takes n's manifest away, as bootkube's teardown does, and
// waits for the kubelet to stop the pod: its exit code and how long after.
func (r *run) removePod(n *netlab.Node, within time.Duration) (code int, took time.Duration, err error) {
	k := r.kubelet(n)
	c, ok, err := k.Running()
	if err != nil || !ok {
		return 0, 0, fmt.Errorf("lab: %s runs no appliance container (%v)", r.names[n], err)
	}
	t0 := time.Now()
	if err := k.Remove(); err != nil {
		return 0, 0, fmt.Errorf("lab: %w", err)
	}
	var st kubeletnode.Status
	ok, err = r.until(within, func() bool {
		st, err = k.Inspect(c.ID)
		return err == nil && st.Status.State == "CONTAINER_EXITED"
	})
	if err != nil {
		return 0, 0, err
	}
	if !ok {
		return 0, 0, fmt.Errorf("lab: %s's appliance still runs %s after its manifest went", r.names[n], within)
	}
	return st.Status.ExitCode, st.Finished().Sub(t0), nil
}

// killPod is a node losing power: its kubelet and its appliance SIGKILLed,
// nothing stopped gracefully.
func (r *run) killPod(n *netlab.Node) error {
	k := r.kubelet(n)
	if k == nil {
		return nil
	}
	c, ok, err := k.Running()
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := k.KillKubelet(); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if ok {
		st, err := k.Inspect(c.ID)
		if err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		if st.Info.Pid > 0 {
			_ = syscall.Kill(st.Info.Pid, syscall.SIGKILL)
		}
	}
	return nil
}

// podTails prints the last n lines of each node's appliance container log.
func (r *run) podTails(n int) {
	for _, node := range r.cluster() {
		k := r.kubelet(node)
		if k == nil || k.Pod() == nil {
			continue
		}
		cs, err := k.Containers()
		if err != nil || len(cs) == 0 {
			continue
		}
		logs, _ := k.Logs(cs[len(cs)-1].ID)
		lines := strings.Split(strings.TrimRight(logs, "\n"), "\n")
		fmt.Fprintf(r.o.Out, "\n--- %s's appliance container (crictl logs), last lines:\n", r.names[node])
		for _, l := range lines[max(0, len(lines)-n):] {
			fmt.Fprintf(r.o.Out, "    %s\n", l)
		}
	}
}

// stopKubelets stops every kubelet (stop.sh: the pods with their grace
// period) and removes their folders.
func (r *run) stopKubelets() error {
	r.kl.mu.Lock()
	nodes := make([]*kubeletnode.Node, 0, len(r.kl.nodes))
	for _, k := range r.kl.nodes {
		nodes = append(nodes, k)
	}
	r.kl.mu.Unlock()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, k := range nodes {
		wg.Go(func() { errs[i] = k.Stop(false) })
	}
	wg.Wait()
	errs = append(errs, os.RemoveAll(r.kl.dir))
	return errors.Join(errs...)
}

// waitHealthy waits for n's appliance to answer /healthz; in kubelet mode
// its pod must run, otherwise its process.
func (r *run) waitHealthy(n *netlab.Node, within time.Duration) error {
	name := r.names[n]
	var p *netlab.Process
	if r.kl == nil {
		p = r.procs["run/"+name]
	}
	exited := func() bool {
		if p == nil {
			return false
		}
		select {
		case <-p.Done():
			return true
		default:
			return false
		}
	}
	ok, err := r.until(within, func() bool { return exited() || healthy(n) })
	if err != nil {
		return err
	}
	switch {
	case exited():
		return fmt.Errorf("lab: appliance run on %s (%s) exited: %v", name, n.Name, p.Wait())
	case !ok && r.kl != nil:
		why := "no kubelet"
		if k := r.kubelet(n); k != nil {
			_, why = k.Ready()
		}
		return fmt.Errorf("lab: the appliance pod on %s (%s) does not answer /healthz after %s: %s (logs in %s)",
			name, n.Name, within, why, filepath.Join(r.kl.dir, "kubelet-"+name))
	case !ok:
		return fmt.Errorf("lab: appliance run on %s (%s) does not answer /healthz after %s", name, n.Name, within)
	}
	return nil
}
