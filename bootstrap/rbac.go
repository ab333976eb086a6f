package bootstrap

import (
	"bytes"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// NodeReaderName names the ClusterRole and ClusterRoleBinding that let
// every kubelet's credentials get, list and watch all Nodes; it must stay
// kubenodes.NodeReaderName, which the refusal warning names.
const NodeReaderName = "appliance-node-reader"

// NodeReaderFile is where `appliance manifests` writes them under the
// installer's asset folder (kubenodes.NodeReaderManifest), so the
// bootstrap node's cluster-bootstrap creates them with the cluster's other
// manifests.
const NodeReaderFile = "openshift/99-appliance-node-reader.yaml"

// NodeReaderRBAC is the ClusterRole (get, list, watch nodes) and its
// binding to the group system:nodes. `appliance run` reads cluster members
// from Nodes with the kubelet's own credentials, and since Kubernetes 1.34
// the Node authorizer lets those read only their own Node
// (AuthorizeNodeWithSelectors); RBAC widens that to reading, never writing,
// the others. Node objects carry nothing secret: names, addresses, labels,
// conditions, which every pod may already learn from the API's discovery
// of its own node.
func NodeReaderRBAC() (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	meta := metav1.ObjectMeta{Name: NodeReaderName, Labels: map[string]string{"app": "appliance"}}
	role := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: meta,
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"},
		}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: meta,
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: NodeReaderName},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:nodes"}},
	}
	return role, binding
}

// NodeReaderYAML renders NodeReaderRBAC as one file of two YAML documents,
// the shape the installer's manifests folder takes.
func NodeReaderYAML() ([]byte, error) {
	role, binding := NodeReaderRBAC()
	var b bytes.Buffer
	for i, obj := range []any{role, binding} {
		y, err := yaml.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("node reader RBAC: %w", err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.Bytes(), nil
}
