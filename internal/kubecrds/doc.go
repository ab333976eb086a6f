// Package kubecrds gives tests the CustomResourceDefinitions of objects the
// appliance writes without importing their Go types: prometheus-operator's
// (PrometheusRule for the alerts, ServiceMonitor for the scrape
// configuration), taken from the pinned upstream module through the Go
// module proxy and checked against its hash, so a real kube-apiserver
// validates our manifests with upstream's own schema. Monitoring writes
// them into a test's folder (skipping without the module proxy, failing
// under CI=true); installing them is ../shared/tools/kubevirt-crds/
// install.sh's job (it takes any folder of CRDs) or kubectl's.
package kubecrds
