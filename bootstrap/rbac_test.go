package bootstrap

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"appliance/internal/cluster"
	"appliance/internal/kubenodes"
)

func TestNodeReaderNamesMatchKubenodes(t *testing.T) {
	// The refusal warning names the manifest and the objects.
	if NodeReaderName != kubenodes.NodeReaderName || NodeReaderFile != kubenodes.NodeReaderManifest {
		t.Errorf("bootstrap writes %s in %s, kubenodes names %s in %s",
			NodeReaderName, NodeReaderFile, kubenodes.NodeReaderName, kubenodes.NodeReaderManifest)
	}
}

// TestNodeReaderRealAPIServer: a kubelet's identity is refused the list of
// Nodes by a real kube-apiserver until the ClusterRole and binding that
// `appliance manifests` writes, read back from the file, are applied; then
// kubenodes, with that identity, sees the Nodes.
func TestNodeReaderRealAPIServer(t *testing.T) {
	kc := startAPIServer(t)
	admin, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := ac.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-reader-peer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The kubelet of another node, as the Node authorizer sees it.
	nodeUser := "system:node:node-reader-self"
	asNode := *admin
	asNode.Impersonate.UserName = nodeUser
	asNode.Impersonate.Groups = []string{"system:nodes", "system:authenticated"}
	nc, err := kubernetes.NewForConfig(&asNode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a node's identity listing Nodes without the grant: %v, want forbidden", err)
	}

	dir := t.TempDir()
	if _, err := WriteManifests(dir, mustParse(t, testConfigYAML), testOptions()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, NodeReaderFile))
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(raw, []byte("\n---\n"))
	if len(docs) != 2 {
		t.Fatalf("%s: %d documents, want a ClusterRole and a ClusterRoleBinding:\n%s", NodeReaderFile, len(docs), raw)
	}
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	if err := yaml.UnmarshalStrict(docs[0], &role); err != nil || role.Kind != "ClusterRole" {
		t.Fatalf("first document: %v\n%s", err, docs[0])
	}
	if err := yaml.UnmarshalStrict(docs[1], &binding); err != nil || binding.Kind != "ClusterRoleBinding" {
		t.Fatalf("second document: %v\n%s", err, docs[1])
	}
	strict := metav1.CreateOptions{FieldValidation: "Strict"}
	if _, err := ac.RbacV1().ClusterRoles().Create(ctx, &role, strict); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.RbacV1().ClusterRoleBindings().Create(ctx, &binding, strict); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ac.RbacV1().ClusterRoleBindings().Delete(context.Background(), NodeReaderName, metav1.DeleteOptions{})
		_ = ac.RbacV1().ClusterRoles().Delete(context.Background(), NodeReaderName, metav1.DeleteOptions{})
	})
	// RBAC reads through an informer: allow it a moment.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := nc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s applied, a node's identity still cannot list Nodes: %v", NodeReaderFile, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// kubenodes with a kubeconfig for that identity sees the peer.
	kcfg, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range kcfg.AuthInfos {
		u.Impersonate, u.ImpersonateGroups = nodeUser, asNode.Impersonate.Groups
	}
	nodeKC := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kcfg, nodeKC); err != nil {
		t.Fatal(err)
	}
	st := cluster.NewState(&cluster.Config{})
	w, err := kubenodes.New(st, kubenodes.Options{Kubeconfig: nodeKC}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(15 * time.Second); w.Ready() != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("kubenodes as %s: %v", nodeUser, w.Ready())
		}
	}
	if _, ok := st.Snapshot().Member("node-reader-peer"); !ok {
		t.Errorf("kubenodes as %s listed, but node-reader-peer is no member", nodeUser)
	}
}
