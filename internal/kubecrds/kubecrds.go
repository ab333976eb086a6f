package kubecrds

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// PrometheusOperator is the module whose example/prometheus-operator-crd-full
// folder holds the monitoring.coreos.com CRDs, as its releases ship them,
// and the module's hash.
const (
	PrometheusOperator    = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
	PrometheusOperatorSum = "h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s="
	prometheusOperatorDir = "example/prometheus-operator-crd-full"
)

// The CRDs' file names in that folder.
const (
	PrometheusRules = "monitoring.coreos.com_prometheusrules.yaml"
	ServiceMonitors = "monitoring.coreos.com_servicemonitors.yaml"
	PodMonitors     = "monitoring.coreos.com_podmonitors.yaml"
)

// WriteMonitoring writes the named prometheus-operator CRDs (PrometheusRules,
// ServiceMonitors, ...) into dir, from the module download cache (`go mod
// download`, a 4 MB zip the first time). A module whose hash is not
// PrometheusOperatorSum is refused.
func WriteMonitoring(dir string, names ...string) error {
	src, err := download(PrometheusOperator, PrometheusOperatorSum)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(src, prometheusOperatorDir, n))
		if err != nil {
			return fmt.Errorf("kubecrds: %s: %w", PrometheusOperator, err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// download fetches module (path@version) into the module cache and returns
// its folder, after checking its hash. It runs outside any module, so the
// project's go.mod is neither read nor changed.
func download(module, sum string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GO111MODULE=on")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	runErr := cmd.Run()
	var info struct{ Dir, Sum, Error string }
	if err := json.Unmarshal(out.Bytes(), &info); err != nil {
		return "", fmt.Errorf("kubecrds: go mod download %s: %v %v\n%s", module, runErr, err, stderr.String())
	}
	switch {
	case info.Error != "":
		return "", fmt.Errorf("kubecrds: go mod download %s: %s", module, info.Error)
	case runErr != nil:
		return "", fmt.Errorf("kubecrds: go mod download %s: %w\n%s", module, runErr, stderr.String())
	case info.Sum != sum:
		return "", fmt.Errorf("kubecrds: %s has hash %s, want %s", module, info.Sum, sum)
	}
	return info.Dir, nil
}
