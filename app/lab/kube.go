package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"appliance/internal/netlab"
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
	node       *netlab.Node
	state      string // start.sh's folder
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
	case k.Tools == "" || !isFile(filepath.Join(k.Tools, "start.sh")):
		return fmt.Sprintf("no kube-apiserver scripts in %q", k.Tools)
	}
	if k.Assets == "" {
		return fmt.Sprintf("no kube-apiserver binaries given (make run passes those %s/build.sh builds)", k.Tools)
	}
	for _, b := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if !isFile(filepath.Join(k.Assets, b)) {
			return fmt.Sprintf("no %s in %s", b, k.Assets)
		}
	}
	return ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

var serverRE = regexp.MustCompile(`server: (https://\S+)`)

// startKube starts etcd and kube-apiserver in a node of their own and
// writes the kubeconfig every appliance gets: the API through its VIP,
// with the admin token, the stand-ins' throw-away certificates unverified.
func (r *run) startKube() error {
	n, err := r.lab.AddNode(r.ctx)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	r.names[n] = "kube-api"
	state := filepath.Join(r.lab.Dir(), "kube")
	t0 := time.Now()
	startSh := func() (string, error) {
		return n.Run(r.ctx, "env", "KUBE_BIND="+n.IPv4.Addr().String(), "KUBE_OWNER_PID="+strconv.Itoa(os.Getpid()),
			"KUBEBUILDER_ASSETS="+r.o.Kube.Assets, filepath.Join(r.o.Kube.Tools, "start.sh"), state)
	}
	out, err := startSh()
	if err != nil && r.ctx.Err() == nil {
		// Once more, in a folder of its own: on a busy machine start.sh can
		// look at a child it launched a moment ago before the child has
		// become kube-apiserver and take it for one that exited (the
		// failure then comes with an empty log), or lose a port it picked
		// to another program before binding it.
		state = filepath.Join(r.lab.Dir(), "kube-again")
		out, err = startSh()
	}
	r.kube = &kube{node: n, state: state}
	if err != nil {
		return fmt.Errorf("start.sh: %w", err)
	}
	fields := strings.Fields(out)
	if len(fields) == 0 {
		return errors.New("start.sh printed no kubeconfig")
	}
	direct, err := os.ReadFile(fields[len(fields)-1])
	if err != nil {
		return err
	}
	m := serverRE.FindSubmatch(direct)
	tokens, err := os.ReadFile(filepath.Join(state, "tokens.csv"))
	if err != nil || m == nil {
		return fmt.Errorf("start.sh's kubeconfig or token: %v", err)
	}
	token, _, _ := strings.Cut(string(tokens), ",")
	r.kube.upstream = string(m[1])
	r.kube.kubeconfig = filepath.Join(r.lab.Dir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
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
