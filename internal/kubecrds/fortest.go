package kubecrds

import (
	"os"
	"testing"
)

// ServiceMonitorCRD is the metadata.name of the ServiceMonitors CRD, for
// waiting until it is Established.
const ServiceMonitorCRD = "servicemonitors.monitoring.coreos.com"

// Monitoring writes the named prometheus-operator CRDs (WriteMonitoring)
// into a folder of t and returns it, for install.sh or kubectl create -f.
// Without the module proxy the test skips, and fails under CI=true.
func Monitoring(t testing.TB, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := WriteMonitoring(dir, names...); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skipf("prometheus-operator's CRDs: %v", err)
	}
	return dir
}
