package kubecrds

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteMonitoring: the pinned module gives the PrometheusRule and
// ServiceMonitor CRDs, with their schemas; a hash that does not match is
// refused.
func TestWriteMonitoring(t *testing.T) {
	dir := t.TempDir()
	if err := WriteMonitoring(dir, PrometheusRules, ServiceMonitors); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skipf("no module proxy here: %v", err)
	}
	for n, kind := range map[string]string{PrometheusRules: "PrometheusRule", ServiceMonitors: "ServiceMonitor"} {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"kind: CustomResourceDefinition", "kind: " + kind, "openAPIV3Schema:", "name: v1"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("%s has no %q", n, want)
			}
		}
	}
	if _, err := download(PrometheusOperator, "h1:AAAA="); err == nil || !strings.Contains(err.Error(), "hash") {
		t.Errorf("a wrong hash: %v", err)
	}
}
