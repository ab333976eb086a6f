// Package monitoringtest gives tests prometheus-operator's own
// ServiceMonitor CRD, so that what `appliance manifests` writes for cluster
// monitoring is held to upstream's validation by a real kube-apiserver. The
// CRD comes through internal/kubecrds (the prometheus-operator module from
// the Go module proxy, checked against a pinned hash); nothing of it is kept
// in this repository.
package monitoringtest

import (
	"os"
	"path/filepath"
	"testing"

	"appliance/internal/kubecrds"
)

// CRDName is the ServiceMonitor CRD's metadata.name.
const CRDName = "servicemonitors.monitoring.coreos.com"

// ServiceMonitorCRD returns the path of the CRD's YAML, written into a
// folder of t. Without the module proxy the test skips, and fails under
// CI=true.
func ServiceMonitorCRD(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := kubecrds.WriteMonitoring(dir, kubecrds.ServiceMonitors); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skipf("the ServiceMonitor CRD: %v", err)
	}
	return filepath.Join(dir, kubecrds.ServiceMonitors)
}
