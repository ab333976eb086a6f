package soak

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"appliance/internal/netlab"
)

// kubeAPI is a real kube-apiserver and its etcd (the shared tools'
// start.sh) in a node of their own: the appliances' Node source, reached
// through the API VIP and the stand-in apiservers as a node's kubelet
// reaches it.
type kubeAPI struct {
	c        *cluster
	node     *netlab.Node
	state    string
	upstream string // https://IP:port of the kube-apiserver itself
	direct   string // start.sh's kubeconfig: the kube-apiserver itself
	viaVIP   string // the appliances' kubeconfig: through the API VIP
	kubectl  string
	argv     []string        // the kube-apiserver's command line, to start it again
	proc     *netlab.Process // the kube-apiserver once the soak restarted it
	pid      int             // start.sh's kube-apiserver until then
}

// kubeMissing says why the soak runs without a Kubernetes API, or "".
func kubeMissing(o *Options) string {
	switch {
	case o.KubeTools == "" || !isFile(filepath.Join(o.KubeTools, "start.sh")):
		return fmt.Sprintf("no kube-apiserver scripts in %q", o.KubeTools)
	case o.KubeAssets == "":
		return "no kube-apiserver binaries given (--kube-assets, what the scripts' build.sh prints)"
	}
	for _, b := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if !isFile(filepath.Join(o.KubeAssets, b)) {
			return fmt.Sprintf("no %s in %s", b, o.KubeAssets)
		}
	}
	return ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

var serverRE = regexp.MustCompile(`server: (https://\S+)`)

// startKube starts etcd and kube-apiserver in a new node and writes the
// kubeconfig every appliance gets.
func (c *cluster) startKube() error {
	n, err := c.lab.AddNode(c.ctx)
	if err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	k := &kubeAPI{c: c, node: n, state: filepath.Join(c.lab.Dir(), "kube"), kubectl: filepath.Join(c.o.KubeAssets, "kubectl")}
	startSh := func() (string, error) {
		return n.Run(c.ctx, "env", "KUBE_BIND="+n.IPv4.Addr().String(), "KUBE_OWNER_PID="+strconv.Itoa(os.Getpid()),
			"KUBEBUILDER_ASSETS="+c.o.KubeAssets, filepath.Join(c.o.KubeTools, "start.sh"), k.state)
	}
	out, err := startSh()
	if err != nil && c.ctx.Err() == nil {
		// Once more, in a folder of its own: start.sh can take a child it
		// launched a moment ago, not yet kube-apiserver, for one that
		// exited, or lose a port it picked before binding it.
		k.state = filepath.Join(c.lab.Dir(), "kube-again")
		out, err = startSh()
	}
	if err != nil {
		return fmt.Errorf("start.sh: %w", err)
	}
	fields := strings.Fields(out)
	if len(fields) == 0 {
		return errors.New("start.sh printed no kubeconfig")
	}
	k.direct = fields[len(fields)-1]
	kc, err := os.ReadFile(k.direct)
	if err != nil {
		return err
	}
	m := serverRE.FindSubmatch(kc)
	tokens, err := os.ReadFile(filepath.Join(k.state, "tokens.csv"))
	if err != nil || m == nil {
		return fmt.Errorf("start.sh's kubeconfig or token: %v", err)
	}
	token, _, _ := strings.Cut(string(tokens), ",")
	k.upstream = string(m[1])
	k.viaVIP = filepath.Join(c.lab.Dir(), "kubeconfig")
	doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: ocp4
  cluster:
    server: https://%s:6443
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: %s
contexts:
- name: ocp4
  context: {cluster: ocp4, user: admin}
current-context: ocp4
`, apiVIP, token)
	if err := os.WriteFile(k.viaVIP, []byte(doc), 0o600); err != nil {
		return err
	}
	pids, err := os.ReadFile(filepath.Join(k.state, "pids"))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(pids), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] == "kube-apiserver" {
			k.pid, _ = strconv.Atoi(f[0])
		}
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", k.pid))
	if err != nil || k.pid == 0 {
		return fmt.Errorf("the kube-apiserver's command line: %v", err)
	}
	k.argv = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	c.kube = k
	return nil
}

// run runs kubectl against the kube-apiserver directly, from its node.
func (k *kubeAPI) run(args ...string) (string, error) {
	return k.node.Run(k.c.ctx, k.kubectl, append([]string{"--kubeconfig", k.direct, "--request-timeout", "5s"}, args...)...)
}

// nodeManifest is a Node object with one InternalIP.
func nodeManifest(name, role string, ip netip.Addr) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Node
metadata:
  name: %s
  labels: {node-role.kubernetes.io/%s: ""}
status:
  addresses:
  - {type: InternalIP, address: %s}
  - {type: Hostname, address: %s}
`, name, role, ip, name)
}

// createNode creates a Node (a day-2 worker's, or a lab node's as its
// kubelet would register it).
func (k *kubeAPI) createNode(name, role string, ip netip.Addr) error {
	f := filepath.Join(k.c.lab.Dir(), name+"-node.yaml")
	if err := os.WriteFile(f, []byte(nodeManifest(name, role, ip)), 0o644); err != nil {
		return err
	}
	if _, err := k.run("create", "-f", f); err != nil {
		return fmt.Errorf("soak: create Node %s: %w", name, err)
	}
	return nil
}

func (k *kubeAPI) deleteNode(name string) error {
	if _, err := k.run("delete", "node", name, "--wait=false"); err != nil {
		return fmt.Errorf("soak: delete Node %s: %w", name, err)
	}
	return nil
}

// stopAPIServer stops the kube-apiserver (etcd keeps its data).
func (k *kubeAPI) stopAPIServer() error {
	if k.proc != nil {
		// Its exit status only says how it took the stop: a SIGKILL
		// after the grace (a graceful shutdown can outlast it) stops it
		// too, and the fault goes on to start it again.
		_ = k.proc.Stop(15 * time.Second)
		return nil
	}
	if err := syscall.Kill(k.pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	end := time.Now().Add(15 * time.Second)
	for time.Now().Before(end) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", k.pid)); err != nil || strings.Contains(string(b), ") Z ") {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(k.pid, syscall.SIGKILL)
	return nil
}

// startAPIServer starts the kube-apiserver again with its command line
// and waits until it answers.
func (k *kubeAPI) startAPIServer() error {
	p, err := k.node.Start(k.c.ctx, k.argv[0], k.argv[1:]...)
	if err != nil {
		return err
	}
	k.proc = p
	end := time.Now().Add(60 * time.Second)
	for time.Now().Before(end) {
		if _, err := k.run("get", "--raw", "/readyz"); err == nil {
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("kube-apiserver exited: %v\n%s", p.Wait(), tail(p.Output(), 10))
		case <-time.After(200 * time.Millisecond):
		}
	}
	return errors.New("kube-apiserver not ready 60 s after it started again")
}
