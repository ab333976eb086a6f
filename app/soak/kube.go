package soak

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"appliance/internal/kubeapi"
	"appliance/internal/netlab"
)

// kubeAPI is a real kube-apiserver and its etcd (the shared tools'
// start.sh) in a node of their own: the appliances' Node source, reached
// through the API VIP and the stand-in apiservers as a node's kubelet
// reaches it.
type kubeAPI struct {
	c        *cluster
	node     *netlab.Node
	upstream string // https://IP:port of the kube-apiserver itself
	direct   string // start.sh's kubeconfig: the kube-apiserver itself
	viaVIP   string // the appliances' kubeconfig: through the API VIP
	kubectl  string
	argv     []string        // the kube-apiserver's command line, to start it again
	proc     *netlab.Process // the kube-apiserver once the soak restarted it
	pid      int             // start.sh's kube-apiserver until then
}

// kubeMissing says why the soak runs without a Kubernetes API, or "".
func kubeMissing(o *Options) string { return kubeapi.Missing(o.KubeTools, o.KubeAssets) }

// startKube starts etcd and kube-apiserver in a new node and writes the
// kubeconfig every appliance gets.
func (c *cluster) startKube() error {
	n, err := c.lab.AddNode(c.ctx)
	if err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	srv, err := kubeapi.Start(c.ctx, n, c.o.KubeTools, c.o.KubeAssets, filepath.Join(c.lab.Dir(), "kube"))
	if err != nil {
		return err
	}
	k := &kubeAPI{c: c, node: n, upstream: srv.URL, direct: srv.Kubeconfig, kubectl: filepath.Join(c.o.KubeAssets, "kubectl"),
		viaVIP: filepath.Join(c.lab.Dir(), "kubeconfig")}
	if err := os.WriteFile(k.viaVIP, []byte(srv.AdminKubeconfig(fmt.Sprintf("https://%s:6443", apiVIP))), 0o600); err != nil {
		return err
	}
	pids, err := os.ReadFile(filepath.Join(srv.State, "pids"))
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
	if err := k.retry("AlreadyExists", "create", "-f", f); err != nil {
		return fmt.Errorf("soak: create Node %s: %w", name, err)
	}
	return nil
}

func (k *kubeAPI) deleteNode(name string) error {
	if err := k.retry("NotFound", "delete", "node", name, "--wait=false"); err != nil {
		return fmt.Errorf("soak: delete Node %s: %w", name, err)
	}
	return nil
}

// kubeRetryFor is how long a Node's creation or deletion is tried while
// the kube-apiserver is away (a kube-restart fault may overlap a day-2
// one): its stop, its pause and its start, as an admin's retry would.
const kubeRetryFor = 90 * time.Second

// retry runs kubectl args until it succeeds or fails with done in its
// output (an earlier try that timed out did the work), for kubeRetryFor.
func (k *kubeAPI) retry(done string, args ...string) error {
	end := time.Now().Add(kubeRetryFor)
	for {
		out, err := k.run(args...)
		if err == nil || strings.Contains(out, done) {
			return nil
		}
		if time.Now().After(end) {
			return err
		}
		select {
		case <-k.c.ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
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

// nodeAddrs lists the Nodes' names and InternalIPs.
func (k *kubeAPI) nodeAddrs() (map[string]netip.Addr, error) {
	out, err := k.run("get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}`)
	if err != nil {
		return nil, err
	}
	m := map[string]netip.Addr{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if a, err := netip.ParseAddr(f[1]); err == nil {
			m[f[0]] = a
		}
	}
	return m, nil
}
