package lab

import (
	"errors"
	"net/netip"
)

// KubeOptions let the day-2 worker join through a real Kubernetes API
// instead of mDNS.
type KubeOptions struct {
	// RunKubeconfig says `appliance run` takes --kubeconfig (the Node
	// member source is wired in).
	RunKubeconfig bool
	// Tools is the folder of the kube-apiserver scripts (start.sh,
	// stop.sh; ../shared/tools/kube-apiserver).
	Tools string
}

// kubeMissing says why the lab cannot use the Kubernetes API, or "" when
// it can.
func (r *run) kubeMissing() string {
	if !r.o.Kube.RunKubeconfig {
		return "appliance run has no --kubeconfig yet"
	}
	return "not wired in the lab yet"
}

func (r *run) createNode(string, netip.Addr) error {
	return errors.New("lab: no Kubernetes API")
}

func (r *run) stopKube() {}
