package bootstrap

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"appliance/internal/cluster"
)

// TestStaticPodRealAPIServer hands the manifest's bytes, as the kubelet
// reads them from disk, to a real kube-apiserver with strict field
// validation: its Pod validation and admission (the Priority plugin
// resolves system-node-critical, which only kube-system may use) accept
// the pod for every role.
func TestStaticPodRealAPIServer(t *testing.T) {
	kc := startAPIServer(t)
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := mustParse(t, testConfigYAML)
	for _, role := range []cluster.Role{cluster.RoleBootstrap, cluster.RoleMaster, cluster.RoleWorker} {
		y, err := StaticPodYAML(cfg, PodOptions{Image: testImage, Role: role, Drain: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		// The kubelet names a mirror pod after its node; one pod per role.
		y = bytes.Replace(y, []byte("name: appliance\n"), []byte("name: appliance-"+string(role)+"\n"), 1)
		body, err := yaml.YAMLToJSON(y)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		raw, err := client.CoreV1().RESTClient().Post().Namespace("kube-system").Resource("pods").
			Param("fieldValidation", "Strict").Body(body).Do(ctx).Raw()
		cancel()
		if err != nil {
			t.Fatalf("%s: the API server refused the static pod: %v\n%s", role, err, raw)
		}
		var got corev1.Pod
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.Priority == nil || *got.Spec.Priority != 2000001000 {
			t.Errorf("%s: priority %v, want system-node-critical's 2000001000", role, got.Spec.Priority)
		}
	}
	// The check can fail: a misspelt field is refused.
	bad := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"misspelt"},"spec":{"hostNetwrk":true,"containers":[{"name":"c","image":"` + testImage + `"}]}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := client.CoreV1().RESTClient().Post().Namespace("kube-system").Resource("pods").
		Param("fieldValidation", "Strict").Body(bad).Do(ctx).Raw()
	if err == nil || !strings.Contains(string(raw), "hostNetwrk") {
		t.Errorf("a misspelt field: %v\n%s", err, raw)
	}
}

// startAPIServer runs ../shared/tools/kube-apiserver/start.sh for this test
// and returns its kubeconfig; skipped without the binaries (failing under
// CI=true, where make test builds them).
func startAPIServer(t *testing.T) string {
	t.Helper()
	skip := func(msg string) {
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	tools := os.Getenv("APPLIANCE_TOOLS")
	if tools == "" {
		tools = filepath.Join("..", "..", "shared", "tools")
	}
	tools, _ = filepath.Abs(tools)
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if cache, err := os.UserCacheDir(); err == nil && assets == "" {
		assets = filepath.Join(cache, "appliance-kube", "v1.37.1", "bin")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		skip("no kube-apiserver: run KUBEBUILDER_ASSETS=$(../shared/tools/kube-apiserver/build.sh) go test ./bootstrap (make test does)")
	}
	if _, err := os.Stat(filepath.Join(tools, "kube-apiserver", "start.sh")); err != nil {
		skip(fmt.Sprintf("no %s/kube-apiserver/start.sh (set APPLIANCE_TOOLS to the shared tools folder)", tools))
	}
	state, err := os.MkdirTemp("", "bootstrap-test-api-")
	if err != nil {
		t.Fatal(err)
	}
	if state, err = filepath.EvalSymlinks(state); err != nil { // stop.sh compares this spelling
		t.Fatal(err)
	}
	run := func(name string, env ...string) (string, error) {
		cmd := exec.Command(filepath.Join(tools, "kube-apiserver", name), state)
		cmd.Env = append(append(os.Environ(), "KUBEBUILDER_ASSETS="+assets), env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("%s: %w\n%s", name, err, stderr.String())
		}
		l := lines(stdout.String())
		return strings.TrimSpace(l[len(l)-1]), nil
	}
	kc, err := run("start.sh", fmt.Sprintf("KUBE_OWNER_PID=%d", os.Getpid()))
	// stop.sh ends exactly the processes start.sh recorded, even after a
	// failed start.
	t.Cleanup(func() { _, _ = run("stop.sh") })
	if err != nil {
		t.Fatal(err)
	}
	return kc
}
