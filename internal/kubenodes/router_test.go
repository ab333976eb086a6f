package kubenodes

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"appliance/internal/cluster"
)

// createPod creates a pod in the router namespace bound to node, in phase,
// and deletes it (at once: no kubelet confirms) when the test ends.
func createPod(t *testing.T, name, node string, labels map[string]string, phase corev1.PodPhase) {
	t.Helper()
	ctx := t.Context()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: RouterNamespace, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "router", Image: "router"}}},
	}
	created, err := kube.client.CoreV1().Pods(RouterNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		err := kube.client.CoreV1().Pods(RouterNamespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting pod %s: %v", name, err)
		}
	})
	created.Status.Phase = phase
	if _, err := kube.client.CoreV1().Pods(RouterNamespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("writing pod %s's status: %v", name, err)
	}
}

func setPhase(t *testing.T, name string, phase corev1.PodPhase) {
	t.Helper()
	p, err := kube.client.CoreV1().Pods(RouterNamespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = phase
	if _, err := kube.client.CoreV1().Pods(RouterNamespace).UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// The default router's check passes exactly while a running pod of the
// default IngressController is bound to the member's own Node (found under
// its fully qualified name), and keeps its last answer through an outage.
func TestDefaultRouterHere(t *testing.T) {
	requireAPI(t)
	sel, p := testRun(t)
	short := p + "worker-3"
	st := newState(cluster.Node{Name: short, Role: cluster.RoleWorker, IPs: addrs("192.0.2.33")})
	w := startWatcher(t, st, Options{LabelSelector: sel, Domain: "ocp4.example.com"}, nil)
	fqdn := short + ".ocp4.example.com"
	createNode(t, sel, node{name: fqdn, roles: []string{"worker"}, ips: []string{"192.0.2.33"}, ready: true})
	waitReady(t, w, 10*time.Second)
	waitFor(t, st, appear, "the Node", has(short, func(m cluster.Member) bool { return m.Source == cluster.SourceConfig }))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: RouterNamespace}}
	if _, err := kube.client.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	check := w.DefaultRouterHere(short)
	expect := func(what string, healthy bool) {
		t.Helper()
		err := check(t.Context())
		if (err == nil) != healthy {
			t.Errorf("%s: check %v, want healthy %v", what, err, healthy)
		}
	}
	expect("no router at all", false)
	// A sharded router on this node, and the default one elsewhere.
	createPod(t, p+"router-sharded", fqdn, map[string]string{DefaultRouterLabel: "sharded"}, corev1.PodRunning)
	createPod(t, p+"router-elsewhere", p+"worker-4", map[string]string{DefaultRouterLabel: "default"}, corev1.PodRunning)
	expect("only a sharded router here, the default one elsewhere", false)
	createPod(t, p+"router-here", fqdn, map[string]string{DefaultRouterLabel: "default"}, corev1.PodPending)
	expect("the default router here, still pending", false)
	setPhase(t, p+"router-here", corev1.PodRunning)
	expect("the default router running here", true)

	// The API stops answering: the last answer stands.
	dead, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	live := w.client
	w.client = dead
	w.mu.Unlock()
	if err := check(t.Context()); err != nil {
		t.Errorf("an outage changed the answer: %v", err)
	}
	w.mu.Lock()
	w.client = live
	w.mu.Unlock()
	setPhase(t, p+"router-here", corev1.PodFailed)
	expect("the default router failed", false)

	// A check that never had an answer fails, saying why.
	fresh := (&Watcher{nodeNames: map[string]string{}}).DefaultRouterHere(short)
	if err := fresh(t.Context()); err == nil || !strings.Contains(err.Error(), "not answered yet") {
		t.Errorf("no API yet: %v", err)
	}
}

func TestIsDefaultRouter(t *testing.T) {
	for _, c := range []struct {
		ns, name string
		labels   map[string]string
		want     bool
	}{
		{RouterNamespace, "router-default-7c9d8f6b5-x2k4q", nil, true},
		{RouterNamespace, "anything", map[string]string{DefaultRouterLabel: "default"}, true},
		{RouterNamespace, "router-sharded-7c9d8f6b5-x2k4q", map[string]string{DefaultRouterLabel: "sharded"}, false},
		{RouterNamespace, "router-default-x", nil, false},
		{"default", "router-default-7c9d8f6b5-x2k4q", nil, false},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: c.name, Labels: c.labels}}
		if got := IsDefaultRouter(p); got != c.want {
			t.Errorf("%s/%s %v: %v, want %v", c.ns, c.name, c.labels, got, c.want)
		}
	}
}
