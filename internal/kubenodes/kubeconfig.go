package kubenodes

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultLocalServer is where a node's own kube-apiserver listens, for
// Options.LocalServer.
const DefaultLocalServer = "https://localhost:6443"

// NodeReaderName names the ClusterRole (get, list, watch nodes) and the
// ClusterRoleBinding to the group system:nodes that let a kubelet's own
// credentials list every Node, which the Node authorizer refuses them since
// Kubernetes 1.34.
const NodeReaderName = "appliance-node-reader"

// NodeReaderManifest is where `appliance manifests` writes them, under the
// installer's asset folder, so the bootstrap node applies them with the
// cluster's other manifests.
const NodeReaderManifest = "openshift/99-appliance-node-reader.yaml"

// kubeletKubeconfigs are the kubelet's own kubeconfig files, in the order
// Kubeconfig tries them: OpenShift's (RHCOS), then kubeadm's.
var kubeletKubeconfigs = []string{"/var/lib/kubelet/kubeconfig", "/etc/kubernetes/kubelet.conf"}

// Kubeconfig picks the kubeconfig to read: explicit when it is not empty
// (the --kubeconfig flag), else the node's kubelet kubeconfig when one
// exists, else the first one whose folder exists (a kubelet writes its
// kubeconfig only after its TLS bootstrap, so the Watcher waits for it),
// else "" (no kubelet here: the caller runs without this member source,
// and mDNS and the config stay the only ones).
func Kubeconfig(explicit string) string {
	return pickKubeconfig(explicit, kubeletKubeconfigs)
}

func pickKubeconfig(explicit string, candidates []string) string {
	if explicit != "" {
		return explicit
	}
	for _, p := range candidates {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	for _, p := range candidates {
		if st, err := os.Stat(filepath.Dir(p)); err == nil && st.IsDir() {
			return p
		}
	}
	return ""
}

// RESTConfig is the client configuration of the kubeconfig at path, with
// its server replaced by local when local is set, exactly as the Watcher
// reads it: other clients of the node's kubelet credentials (the secure
// metrics endpoint's TokenReviews and SubjectAccessReviews) reach the API
// the same way, through the node's own apiserver on the control plane.
func RESTConfig(path, local string) (*rest.Config, error) { return restConfig(path, local) }

// restConfig loads path and, when local is set, replaces its server URL
// with local. The TLS server name stays the kubeconfig's host, so the
// local apiserver is asked (SNI) for the same certificate the kubeconfig's
// CA vouches for behind the VIP, and that CA still verifies it.
func restConfig(path, local string) (*rest.Config, error) {
	if path == "" {
		return nil, errors.New("kubenodes: no kubeconfig given")
	}
	// Only the explicit file: never $KUBECONFIG or ~/.kube/config, which
	// may point at some other cluster.
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubenodes: kubeconfig %s: %w", path, err)
	}
	// A watch is silent on the client's side. When the VIP it runs through
	// moves (its holder died), nothing tells the client until it sends:
	// client-go's own HTTP/2 ping notices after about 45 s. Keepalive
	// probes after 5 s of silence reach the new holder, which resets the
	// connection it does not know, and the watch is opened again at once.
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: 10 * time.Second, KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 3}}
		cfg.Dial = d.DialContext
	}
	if local == "" {
		return cfg, nil
	}
	lu, err := url.Parse(local)
	if err != nil || lu.Scheme == "" || lu.Host == "" {
		return nil, fmt.Errorf("kubenodes: local server %q is not a URL like %s", local, DefaultLocalServer)
	}
	orig, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("kubenodes: kubeconfig %s: server %q: %w", path, cfg.Host, err)
	}
	if cfg.TLSClientConfig.ServerName == "" && !cfg.Insecure && orig.Hostname() != "" {
		cfg.TLSClientConfig.ServerName = orig.Hostname()
	}
	cfg.Host = local
	return cfg, nil
}
