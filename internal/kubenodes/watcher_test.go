package kubenodes

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"appliance/internal/cluster"
	"appliance/internal/service"
)

var _ service.Service = (*Watcher)(nil)

// appear is the loose bound for a change in the API to reach the State
// (the goal is well under a second).
const appear = 5 * time.Second

const testLabel = "kubenodes.appliance.test/run"

var testSeq atomic.Int64

// testRun is a label value of the calling test's own, so that its watcher
// sees its Nodes only, and a name prefix for them.
func testRun(t *testing.T) (selector, prefix string) {
	id := fmt.Sprintf("t%d", testSeq.Add(1))
	return testLabel + "=" + id, id + "-"
}

func newState(nodes ...cluster.Node) *cluster.State {
	return cluster.NewState(&cluster.Config{Nodes: nodes})
}

// startWatcher runs a Watcher until the test ends, and fails the test if
// Run does not return promptly once its context is cancelled.
func startWatcher(t *testing.T, st *cluster.State, opts Options, log *slog.Logger) *Watcher {
	t.Helper()
	if opts.Kubeconfig == "" {
		opts.Kubeconfig = kube.kubeconfig
	}
	w, err := New(st, opts, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Run has not returned 5 s after its context ended")
		}
	})
	return w
}

// testLog logs JSON at debug level into a buffer the test reads.
func testLog() (*slog.Logger, *syncBuffer) {
	var b syncBuffer
	return slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})), &b
}

// logLines are the buffer's records whose msg starts with prefix.
func logLines(t *testing.T, b *syncBuffer, prefix string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("a log line is not JSON: %q", l)
		}
		if m, _ := rec["msg"].(string); strings.HasPrefix(m, prefix) {
			out = append(out, rec)
		}
	}
	return out
}

type node struct {
	name   string
	roles  []string // node-role.kubernetes.io/<role> labels
	ips    []string // InternalIPs
	ready  bool
	extras []corev1.NodeAddress
}

// createNode creates a Node labelled with selector, its addresses and
// Ready condition written through the status subresource as a kubelet
// would, and deletes it when the test ends.
func createNode(t *testing.T, selector string, n node) {
	t.Helper()
	k, v, _ := strings.Cut(selector, "=")
	labels := map[string]string{k: v}
	for _, r := range n.roles {
		labels["node-role.kubernetes.io/"+r] = ""
	}
	obj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: labels}}
	ctx := t.Context()
	created, err := kube.client.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Node %s: %v", n.name, err)
	}
	t.Cleanup(func() {
		err := kube.client.CoreV1().Nodes().Delete(context.Background(), n.name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting Node %s: %v", n.name, err)
		}
	})
	created.Status = nodeStatus(n)
	if _, err := kube.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("writing Node %s's status: %v", n.name, err)
	}
}

func nodeStatus(n node) corev1.NodeStatus {
	var s corev1.NodeStatus
	for _, ip := range n.ips {
		s.Addresses = append(s.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	s.Addresses = append(s.Addresses, n.extras...)
	ready := corev1.ConditionFalse
	if n.ready {
		ready = corev1.ConditionTrue
	}
	now := metav1.Now()
	s.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastHeartbeatTime: now, LastTransitionTime: now}}
	return s
}

// updateStatus rewrites a Node's addresses and readiness.
func updateStatus(t *testing.T, n node) {
	t.Helper()
	cur, err := kube.client.CoreV1().Nodes().Get(t.Context(), n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status = nodeStatus(n)
	if _, err := kube.client.CoreV1().Nodes().UpdateStatus(t.Context(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("writing Node %s's status: %v", n.name, err)
	}
}

func patchLabels(t *testing.T, name string, labels map[string]any) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if _, err := kube.client.CoreV1().Nodes().Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("labelling Node %s: %v", name, err)
	}
}

func deleteNode(t *testing.T, name string) {
	t.Helper()
	if err := kube.client.CoreV1().Nodes().Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting Node %s: %v", name, err)
	}
}

// waitFor waits up to within for the State to satisfy cond, and fails the
// test with what, and the last snapshot, otherwise.
func waitFor(t *testing.T, st *cluster.State, within time.Duration, what string, cond func(*cluster.Snapshot) bool) time.Duration {
	t.Helper()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	var last *cluster.Snapshot
	for snap := range st.Subscribe(ctx) {
		last = snap
		if cond(snap) {
			return time.Since(t0)
		}
	}
	t.Fatalf("%s: not within %s; members: %+v", what, within, last.Members)
	return 0
}

// has is a condition: the member called name exists and passes ok.
func has(name string, ok func(cluster.Member) bool) func(*cluster.Snapshot) bool {
	return func(s *cluster.Snapshot) bool {
		m, found := s.Member(name)
		return found && (ok == nil || ok(m))
	}
}

func gone(name string) func(*cluster.Snapshot) bool {
	return func(s *cluster.Snapshot) bool { _, found := s.Member(name); return !found }
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func waitReady(t *testing.T, w *Watcher, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for w.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready within %s: %v", within, w.Ready())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func status(w *Watcher) Status { return w.Status().(Status) }

// A day-2 Node appears in the State while the watcher runs, with its role,
// both families' InternalIPs (and no other address), readiness and source.
func TestDay2NodesBecomeMembers(t *testing.T) {
	requireAPI(t)
	sel, p := testRun(t)
	st := newState()
	w := startWatcher(t, st, Options{LabelSelector: sel}, nil)
	waitReady(t, w, appear)

	master, worker, compact := p+"master-0", p+"worker-0", p+"compact-0"
	start := time.Now()
	createNode(t, sel, node{name: master, roles: []string{"control-plane"}, ips: []string{"192.0.2.10", "2001:db8::10"}, ready: true,
		extras: []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "198.51.100.10"}, {Type: corev1.NodeHostName, Address: master}}})
	waitFor(t, st, appear, "a control-plane Node", has(master, func(m cluster.Member) bool {
		return m.Role == cluster.RoleMaster && m.Source == cluster.SourceKubernetes && m.Healthy &&
			slices.Equal(m.IPs, addrs("192.0.2.10", "2001:db8::10")) && !m.LastSeen.IsZero()
	}))
	t.Logf("a Node was a complete member %s after its creation began (create, then status)", time.Since(start).Round(100*time.Microsecond))

	createNode(t, sel, node{name: worker, roles: []string{"worker"}, ips: []string{"192.0.2.20"}, ready: false})
	waitFor(t, st, appear, "a worker Node that is not ready", has(worker, func(m cluster.Member) bool {
		return m.Role == cluster.RoleWorker && m.Source == cluster.SourceKubernetes && !m.Healthy && slices.Equal(m.IPs, addrs("192.0.2.20"))
	}))
	createNode(t, sel, node{name: compact, roles: []string{"master", "worker"}, ips: []string{"2001:db8::30"}, ready: true})
	waitFor(t, st, appear, "a schedulable master", has(compact, func(m cluster.Member) bool {
		return m.Role == cluster.RoleMaster && slices.Equal(m.IPs, addrs("2001:db8::30"))
	}))

	s := status(w)
	if !s.Reachable || !s.Synced || s.Nodes != 3 || s.LastSync.IsZero() || s.Error != "" || !s.DownSince.IsZero() {
		t.Errorf("status = %+v, want reachable, synced, 3 nodes", s)
	}
	if _, err := json.Marshal(w.Status()); err != nil {
		t.Errorf("status does not marshal: %v", err)
	}
}

// Nodes that exist before the watcher starts are in the State once it is
// ready.
func TestExistingNodesListedBeforeReady(t *testing.T) {
	requireAPI(t)
	sel, p := testRun(t)
	createNode(t, sel, node{name: p + "a", roles: []string{"master"}, ips: []string{"192.0.2.1"}, ready: true})
	createNode(t, sel, node{name: p + "b", roles: []string{"worker"}, ips: []string{"192.0.2.2"}, ready: true})
	st := newState()
	w := startWatcher(t, st, Options{LabelSelector: sel}, nil)
	waitReady(t, w, appear)
	snap := st.Snapshot()
	for _, n := range []string{p + "a", p + "b"} {
		if _, ok := snap.Member(n); !ok {
			t.Errorf("ready, but %s is not a member: %+v", n, snap.Members)
		}
	}
}

// Labels, addresses and readiness follow the Node.
func TestNodeChangesFollow(t *testing.T) {
	requireAPI(t)
	sel, p := testRun(t)
	st := newState()
	startWatcher(t, st, Options{LabelSelector: sel}, nil)
	n := node{name: p + "n", roles: []string{"worker"}, ips: []string{"192.0.2.5"}, ready: true}
	createNode(t, sel, n)
	waitFor(t, st, appear, "the worker", has(n.name, func(m cluster.Member) bool { return m.Role == cluster.RoleWorker }))

	patchLabels(t, n.name, map[string]any{"node-role.kubernetes.io/control-plane": ""})
	waitFor(t, st, appear, "labelled control-plane: a master", has(n.name, func(m cluster.Member) bool { return m.Role == cluster.RoleMaster }))
	patchLabels(t, n.name, map[string]any{"node-role.kubernetes.io/control-plane": nil})
	waitFor(t, st, appear, "unlabelled: a worker again", has(n.name, func(m cluster.Member) bool { return m.Role == cluster.RoleWorker }))

	n.ready = false
	updateStatus(t, n)
	waitFor(t, st, appear, "NotReady: unhealthy", has(n.name, func(m cluster.Member) bool { return !m.Healthy }))
	n.ips, n.ready = []string{"192.0.2.6", "2001:db8::6"}, true
	updateStatus(t, n)
	waitFor(t, st, appear, "new addresses, ready", has(n.name, func(m cluster.Member) bool {
		return m.Healthy && slices.Equal(m.IPs, addrs("192.0.2.6", "2001:db8::6"))
	}))
}

// A deleted Node leaves the State; the others stay.
func TestDeletedNodeLeaves(t *testing.T) {
	requireAPI(t)
	sel, p := testRun(t)
	st := newState()
	w := startWatcher(t, st, Options{LabelSelector: sel}, nil)
	createNode(t, sel, node{name: p + "a", roles: []string{"worker"}, ips: []string{"192.0.2.1"}, ready: true})
	createNode(t, sel, node{name: p + "b", roles: []string{"worker"}, ips: []string{"192.0.2.2"}, ready: true})
	waitFor(t, st, appear, "both Nodes", func(s *cluster.Snapshot) bool { return has(p+"a", nil)(s) && has(p+"b", nil)(s) })
	deleteNode(t, p+"a")
	waitFor(t, st, appear, "the deleted Node gone", gone(p+"a"))
	if _, ok := st.Snapshot().Member(p + "b"); !ok {
		t.Error("deleting one Node removed another")
	}
	if s := status(w); s.Nodes != 1 {
		t.Errorf("status counts %d nodes, want 1", s.Nodes)
	}
}

// A Node named like a configured member merges into it as the State
// defines (the configured role and addresses stay first), and deleting
// the Node leaves the configured member as configured.
func TestConfiguredMemberMerges(t *testing.T) {
	requireAPI(t)
	sel, p := testRun(t)
	name := p + "master-0"
	st := newState(cluster.Node{Name: name, Role: cluster.RoleMaster, IPs: addrs("192.0.2.10")})
	startWatcher(t, st, Options{LabelSelector: sel}, nil)
	// The Node says worker and not ready; the configuration says master.
	createNode(t, sel, node{name: name, roles: []string{"worker"}, ips: []string{"192.0.2.10", "2001:db8::10"}, ready: false})
	waitFor(t, st, appear, "the Node merged into the configured member", has(name, func(m cluster.Member) bool {
		return m.Source == cluster.SourceConfig && m.Role == cluster.RoleMaster && !m.Healthy &&
			slices.Equal(m.IPs, addrs("192.0.2.10", "2001:db8::10"))
	}))
	deleteNode(t, name)
	waitFor(t, st, appear, "the configured member as configured", has(name, func(m cluster.Member) bool {
		return m.Source == cluster.SourceConfig && m.Role == cluster.RoleMaster && m.Healthy &&
			slices.Equal(m.IPs, addrs("192.0.2.10"))
	}))
	time.Sleep(300 * time.Millisecond) // nothing later removes it
	if m, ok := st.Snapshot().Member(name); !ok || m.Source != cluster.SourceConfig {
		t.Errorf("after the Node's deletion the configured member is %+v (present %v)", m, ok)
	}
}

// With Options.Domain, a Node registered under its fully qualified name
// stands for the configured member with the short one.
func TestDomainCutFromNodeNames(t *testing.T) {
	requireAPI(t)
	sel, p := testRun(t)
	short := p + "master-1"
	st := newState(cluster.Node{Name: short, Role: cluster.RoleMaster, IPs: addrs("192.0.2.11")})
	startWatcher(t, st, Options{LabelSelector: sel, Domain: "OCP4.example.com."}, nil)
	createNode(t, sel, node{name: short + ".ocp4.example.com", roles: []string{"master"}, ips: []string{"192.0.2.11", "2001:db8::11"}, ready: true})
	createNode(t, sel, node{name: p + "worker-1.example.org", roles: []string{"worker"}, ips: []string{"192.0.2.21"}, ready: true})
	waitFor(t, st, appear, "the fully qualified Node merged into the short member", has(short, func(m cluster.Member) bool {
		return m.Source == cluster.SourceConfig && slices.Equal(m.IPs, addrs("192.0.2.11", "2001:db8::11"))
	}))
	// Another domain is not cut.
	waitFor(t, st, appear, "a Node of another domain under its own name", has(p+"worker-1.example.org", nil))
	if has(short+".ocp4.example.com", nil)(st.Snapshot()) {
		t.Error("the Node is also a member under its fully qualified name")
	}
	deleteNode(t, short+".ocp4.example.com")
	waitFor(t, st, appear, "the configured member as configured", has(short, func(m cluster.Member) bool {
		return m.Source == cluster.SourceConfig && slices.Equal(m.IPs, addrs("192.0.2.11"))
	}))
}

// With the API unreachable the members stay, the outage is logged once
// (not per retry), and once it answers again the watcher catches up:
// a Node deleted meanwhile leaves, one created meanwhile joins, the rest
// stay. The local-server option is how the watcher reaches the proxy.
func TestUnreachableKeepsLastView(t *testing.T) {
	requireAPI(t)
	sel, p := testRun(t)
	px := newProxy(t, apiHostPort(t))
	log, logs := testLog()
	st := newState()
	_, port, _ := net.SplitHostPort(px.addr)
	w := startWatcher(t, st, Options{LabelSelector: sel, LocalServer: "https://localhost:" + port}, log)
	a, b, c := p+"a", p+"b", p+"c"
	createNode(t, sel, node{name: a, roles: []string{"master"}, ips: []string{"192.0.2.1"}, ready: true})
	createNode(t, sel, node{name: b, roles: []string{"worker"}, ips: []string{"192.0.2.2"}, ready: true})
	waitFor(t, st, appear, "both Nodes", func(s *cluster.Snapshot) bool { return has(a, nil)(s) && has(b, nil)(s) })

	px.cut()
	waitStatus(t, w, 30*time.Second, "unreachable", func(s Status) bool { return !s.Reachable && !s.DownSince.IsZero() && s.Error != "" })
	deleteNode(t, a)
	createNode(t, sel, node{name: c, roles: []string{"worker"}, ips: []string{"192.0.2.3"}, ready: true})
	time.Sleep(3 * time.Second) // several retries
	snap := st.Snapshot()
	if !has(a, nil)(snap) || !has(b, nil)(snap) || has(c, nil)(snap) {
		t.Errorf("while the API is unreachable the view changed: %+v", snap.Members)
	}
	if w.Ready() != nil {
		t.Errorf("not ready during an outage after a sync: %v", w.Ready())
	}

	px.resume(t)
	waitFor(t, st, 40*time.Second, "the view caught up", func(s *cluster.Snapshot) bool { return gone(a)(s) && has(b, nil)(s) && has(c, nil)(s) })
	waitStatus(t, w, appear, "reachable again", func(s Status) bool { return s.Reachable && s.DownSince.IsZero() && s.Error == "" })
	checkOutageLoggedOnce(t, logs)
}

// A killed API server leaves the view as it was; restarted on the same
// etcd, it is read again without restarting the watcher.
func TestAPIServerRestart(t *testing.T) {
	requireAPI(t)
	sel, p := testRun(t)
	log, logs := testLog()
	st := newState()
	w := startWatcher(t, st, Options{LabelSelector: sel}, log)
	a, b := p+"a", p+"b"
	createNode(t, sel, node{name: a, roles: []string{"master"}, ips: []string{"192.0.2.1"}, ready: true})
	waitFor(t, st, appear, "the Node", has(a, nil))

	args := stopAPIServer(t)
	restarted := false
	t.Cleanup(func() {
		if !restarted { // the other tests need it
			restartAPIServer(t, args)
		}
	})
	waitStatus(t, w, 30*time.Second, "unreachable", func(s Status) bool { return !s.Reachable })
	time.Sleep(2 * time.Second)
	if m, ok := st.Snapshot().Member(a); !ok || m.Source != cluster.SourceKubernetes {
		t.Errorf("with the API server stopped the member is %+v (present %v)", m, ok)
	}

	restartAPIServer(t, args)
	restarted = true
	createNode(t, sel, node{name: b, roles: []string{"worker"}, ips: []string{"192.0.2.2"}, ready: true})
	waitFor(t, st, 40*time.Second, "a Node created after the restart", has(b, nil))
	if !has(a, nil)(st.Snapshot()) {
		t.Error("the restart dropped a Node that still exists")
	}
	waitStatus(t, w, appear, "reachable again", func(s Status) bool { return s.Reachable })
	checkOutageLoggedOnce(t, logs)
}

// A Node deleted while the API was unreachable, with the server restarted
// meanwhile (its watch cache starts afresh, so the watcher cannot resume
// its watch and lists again), leaves on that relist; the others stay.
func TestRelistRemovesOnlyDeleted(t *testing.T) {
	requireAPI(t)
	sel, p := testRun(t)
	px := newProxy(t, apiHostPort(t))
	log, logs := testLog()
	st := newState(cluster.Node{Name: p + "cfg", Role: cluster.RoleMaster, IPs: addrs("192.0.2.9")})
	_, port, _ := net.SplitHostPort(px.addr)
	w := startWatcher(t, st, Options{LabelSelector: sel, LocalServer: "https://127.0.0.1:" + port}, log)
	a, b := p+"a", p+"b"
	createNode(t, sel, node{name: a, roles: []string{"worker"}, ips: []string{"192.0.2.1"}, ready: true})
	createNode(t, sel, node{name: b, roles: []string{"worker"}, ips: []string{"192.0.2.2"}, ready: true})
	waitFor(t, st, appear, "both Nodes", func(s *cluster.Snapshot) bool { return has(a, nil)(s) && has(b, nil)(s) })
	lists := len(logLines(t, logs, "listing Nodes"))

	px.cut()
	waitStatus(t, w, 30*time.Second, "unreachable", func(s Status) bool { return !s.Reachable })
	deleteNode(t, a)
	restartAPIServer(t, stopAPIServer(t))
	px.resume(t)
	waitFor(t, st, 40*time.Second, "the deleted Node gone", gone(a))
	snap := st.Snapshot()
	if !has(b, nil)(snap) || !has(p+"cfg", func(m cluster.Member) bool { return m.Source == cluster.SourceConfig })(snap) {
		t.Errorf("the relist removed more than the deleted Node: %+v", snap.Members)
	}
	// The point of this test is the relist's deletion, not a resumed watch's.
	if n := len(logLines(t, logs, "listing Nodes")); n <= lists {
		t.Errorf("no relist logged (%d lists before the outage, %d after): the watch resumed instead", lists, n)
	}
	checkOutageLoggedOnce(t, logs)
}

// Unreachable from the start: not ready, the outage logged once, and Run
// still returns promptly when its context ends. Needs no API server.
func TestUnreachableFromStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // refused from now on
	log, logs := testLog()
	w, err := New(newState(), Options{Kubeconfig: writeKubeconfig(t, "https://api-int.example.com:6443"), LocalServer: "https://" + addr}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	waitStatus(t, w, 10*time.Second, "an error", func(s Status) bool { return s.Error != "" })
	time.Sleep(3 * time.Second) // several retries
	if err := w.Ready(); err == nil || !strings.Contains(err.Error(), "not listed yet") {
		t.Errorf("Ready = %v, want not listed yet", err)
	}
	if s := status(w); s.Reachable || s.Synced || s.Server != "https://"+addr {
		t.Errorf("status = %+v", s)
	}
	t0 := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		t.Logf("Run returned %s after its context ended", time.Since(t0).Round(time.Millisecond))
	case <-time.After(2 * time.Second): // not the retry's backoff
		t.Fatal("Run has not returned 2 s after its context ended")
	}
	if n := len(logLines(t, logs, "Kubernetes API unreachable")); n != 1 {
		t.Errorf("the outage was logged %d times, want once:\n%s", n, logs.String())
	}
	if l := logLines(t, logs, ""); len(errorsIn(l)) > 0 {
		t.Errorf("errors logged: %v", errorsIn(l))
	}
}

// klog, client-go's logger, writes through the slog handler of the first
// New (TestMain's), as JSON; a later New does not take it over.
func TestClientLogsGoThroughSlog(t *testing.T) {
	other, otherLogs := testLog()
	if _, err := New(newState(), Options{Kubeconfig: writeKubeconfig(t, "https://192.0.2.1:6443")}, other); err != nil {
		t.Fatal(err)
	}
	probe := fmt.Sprintf("kubenodes klog probe %d", testSeq.Add(1)) // -count=N runs it again
	klog.InfoS(probe, "probe", 1)
	klog.Flush()
	recs := logLines(t, &clientLogs, probe)
	if len(recs) != 1 || recs[0]["component"] != "client-go" {
		t.Errorf("klog's probe in the routed log: %v\nwhole log:\n%s", recs, clientLogs.String())
	}
	if strings.Contains(otherLogs.String(), "klog probe") {
		t.Error("a second New took klog over")
	}
}

func waitStatus(t *testing.T, w *Watcher, within time.Duration, what string, cond func(Status) bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond(status(w)) {
		if time.Now().After(deadline) {
			t.Fatalf("status not %s within %s: %+v", what, within, status(w))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func checkOutageLoggedOnce(t *testing.T, logs *syncBuffer) {
	t.Helper()
	down, up := logLines(t, logs, "Kubernetes API unreachable"), logLines(t, logs, "Kubernetes API reachable again")
	if len(down) != 1 || len(up) != 1 {
		t.Errorf("an outage logged %d times as begun and %d as ended, want once each:\n%s", len(down), len(up), logs.String())
	}
	if e := errorsIn(logLines(t, logs, "")); len(e) > 0 {
		t.Errorf("errors logged: %v", e)
	}
}

func errorsIn(recs []map[string]any) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["level"] == "ERROR" {
			out = append(out, r)
		}
	}
	return out
}

// apiHostPort is the shared server's host:port.
func apiHostPort(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(kube.cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// Credentials that may not list Nodes (a kubelet's, which RBAC alone does
// not grant that) are reported as refused, once, not as an outage.
func TestRefusedCredentials(t *testing.T) {
	requireAPI(t)
	cfg, err := clientcmd.LoadFromFile(kube.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range cfg.AuthInfos {
		u.Impersonate, u.ImpersonateGroups = "system:node:kubenodes-test", []string{"system:nodes", "system:authenticated"}
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	log, logs := testLog()
	w := startWatcher(t, newState(), Options{Kubeconfig: kc}, log)
	waitStatus(t, w, 10*time.Second, "refused", func(s Status) bool { return s.Reachable && strings.Contains(s.Error, "forbidden") })
	time.Sleep(2 * time.Second) // retries
	if err := w.Ready(); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("Ready = %v, want the refusal", err)
	}
	refused, down := logLines(t, logs, "Kubernetes API refuses"), logLines(t, logs, "Kubernetes API unreachable")
	if len(refused) != 1 || len(down) != 0 {
		t.Errorf("logged the refusal %d times and an outage %d times, want once and never:\n%s", len(refused), len(down), logs.String())
	}
	// The warning names who is refused, and what grants it.
	for _, want := range []string{"system:node:kubenodes-test", NodeReaderManifest, NodeReaderName, "list"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the refusal's log does not name %q:\n%s", want, logs.String())
		}
	}
}

// A Node deleted while the Watcher was not running leaves the State when
// it runs again; the others stay.
func TestRunAgainPrunes(t *testing.T) {
	requireAPI(t)
	sel, p := testRun(t)
	st := newState()
	w, err := New(st, Options{Kubeconfig: kube.kubeconfig, LabelSelector: sel, Domain: "example.com"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	run := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		return func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run has not returned 5 s after its context ended")
			}
		}
	}
	a, b := p+"a", p+"b"
	createNode(t, sel, node{name: a + ".example.com", roles: []string{"worker"}, ips: []string{"192.0.2.1"}, ready: true})
	createNode(t, sel, node{name: b, roles: []string{"worker"}, ips: []string{"192.0.2.2"}, ready: true})
	stop := run()
	waitFor(t, st, appear, "both Nodes", func(s *cluster.Snapshot) bool { return has(a, nil)(s) && has(b, nil)(s) })
	stop()
	deleteNode(t, b)
	time.Sleep(200 * time.Millisecond)
	if !has(b, nil)(st.Snapshot()) {
		t.Fatal("a stopped Watcher changed the State")
	}
	stop = run()
	defer stop()
	waitReady(t, w, appear)
	waitFor(t, st, appear, "the Node deleted meanwhile gone", gone(b))
	snap := st.Snapshot()
	if !has(a, nil)(snap) || has(b, nil)(snap) {
		t.Errorf("after running again: %+v, want %s only", snap.Members, a)
	}
}

// A kubelet writes its kubeconfig after its TLS bootstrap, after the
// static pod started: the Watcher waits for the file, says so in Status and
// once in the log, and lists Nodes as soon as it appears.
func TestKubeconfigAppearsLater(t *testing.T) {
	requireAPI(t)
	sel, p := testRun(t)
	createNode(t, sel, node{name: p + "early", roles: []string{"worker"}, ips: []string{"192.0.2.60"}, ready: true})
	kc := filepath.Join(t.TempDir(), "kubelet", "kubeconfig")
	if got := pickKubeconfig("", []string{kc}); got != "" {
		t.Fatalf("no kubelet folder yet: picked %q", got)
	}
	if err := os.MkdirAll(filepath.Dir(kc), 0o700); err != nil {
		t.Fatal(err)
	}
	if got := pickKubeconfig("", []string{kc}); got != kc {
		t.Fatalf("kubelet folder without its kubeconfig: picked %q, want %q to wait for", got, kc)
	}
	log, logs := testLog()
	st := newState()
	w := startWatcher(t, st, Options{Kubeconfig: kc, LabelSelector: sel}, log)
	time.Sleep(3 * kubeconfigPoll)
	if s := status(w); s.WaitingFor != kc || s.Synced {
		t.Errorf("status before the kubeconfig exists = %+v, want waiting for %s", s, kc)
	}
	if err := w.Ready(); err == nil || !strings.Contains(err.Error(), kc) {
		t.Errorf("Ready before the kubeconfig exists = %v, want the file named", err)
	}
	raw, err := os.ReadFile(kube.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kc, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	waitReady(t, w, 5*kubeconfigPoll+appear)
	waitFor(t, st, appear, "the Node listed once the kubeconfig appeared", has(p+"early", func(cluster.Member) bool { return true }))
	if s := status(w); s.WaitingFor != "" || !s.Synced || s.Server == "" {
		t.Errorf("status after = %+v, want synced, not waiting", s)
	}
	if n := len(logLines(t, logs, "waiting for the kubeconfig")); n != 1 {
		t.Errorf("logged the wait %d times, want once:\n%s", n, logs.String())
	}
}
