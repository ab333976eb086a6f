package monitoring

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"appliance/internal/kubecrds"
	"appliance/platform/kubevirt/kubevirttest"
)

// TestMonitoringManifestsAccepted hands the PrometheusRule and the
// dashboard ConfigMap, as `appliance manifests` writes them, to a real
// kube-apiserver that has prometheus-operator's own PrometheusRule CRD
// (upstream's schema), with strict field validation: both are created; a
// misspelt field and a duration Prometheus would not parse are refused.
func TestMonitoringManifestsAccepted(t *testing.T) {
	s, skip, err := kubevirttest.StartBare()
	if s != nil {
		t.Cleanup(s.Stop)
	}
	if skip != "" {
		kubevirttest.Skip(t, skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Script(nil, "kubevirt-crds/install.sh", s.Kubeconfig, kubecrds.Monitoring(t, kubecrds.PrometheusRules)); err != nil {
		t.Fatal(err)
	}
	kc, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, ns := range []string{Namespace, DashboardNamespace} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	files, err := Manifests(Options{RunbookBase: "https://docs.example.com/appliance/README.md"})
	if err != nil {
		t.Fatal(err)
	}
	post := func(path string, y []byte) (string, error) {
		body, err := yaml.YAMLToJSON(y)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := kc.CoreV1().RESTClient().Post().AbsPath(path).Param("fieldValidation", "Strict").
			Body(body).Do(ctx).Raw()
		return string(raw), err
	}
	rules := "/apis/monitoring.coreos.com/v1/namespaces/" + Namespace + "/prometheusrules"
	if raw, err := post(rules, files[0].Data); err != nil {
		t.Fatalf("the PrometheusRule was refused: %v\n%s", err, raw)
	} else if !strings.Contains(raw, "ApplianceAPIVIPNoHolder") {
		t.Errorf("created without its rules: %.300s", raw)
	}
	if raw, err := post("/api/v1/namespaces/"+DashboardNamespace+"/configmaps", files[1].Data); err != nil {
		t.Fatalf("the dashboard ConfigMap was refused: %v\n%s", err, raw)
	}
	got, err := kc.CoreV1().ConfigMaps(DashboardNamespace).List(ctx, metav1.ListOptions{LabelSelector: DashboardLabel + "=true"})
	if err != nil || len(got.Items) != 1 || got.Items[0].Data[DashboardKey] != string(DashboardJSON) {
		t.Errorf("the console's dashboard selector finds %v (%v)", got, err)
	}
	// The schema is enforced: the check can fail.
	for _, c := range []struct{ what, from, to, refusal string }{
		{"a misspelt field", "\nspec:\n", "\nspecs: {}\nspec:\n", `unknown field \"specs\"`},
		{"a duration Prometheus cannot parse", "for: 5m", "for: 5 minutes", "for in body should match"},
	} {
		bad := strings.Replace(string(files[0].Data), c.from, c.to, 1)
		bad = strings.Replace(bad, "name: "+RuleName+"\n", "name: bad\n", 1)
		if raw, err := post(rules, []byte(bad)); err == nil || !strings.Contains(raw, c.refusal) {
			t.Errorf("%s: %v, want a refusal saying %q:\n%.400s", c.what, err, c.refusal, raw)
		}
	}
}
