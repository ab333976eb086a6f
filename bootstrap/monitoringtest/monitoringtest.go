// Package monitoringtest gives tests prometheus-operator's own
// ServiceMonitor CRD, so that what `appliance manifests` writes for cluster
// monitoring is held to upstream's validation by a real kube-apiserver. The
// CRD comes from the prometheus-operator module through the Go module proxy
// (its zip carries the CRDs controller-gen made from its Go types), checked
// against a pinned hash; nothing of it is kept in this repository.
package monitoringtest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The release whose CRD is used: the ServiceMonitor schema of the
// prometheus-operator generation OpenShift's cluster monitoring runs.
const (
	Module    = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
	ModuleSum = "h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s="
	crdInZip  = "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"
)

// CRDName is the ServiceMonitor CRD's metadata.name.
const CRDName = "servicemonitors.monitoring.coreos.com"

// ServiceMonitorCRD returns the path of the CRD's YAML in the module cache,
// downloading the module (about 4 MB) the first time. Without the module
// proxy the test skips, and fails under CI=true.
func ServiceMonitorCRD(t testing.TB) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", Module)
	cmd.Dir = t.TempDir() // outside any module: nothing here is changed
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	var mod struct{ Dir, Sum, Error string }
	if jerr := json.Unmarshal(out, &mod); err != nil || jerr != nil || mod.Error != "" {
		msg := fmt.Sprintf("go mod download %s (for the ServiceMonitor CRD): %v %s %s", Module, err, mod.Error, out)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if mod.Sum != ModuleSum {
		t.Fatalf("%s has hash %s, want %s", Module, mod.Sum, ModuleSum)
	}
	p := filepath.Join(mod.Dir, crdInZip)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v", Module, err)
	}
	return p
}
