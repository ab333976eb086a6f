// Package e2e holds whole-system tests: nodes brought up exactly as the
// cluster deploys them (the static pod's own command line and the node's
// files taken out of what `appliance manifests` writes), in network
// namespaces, next to a real kube-apiserver and stand-ins for what
// OpenShift runs there. It has no code outside its tests.
package e2e
