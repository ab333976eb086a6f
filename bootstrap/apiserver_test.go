package bootstrap

import (
	"bytes"
	"context"
	"encoding/json"
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
// validation, as the kubelet creates the mirror pod: in the namespace
// `appliance manifests` writes, its Pod validation and admission (the
// Priority plugin resolves system-node-critical) accept the pod for every
// role; before that namespace exists, the mirror pod cannot be made.
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
	post := func(body []byte) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return client.CoreV1().RESTClient().Post().Namespace(Namespace).Resource("pods").
			Param("fieldValidation", "Strict").Body(body).Do(ctx).Raw()
	}
	first, err := StaticPodYAML(cfg, PodOptions{Image: testImage, Role: cluster.RoleMaster, Drain: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	firstJSON, err := yaml.YAMLToJSON(first)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err := post(firstJSON); err == nil || !strings.Contains(string(raw), "not found") {
		t.Fatalf("a mirror pod before the namespace exists: %v\n%s", err, raw)
	}
	applyNamespace(t, client)
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
		raw, err := post(body)
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
		// hostNetwork: the API defaults the host port to the container's.
		if p := got.Spec.Containers[0].Ports; len(p) != 1 || p[0].Name != MetricsPortName || p[0].ContainerPort != int32(cfg.Admin.MetricsPort) || p[0].HostPort != p[0].ContainerPort {
			t.Errorf("%s: ports %+v, want %s on %d", role, p, MetricsPortName, cfg.Admin.MetricsPort)
		}
	}
	// The check can fail: a misspelt field is refused.
	bad := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"misspelt"},"spec":{"hostNetwrk":true,"containers":[{"name":"c","image":"` + testImage + `"}]}}`)
	raw, err := post(bad)
	if err == nil || !strings.Contains(string(raw), "hostNetwrk") {
		t.Errorf("a misspelt field: %v\n%s", err, raw)
	}
}

// startAPIServer runs a real kube-apiserver for the test through the
// project's shared harness (which retries a start that lost a port race
// with another package's server) and returns its kubeconfig.
func startAPIServer(t *testing.T) string {
	t.Helper()
	return startServer(t).Kubeconfig
}
