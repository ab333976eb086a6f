package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DefaultKubeletManifests is the kubelet's static pod folder on an
// OpenShift node, where the Machine Config Operator of an on-prem platform
// puts its own keepalived, haproxy and CoreDNS pods.
const DefaultKubeletManifests = "/etc/kubernetes/manifests"

// onPremPod is one static pod of OpenShift's on-prem stack and what of the
// appliance's it would fight over.
type onPremPod struct {
	file   string // in the kubelet's static pod folder
	claims string // what both would claim
	fix    string // the appliance.yaml switch that leaves it to the other
	runs   func(Plan) bool
}

var onPremPods = []onPremPod{
	{"keepalived.yaml", "the API and ingress VIPs and their VRIDs", "vrrp.enabled: false",
		func(p Plan) bool { return p.APIVIP || p.IngressVIP }},
	{"haproxy.yaml", "port 9445 and the VIP:6443 redirect", "lb.enabled: false",
		func(p Plan) bool { return p.LB }},
	{"coredns.yaml", "port 53 and the node's first nameserver", "dns.enabled: false",
		func(p Plan) bool { return p.DNS }},
}

// CheckOnPremStack refuses to start a plan next to OpenShift's own on-prem
// static pods (dir is the kubelet's static pod folder; "" skips the check,
// as does a folder that does not exist: no kubelet runs pods from it). Two
// VRRP speakers, two DNS servers on :53 or two load balancers on one node
// would take turns winning, which is worse than either alone; the error
// names each file, what both would claim, and the ways out.
func CheckOnPremStack(dir string, plan Plan) error {
	if dir == "" {
		return nil
	}
	var found []string
	for _, p := range onPremPods {
		if !p.runs(plan) {
			continue
		}
		path := filepath.Join(dir, p.file)
		switch _, err := os.Stat(path); {
		case err == nil:
			found = append(found, fmt.Sprintf("%s (it claims %s; or set %s)", path, p.claims, p.fix))
		case errors.Is(err, fs.ErrNotExist):
		default:
			return fmt.Errorf("run: look for OpenShift's on-prem static pods: %w", err)
		}
	}
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("run: OpenShift's own on-prem stack runs on this node: %s. "+
		"The Machine Config Operator puts it there on platforms baremetal, vsphere, openstack, ovirt and nutanix with VIPs; "+
		"install with platform none and an appliance.yaml so it does not (README: \"Next to OpenShift's on-prem stack\")",
		strings.Join(found, "; "))
}
