package bootstrap

import (
	"bytes"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"appliance/bootstrap/monitoring"
	"appliance/internal/cluster"
)

// Namespace is where the static pods' mirror pods appear (the kubelet
// creates them once it exists) and where cluster monitoring finds them; the
// alerts' PrometheusRule is there too, read because the namespace carries
// ClusterMonitoringLabel.
const Namespace = monitoring.Namespace

// NamespaceFile and MonitoringFile are where `appliance manifests` writes
// the Namespace and what cluster monitoring needs (Service, ServiceMonitor,
// RBAC) under the installer's asset folder.
const (
	NamespaceFile  = "openshift/99-appliance-namespace.yaml"
	MonitoringFile = "openshift/99-appliance-monitoring.yaml"
)

// Names of the monitoring objects. AuthReviewerName and MetricsReaderName
// must stay internal/scrape's, which the endpoint's refusal names.
const (
	// MetricsServiceName is the Service selecting the mirror pods, and the
	// ServiceMonitor reading it: the job label prometheus-operator gives
	// its targets, which the alerts read as up{job="appliance"}.
	MetricsServiceName = monitoring.Job
	// MetricsPortName is the Service port the ServiceMonitor scrapes, and
	// the container port of the static pod.
	MetricsPortName = "metrics"
	// AuthReviewerName: kubelets' credentials may create TokenReviews and
	// SubjectAccessReviews.
	AuthReviewerName = "appliance-auth-reviewer"
	// MetricsReaderName: cluster monitoring's Prometheus may get /metrics.
	MetricsReaderName = "appliance-metrics-reader"
	// PrometheusRoleName: cluster monitoring's Prometheus may discover the
	// Service's endpoints and pods in Namespace (the name OpenShift's own
	// components give this Role).
	PrometheusRoleName = "prometheus-k8s"
)

// Cluster monitoring's Prometheus, and what its pods mount.
const (
	// PrometheusNamespace and PrometheusServiceAccount are the platform
	// Prometheus' identity (prometheus-k8s in openshift-monitoring).
	PrometheusNamespace      = "openshift-monitoring"
	PrometheusServiceAccount = "prometheus-k8s"
	// KubeletServingCAFile is the kubelet-serving CA bundle as
	// cluster-monitoring-operator mounts it into prometheus-k8s (the
	// ConfigMap kubelet-serving-ca-bundle), with which it verifies the
	// kubelet and CRI-O's metrics proxy, both served with the kubelet's
	// serving certificate as the appliance's endpoint is.
	KubeletServingCAFile = "/etc/prometheus/configmaps/kubelet-serving-ca-bundle/ca-bundle.crt"
	// PrometheusTokenFile is the service account token in every
	// Prometheus pod, sent as the bearer token.
	PrometheusTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
)

// ClusterMonitoringLabel on a namespace makes cluster monitoring's
// Prometheus read its ServiceMonitors.
const ClusterMonitoringLabel = "openshift.io/cluster-monitoring"

// appLabels select the appliance's pods; every object carries them.
func appLabels() map[string]string { return map[string]string{"app": "appliance"} }

// NamespaceObject is Namespace as OpenShift's own infrastructure
// namespaces are made (openshift-kni-infra, whose keepalived, haproxy and
// coredns the appliance replaces): watched by cluster monitoring; pod
// security "privileged", since the mirror pods of a host-network pod with
// NET_ADMIN and host paths are refused at any other level (the static pod
// would run, but no mirror pod would be there to scrape); the security
// label syncer kept off those labels; and no project node selector, which
// a mirror pod could never satisfy.
func NamespaceObject() *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        Namespace,
			Annotations: map[string]string{"openshift.io/node-selector": ""},
			Labels: map[string]string{
				"app":                                            "appliance",
				ClusterMonitoringLabel:                           "true",
				"openshift.io/run-level":                         "",
				"pod-security.kubernetes.io/enforce":             "privileged",
				"pod-security.kubernetes.io/audit":               "privileged",
				"pod-security.kubernetes.io/warn":                "privileged",
				"security.openshift.io/scc.podSecurityLabelSync": "false",
			},
		},
	}
}

// ServiceMonitor is monitoring.coreos.com/v1 ServiceMonitor with the
// fields this package writes (the module has no Go type for it; the tests
// hold it to prometheus-operator's own CRD with strict field validation).
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ServiceMonitorSpec `json:"spec"`
}

// ServiceMonitorSpec is a ServiceMonitor's spec.
type ServiceMonitorSpec struct {
	Selector          metav1.LabelSelector `json:"selector"`
	NamespaceSelector NamespaceSelector    `json:"namespaceSelector"`
	Endpoints         []MonitorEndpoint    `json:"endpoints"`
}

// NamespaceSelector names the namespaces a ServiceMonitor looks in.
type NamespaceSelector struct {
	MatchNames []string `json:"matchNames"`
}

// MonitorEndpoint is one scraped port of the Service.
type MonitorEndpoint struct {
	Port            string          `json:"port"`
	Scheme          string          `json:"scheme"`
	Path            string          `json:"path"`
	Interval        string          `json:"interval"`
	HonorLabels     bool            `json:"honorLabels,omitempty"`
	BearerTokenFile string          `json:"bearerTokenFile"`
	TLSConfig       MonitorTLS      `json:"tlsConfig"`
	Relabelings     []RelabelConfig `json:"relabelings,omitempty"`
}

// MonitorTLS is how Prometheus verifies the endpoint.
type MonitorTLS struct {
	CAFile string `json:"caFile"`
	// ServerName stays empty: Prometheus then verifies the target's own
	// address, the node IP that the kubelet's serving certificate names.
	// One name for every node could match none but one.
	ServerName         string `json:"serverName,omitempty"`
	InsecureSkipVerify bool   `json:"insecureSkipVerify"`
}

// RelabelConfig is one target relabeling.
type RelabelConfig struct {
	Action       string   `json:"action"`
	SourceLabels []string `json:"sourceLabels"`
	TargetLabel  string   `json:"targetLabel"`
}

// MonitoringObjects are what cluster monitoring needs to scrape every
// node's secure endpoint on cfg's admin.metricsPort, in the order they are
// created:
//
//   - the Service appliance: headless, selecting the mirror pods and
//     publishing not-ready addresses (a master's appliance is not Ready
//     exactly when its LB has no healthy backend, when its metrics matter
//     most);
//   - the ServiceMonitor appliance: HTTPS with Prometheus' own service
//     account token, verifying the node's certificate with the
//     kubelet-serving CA, the node name as the label node;
//   - the Role and RoleBinding prometheus-k8s: Prometheus may discover the
//     Service's endpoints and pods here;
//   - the ClusterRole and ClusterRoleBinding appliance-metrics-reader:
//     Prometheus may get /metrics, which the endpoint asks the API in a
//     SubjectAccessReview;
//   - the ClusterRole and ClusterRoleBinding appliance-auth-reviewer: the
//     kubelets' credentials (group system:nodes), which the endpoint uses,
//     may create TokenReviews and SubjectAccessReviews. OpenShift's Node
//     authorizer grants a kubelet these two already (its node rules, for
//     the kubelet's own delegated authentication); the grant says so where
//     RBAC alone decides, and reads the same either way.
func MonitoringObjects(cfg *cluster.Config) []any {
	port := int32(cfg.Admin.MetricsPort)
	meta := func(name, ns string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: appLabels()}
	}
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: meta(MetricsServiceName, Namespace),
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 appLabels(),
			PublishNotReadyAddresses: true,
			Ports: []corev1.ServicePort{{
				Name: MetricsPortName, Protocol: corev1.ProtocolTCP,
				Port: port, TargetPort: intstr.FromInt32(port),
			}},
		},
	}
	sm := &ServiceMonitor{
		TypeMeta:   metav1.TypeMeta{APIVersion: "monitoring.coreos.com/v1", Kind: "ServiceMonitor"},
		ObjectMeta: meta(MetricsServiceName, Namespace),
		Spec: ServiceMonitorSpec{
			Selector:          metav1.LabelSelector{MatchLabels: appLabels()},
			NamespaceSelector: NamespaceSelector{MatchNames: []string{Namespace}},
			Endpoints: []MonitorEndpoint{{
				Port: MetricsPortName, Scheme: "https", Path: "/metrics", Interval: "30s",
				// appliance run labels every series node=<its name>; honoured,
				// that stays the one node label (not exported_node beside the
				// target's), while the relabeling below names the node of up,
				// which the appliance cannot label when its scrape fails.
				HonorLabels:     true,
				BearerTokenFile: PrometheusTokenFile,
				TLSConfig:       MonitorTLS{CAFile: KubeletServingCAFile},
				Relabelings: []RelabelConfig{{
					Action: "replace", SourceLabels: []string{"__meta_kubernetes_pod_node_name"}, TargetLabel: "node",
				}},
			}},
		},
	}
	prometheus := rbacv1.Subject{Kind: "ServiceAccount", Namespace: PrometheusNamespace, Name: PrometheusServiceAccount}
	nodes := rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "system:nodes"}
	discover := &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: meta(PrometheusRoleName, Namespace),
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "endpoints", "pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	discoverBinding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: meta(PrometheusRoleName, Namespace),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: PrometheusRoleName},
		Subjects:   []rbacv1.Subject{prometheus},
	}
	reader, readerBinding := clusterGrant(MetricsReaderName,
		[]rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}, prometheus)
	reviewer, reviewerBinding := clusterGrant(AuthReviewerName, []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}, nodes)
	return []any{svc, sm, discover, discoverBinding, reader, readerBinding, reviewer, reviewerBinding}
}

// clusterGrant is a ClusterRole of rules and its binding to subject.
func clusterGrant(name string, rules []rbacv1.PolicyRule, subject rbacv1.Subject) (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	meta := metav1.ObjectMeta{Name: name, Labels: appLabels()}
	return &rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: meta, Rules: rules,
		}, &rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: meta,
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{subject},
		}
}

// yamlDocs renders objects as one file of YAML documents.
func yamlDocs(what string, objs ...any) ([]byte, error) {
	var b bytes.Buffer
	for i, obj := range objs {
		y, err := yaml.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.Bytes(), nil
}

// NamespaceYAML renders NamespaceObject as NamespaceFile holds it.
func NamespaceYAML() ([]byte, error) { return yamlDocs("namespace", NamespaceObject()) }

// MonitoringYAML renders MonitoringObjects as MonitoringFile holds them.
func MonitoringYAML(cfg *cluster.Config) ([]byte, error) {
	if cfg.Admin.MetricsPort <= 0 || cfg.Admin.MetricsPort > 65535 {
		return nil, fmt.Errorf("monitoring: admin.metricsPort %d is not a port (want 1..65535)", cfg.Admin.MetricsPort)
	}
	return yamlDocs("monitoring", MonitoringObjects(cfg)...)
}
