package lab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"appliance/internal/kubeapi"
)

// KubeOptions let the day-2 worker join through a real Kubernetes API
// instead of mDNS. Without any of them the lab says why and uses mDNS.
type KubeOptions struct {
	// RunKubeconfig says `appliance run` takes --kubeconfig (its Node
	// member source is wired in).
	RunKubeconfig bool
	// Tools is the folder of the kube-apiserver scripts (start.sh,
	// stop.sh), ../shared/tools/kube-apiserver in the project's checkout.
	Tools string
	// Assets is the folder of the kube-apiserver, etcd and kubectl
	// binaries that the scripts' build.sh prints.
	Assets string
}

// kube is the lab's Kubernetes API: etcd and kube-apiserver in a node of
// their own, which the stand-in apiservers pass Kubernetes calls to.
type kube struct {
	upstream   string // https://IP:port of the real kube-apiserver
	kubeconfig string // the lab's: through the API VIP, as a node's would be
}

// kubeMissing says why the lab cannot use a Kubernetes API, or "" when it
// can.
func (r *run) kubeMissing() string {
	k := r.o.Kube
	switch {
	case r.kubeErr != "":
		return r.kubeErr
	case !k.RunKubeconfig:
		return "appliance run has no --kubeconfig yet"
	}
	return kubeapi.Missing(k.Tools, k.Assets)
}

// startKube starts etcd and kube-apiserver in a node of their own and
// writes the kubeconfig every appliance gets: the API through its VIP,
// with the admin token, the stand-ins' throw-away certificates unverified.
func (r *run) startKube() error {
	n, err := r.lab.AddNode(r.ctx)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	r.names[n] = "kube-api"
	t0 := time.Now()
	srv, err := kubeapi.Start(r.ctx, n, r.o.Kube.Tools, r.o.Kube.Assets, filepath.Join(r.lab.Dir(), "kube"))
	if err != nil {
		return err
	}
	r.kube = &kube{upstream: srv.URL, kubeconfig: filepath.Join(r.lab.Dir(), "kubeconfig")}
	kc := srv.AdminKubeconfig(fmt.Sprintf("https://%s:6443", apiVIP))
	if err := os.WriteFile(r.kube.kubeconfig, []byte(kc), 0o600); err != nil {
		return err
	}
	r.say("%-9s %-15s etcd and kube-apiserver (%s), ready after %s; the stand-in apiservers pass Kubernetes calls to it",
		"kube-api", n.IPv4.Addr(), r.kube.upstream, time.Since(t0).Round(100*time.Millisecond))
	return nil
}

// kubeRunArgs are the extra arguments of `appliance run` and of the
// stand-in apiservers when the lab has a Kubernetes API.
func (r *run) kubeRunArgs() []string {
	if r.kube == nil || r.kube.kubeconfig == "" {
		return nil
	}
	return []string{"--kubeconfig", r.kube.kubeconfig}
}

func (r *run) upstreamArgs() []string {
	if r.kube == nil || r.kube.upstream == "" {
		return nil
	}
	return []string{"--upstream", r.kube.upstream}
}

// createNode creates a worker's Node object with kubectl from the client,
// through the API VIP, the load balancer and a master's apiserver.
func (r *run) createNode(name string, ip netip.Addr) error {
	manifest := filepath.Join(r.lab.Dir(), name+"-node.yaml")
	doc := fmt.Sprintf(`apiVersion: v1
kind: Node
metadata:
  name: %s
  labels: {node-role.kubernetes.io/worker: ""}
status:
  addresses:
  - {type: InternalIP, address: %s}
  - {type: Hostname, address: %s}
`, name, ip, name)
	if err := os.WriteFile(manifest, []byte(doc), 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	out, err := r.client.Run(r.ctx, filepath.Join(r.o.Kube.Assets, "kubectl"), "--kubeconfig", r.kube.kubeconfig,
		"create", "-f", manifest)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	r.say("client: kubectl create -f %s (through the API VIP) -> %s", filepath.Base(manifest), strings.TrimSpace(out))
	return nil
}
