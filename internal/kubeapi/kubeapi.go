// Package kubeapi starts a real kube-apiserver and its etcd with the
// shared tools' start.sh (../shared/tools/kube-apiserver in the project's
// checkout) inside a netlab node, bound to the node's address, as the lab
// and the soak run their Kubernetes API.
package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"appliance/internal/netlab"
)

// Server is a kube-apiserver and its etcd that start.sh started.
type Server struct {
	// Node is the netlab node they run in; the lab's Close ends them.
	Node *netlab.Node
	// State is start.sh's folder (its pids, tokens.csv, logs).
	State string
	// Kubeconfig is start.sh's kubeconfig: the kube-apiserver itself,
	// as the admin.
	Kubeconfig string
	// URL is the kube-apiserver's own https://IP:port.
	URL string
	// Token is the admin's bearer token.
	Token string
}

// Missing says why tools (the folder of start.sh) and assets (the folder
// of the kube-apiserver, etcd and kubectl binaries that the tools'
// build.sh prints) cannot start a kube-apiserver, or "" when they can.
func Missing(tools, assets string) string {
	switch {
	case tools == "" || !isFile(filepath.Join(tools, "start.sh")):
		return fmt.Sprintf("no kube-apiserver scripts in %q", tools)
	case assets == "":
		return fmt.Sprintf("no kube-apiserver binaries given (what %s/build.sh prints)", tools)
	}
	for _, b := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if !isFile(filepath.Join(assets, b)) {
			return fmt.Sprintf("no %s in %s", b, assets)
		}
	}
	return ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

var serverRE = regexp.MustCompile(`server: (https://\S+)`)

// Start runs tools/start.sh in n with its state in the folder state,
// etcd and kube-apiserver bound to n's address and ending with this
// process. When start.sh fails it runs it once more, in state+"-again".
func Start(ctx context.Context, n *netlab.Node, tools, assets, state string) (*Server, error) {
	startSh := func(state string) (string, error) {
		return n.Run(ctx, "env", "KUBE_BIND="+n.IPv4.Addr().String(), "KUBE_OWNER_PID="+strconv.Itoa(os.Getpid()),
			"KUBEBUILDER_ASSETS="+assets, filepath.Join(tools, "start.sh"), state)
	}
	out, err := startSh(state)
	if err != nil && ctx.Err() == nil {
		// Once more, in a folder of its own: on a busy machine start.sh can
		// look at a child it launched a moment ago before the child has
		// become kube-apiserver and take it for one that exited (the
		// failure then comes with an empty log), or lose a port it picked
		// to another program before binding it.
		state += "-again"
		out, err = startSh(state)
	}
	if err != nil {
		return nil, fmt.Errorf("start.sh: %w", err)
	}
	fields := strings.Fields(out)
	if len(fields) == 0 {
		return nil, errors.New("start.sh printed no kubeconfig")
	}
	s := &Server{Node: n, State: state, Kubeconfig: fields[len(fields)-1]}
	kc, err := os.ReadFile(s.Kubeconfig)
	if err != nil {
		return nil, err
	}
	m := serverRE.FindSubmatch(kc)
	tokens, err := os.ReadFile(filepath.Join(state, "tokens.csv"))
	if err != nil || m == nil {
		return nil, fmt.Errorf("start.sh's kubeconfig or token: %v", err)
	}
	s.URL = string(m[1])
	s.Token, _, _ = strings.Cut(string(tokens), ",")
	return s, nil
}

// AdminKubeconfig is a kubeconfig for the admin through server (e.g.
// https://VIP:6443, the way a node reaches the API), its certificate
// unverified: the stand-ins in front of the kube-apiserver have
// throw-away ones.
func (s *Server) AdminKubeconfig(server string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: ocp4
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: %s
contexts:
- name: ocp4
  context: {cluster: ocp4, user: admin}
current-context: ocp4
`, server, s.Token)
}
