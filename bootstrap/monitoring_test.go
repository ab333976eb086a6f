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

	"appliance/internal/kubecrds"
	"appliance/internal/scrape"
	"appliance/platform/kubevirt/kubevirttest"
)

func TestMonitoringNamesMatchScrape(t *testing.T) {
	// The endpoint's refusal names the manifest and the objects.
	if AuthReviewerName != scrape.AuthReviewerName || MetricsReaderName != scrape.MetricsReaderName || MonitoringFile != scrape.MonitoringManifest {
		t.Errorf("bootstrap writes %s and %s in %s, scrape names %s and %s in %s", AuthReviewerName, MetricsReaderName, MonitoringFile,
			scrape.AuthReviewerName, scrape.MetricsReaderName, scrape.MonitoringManifest)
	}
	if KubeletDir+"/pki/kubelet-server-current.pem" != scrape.DefaultCertFile {
		t.Errorf("the pod mounts %s; the endpoint reads %s", KubeletDir, scrape.DefaultCertFile)
	}
}

func TestMonitoringObjects(t *testing.T) {
	cfg := mustParse(t, testConfigYAML)
	cfg.Admin.MetricsPort = 9500
	y, err := MonitoringYAML(cfg)
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(y, []byte("\n---\n"))
	var kinds []string
	for _, d := range docs {
		var m struct {
			Kind     string
			Metadata struct{ Name, Namespace string }
		}
		if err := yaml.Unmarshal(d, &m); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, m.Kind+"/"+m.Metadata.Name)
	}
	want := "Service/appliance ServiceMonitor/appliance Role/prometheus-k8s RoleBinding/prometheus-k8s " +
		"ClusterRole/appliance-metrics-reader ClusterRoleBinding/appliance-metrics-reader ClusterRole/appliance-auth-reviewer ClusterRoleBinding/appliance-auth-reviewer"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("objects:\n got %s\nwant %s", got, want)
	}
	var svc corev1.Service
	if err := yaml.UnmarshalStrict(docs[0], &svc); err != nil {
		t.Fatal(err)
	}
	if p := svc.Spec.Ports; len(p) != 1 || p[0].Port != 9500 || p[0].TargetPort.IntValue() != 9500 || !svc.Spec.PublishNotReadyAddresses || svc.Namespace != Namespace {
		t.Errorf("Service: %+v", svc)
	}
	var sm ServiceMonitor
	if err := yaml.UnmarshalStrict(docs[1], &sm); err != nil {
		t.Fatal(err)
	}
	ep := sm.Spec.Endpoints[0]
	if ep.Scheme != "https" || ep.Port != MetricsPortName || ep.TLSConfig.CAFile != KubeletServingCAFile || ep.TLSConfig.InsecureSkipVerify || ep.TLSConfig.ServerName != "" || ep.BearerTokenFile == "" {
		t.Errorf("ServiceMonitor endpoint: %+v", ep)
	}
	cfg.Admin.MetricsPort = 0
	if _, err := MonitoringYAML(cfg); err == nil {
		t.Error("port 0: no error")
	}
}

// TestMonitoringRealAPIServer: what `appliance manifests` writes for
// monitoring, read back from the files, passes a real kube-apiserver's
// validation with strict field validation, the ServiceMonitor against
// prometheus-operator's own CRD; and the RBAC does what it says, checked
// with impersonation (kubectl auth can-i): cluster monitoring's
// Prometheus may get /metrics and discover the pods, a kubelet may create
// the reviews, and nobody else gains anything.
func TestMonitoringRealAPIServer(t *testing.T) {
	s := startServer(t)
	rc, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	// prometheus-operator's own ServiceMonitor CRD, as cluster monitoring
	// installs it.
	if _, err := s.Script(nil, "kubevirt-crds/install.sh", s.Kubeconfig, kubecrds.Monitoring(t, kubecrds.ServiceMonitors)); err != nil {
		t.Fatal(err)
	}

	canI := func(as []string, args ...string) bool {
		t.Helper()
		cmd := exec.Command(filepath.Join(s.Assets, "kubectl"), append(append([]string{"--kubeconfig", s.Kubeconfig, "auth", "can-i"}, args...), as...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output() // "no" exits 1
		switch strings.TrimSpace(string(out)) {
		case "yes":
			return true
		case "no":
			return false
		}
		t.Fatalf("kubectl auth can-i %v: %v\n%s%s", args, err, out, stderr.String())
		return false
	}
	prometheus := []string{"--as=system:serviceaccount:openshift-monitoring:prometheus-k8s"}
	stranger := []string{"--as=system:serviceaccount:default:stranger"}
	kubelet := []string{"--as=system:node:master-0", "--as-group=system:nodes", "--as-group=system:authenticated"}
	checks := []struct {
		as   []string
		args []string
		want bool
	}{
		{prometheus, []string{"get", "/metrics"}, true},
		{prometheus, []string{"list", "endpoints", "-n", Namespace}, true},
		{prometheus, []string{"watch", "endpointslices.discovery.k8s.io", "-n", Namespace}, true},
		{prometheus, []string{"list", "pods", "-n", Namespace}, true},
		{prometheus, []string{"list", "services", "-n", Namespace}, true},
		{kubelet, []string{"create", "tokenreviews.authentication.k8s.io"}, true},
		{kubelet, []string{"create", "subjectaccessreviews.authorization.k8s.io"}, true},
		// Nothing more than that.
		{prometheus, []string{"list", "pods", "-n", "default"}, false},
		{prometheus, []string{"get", "/logs"}, false},
		{prometheus, []string{"create", "tokenreviews.authentication.k8s.io"}, false},
		{kubelet, []string{"get", "/metrics"}, false},
		{kubelet, []string{"create", "localsubjectaccessreviews.authorization.k8s.io", "-n", Namespace}, false},
		{stranger, []string{"get", "/metrics"}, false},
		{stranger, []string{"create", "tokenreviews.authentication.k8s.io"}, false},
	}
	// Before the manifests, none of the grants holds.
	for _, c := range checks {
		if c.want && canI(c.as, c.args...) {
			t.Fatalf("%v may %v before the manifests are applied: the check proves nothing", c.as, c.args)
		}
	}

	dir := t.TempDir()
	if _, err := WriteManifests(dir, mustParse(t, testConfigYAML), testOptions()); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{NamespaceFile, MonitoringFile} {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
			if out, err := createStrict(client, doc); err != nil {
				t.Fatalf("%s: the API server refused\n%s\n%v\n%s", f, doc, err, out)
			}
		}
	}
	// RBAC reads through an informer: allow it a moment.
	for _, c := range checks {
		deadline := time.Now().Add(10 * time.Second)
		for canI(c.as, c.args...) != c.want {
			if time.Now().After(deadline) {
				t.Errorf("can-i %v %v: want %v", c.args, c.as, c.want)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// The CRD's validation is live: a misspelt field is refused, a wrong
	// type too.
	for _, bad := range []struct{ doc, want string }{
		{`{"apiVersion":"monitoring.coreos.com/v1","kind":"ServiceMonitor","metadata":{"name":"misspelt","namespace":"` + Namespace + `"},` +
			`"spec":{"selector":{},"endpoints":[{"port":"metrics","tlsConfig":{"caFil":"/x"}}]}}`, "caFil"},
		{`{"apiVersion":"monitoring.coreos.com/v1","kind":"ServiceMonitor","metadata":{"name":"wrongtype","namespace":"` + Namespace + `"},` +
			`"spec":{"selector":{},"endpoints":[{"port":"metrics","scheme":"gopher"}]}}`, "scheme"},
	} {
		if out, err := createStrict(client, []byte(bad.doc)); err == nil || !strings.Contains(string(out), bad.want) {
			t.Errorf("a ServiceMonitor with a bad %s: %v\n%s", bad.want, err, out)
		}
	}
}

// startServer runs a bare kube-apiserver for the test (kubevirttest's
// harness, which retries a start that lost a port race) and stops it at
// the end; the test skips without the binaries (fails under CI).
func startServer(t *testing.T) *kubevirttest.Server {
	t.Helper()
	s, skip, err := kubevirttest.StartBare()
	if s != nil {
		t.Cleanup(s.Stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	if skip != "" {
		kubevirttest.Skip(t, skip)
	}
	return s
}

// applyNamespace creates NamespaceFile's Namespace as the bootstrap node
// would, strictly.
func applyNamespace(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	y, err := NamespaceYAML()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := createStrict(client, y); err != nil {
		t.Fatalf("namespace: %v\n%s", err, out)
	}
}

// createStrict POSTs one YAML document to its collection with strict
// field validation, as the manifests' objects are created.
func createStrict(client kubernetes.Interface, doc []byte) ([]byte, error) {
	body, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	var obj struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, err
	}
	plural := map[string]string{"Namespace": "namespaces", "Service": "services", "ServiceMonitor": "servicemonitors",
		"Role": "roles", "RoleBinding": "rolebindings", "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}[obj.Kind]
	if plural == "" {
		return nil, fmt.Errorf("no collection known for kind %q", obj.Kind)
	}
	path := "/apis/" + obj.APIVersion
	if obj.APIVersion == "v1" {
		path = "/api/v1"
	}
	if obj.Metadata.Namespace != "" {
		path += "/namespaces/" + obj.Metadata.Namespace
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return client.Discovery().RESTClient().Post().AbsPath(path, plural).Param("fieldValidation", "Strict").
		SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Raw()
}
