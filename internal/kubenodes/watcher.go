package kubenodes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"appliance/internal/cluster"
)

// Options configure a Watcher.
type Options struct {
	// Kubeconfig is the kubeconfig file to read; see Kubeconfig for
	// picking one. Required. Its credentials must be allowed to list and
	// watch every Node. A kubelet's own are not, by default, since
	// Kubernetes 1.34: the Node authorizer limits them to their own Node,
	// and only an RBAC grant to system:nodes (or another identity) widens
	// that. Status and the log say so when the API refuses.
	Kubeconfig string
	// LocalServer, when set, replaces the kubeconfig's server URL, e.g.
	// DefaultLocalServer. Set it on every node that runs a kube-apiserver
	// (masters, and the bootstrap node): their kubeconfig names the API
	// VIP (api-int), and a node reading its members through the VIP it
	// serves itself loses its view exactly when the VIP or its LB is
	// broken, which is when it needs the view to repair them. Leave it
	// empty on workers, which run no apiserver and never hold the API VIP.
	LocalServer string
	// LabelSelector, when set, limits the Nodes watched (Kubernetes label
	// selector syntax); empty: every Node.
	LabelSelector string
	// Domain, when set (the cluster domain, e.g. "ocp4.example.com"), is
	// cut from Node names that end in it: a kubelet registers under its
	// host name, which may be fully qualified, while members carry short
	// names (appliance.yaml's, and the labels DNS puts under the domain).
	Domain string
}

// Status is the Watcher's section of /status.
type Status struct {
	Server string `json:"server"`
	// Reachable: the API answered the last request, if only to refuse
	// it (then Error says why).
	Reachable bool `json:"reachable"`
	Synced    bool `json:"synced"` // the first full list has been applied
	// LastSync is when the API last answered (a list, a watch or an event).
	LastSync time.Time `json:"last_sync,omitzero"`
	// DownSince is when the API stopped serving Nodes to us (no answer,
	// or a refusal); zero while it serves them.
	DownSince time.Time `json:"down_since,omitzero"`
	Error     string    `json:"error,omitempty"`
	Nodes     int       `json:"nodes"` // members this source holds in the State
	// WaitingFor is the kubeconfig Run waits to appear (or to become
	// loadable); empty once it is read.
	WaitingFor string `json:"waiting_for,omitempty"`
}

// Watcher keeps the Nodes of the Kubernetes API in a cluster.State. It is
// a service: Run watches until its context ends.
type Watcher struct {
	state   *cluster.State
	log     *slog.Logger
	opts    Options
	server  string
	client  kubernetes.Interface
	http    *http.Client
	running atomic.Bool
	synced  atomic.Bool
	mu      sync.Mutex
	known   map[string]cluster.Member // what this source last put in the State, by name
	// nodeNames maps a member to its Node's name (with the domain, if the
	// kubelet registered with it), for queries about one Node.
	nodeNames map[string]string
	api       apiState // how the last request went
	down      time.Time
	lastSync  time.Time
	lastErr   string
	waiting   bool // the kubeconfig is not loaded yet; Run waits for it
}

// kubeconfigPoll is how often Run looks for a kubeconfig that is not there
// yet.
var kubeconfigPoll = 2 * time.Second

// New prepares a Watcher that will keep the Nodes behind opts.Kubeconfig
// in state. It reads the kubeconfig but contacts nothing. It also routes
// client-go's process-wide klog through log (only the first New does).
func New(state *cluster.State, opts Options, log *slog.Logger) (*Watcher, error) {
	if state == nil {
		return nil, errors.New("kubenodes: no cluster state")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	} else {
		routeClientLogs(log)
	}
	if opts.Kubeconfig == "" {
		return nil, errors.New("kubenodes: no kubeconfig given")
	}
	w := &Watcher{
		state: state, opts: opts, server: opts.LocalServer,
		log:   log.With("component", "kubenodes"),
		known: map[string]cluster.Member{}, nodeNames: map[string]string{},
	}
	if _, err := os.Stat(opts.Kubeconfig); errors.Is(err, fs.ErrNotExist) {
		// Not written yet: Run waits for it.
		w.waiting = true
		return w, nil
	}
	if err := w.load(); err != nil {
		return nil, err
	}
	return w, nil
}

// load reads the kubeconfig and prepares the client.
func (w *Watcher) load() error {
	cfg, err := restConfig(w.opts.Kubeconfig, w.opts.LocalServer)
	if err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("kubenodes: client for %s: %w", cfg.Host, err)
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return fmt.Errorf("kubenodes: client for %s: %w", cfg.Host, err)
	}
	w.mu.Lock()
	w.server, w.client, w.http, w.waiting, w.lastErr = cfg.Host, cs, hc, false, ""
	w.log = w.log.With("server", cfg.Host)
	w.mu.Unlock()
	return nil
}

// awaitKubeconfig returns once the kubeconfig is loaded, or false when ctx
// ends first. A kubelet writes its kubeconfig after its TLS bootstrap, so
// on a fresh node the file appears minutes after the static pod started.
func (w *Watcher) awaitKubeconfig(ctx context.Context) bool {
	w.mu.Lock()
	waiting := w.waiting
	w.mu.Unlock()
	if !waiting {
		return true
	}
	w.log.Info("waiting for the kubeconfig to appear (the kubelet writes its own after its TLS bootstrap); members come from the config and mDNS until then",
		"kubeconfig", w.opts.Kubeconfig)
	t := time.NewTicker(kubeconfigPoll)
	defer t.Stop()
	var lastErr string
	for {
		err := w.load()
		if err == nil {
			w.log.Info("kubeconfig found", "kubeconfig", w.opts.Kubeconfig)
			return true
		}
		if !errors.Is(err, fs.ErrNotExist) {
			// Present but not usable yet (half written, its
			// certificate not there yet): say so once per new error.
			w.mu.Lock()
			w.lastErr = err.Error()
			w.mu.Unlock()
			if err.Error() != lastErr {
				w.log.Warn("kubeconfig not usable yet; still waiting", "kubeconfig", w.opts.Kubeconfig, "err", err)
			}
			lastErr = err.Error()
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// Name is the service's key in /status and in logs.
func (w *Watcher) Name() string { return "kubenodes" }

// Ready is nil once the first full list of Nodes is in the State. It stays
// nil through later outages: the last view is still served.
func (w *Watcher) Ready() error {
	if w.synced.Load() {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting {
		return fmt.Errorf("kubenodes: waiting for kubeconfig %s", w.opts.Kubeconfig)
	}
	if w.lastErr != "" {
		return fmt.Errorf("kubenodes: Nodes from %s not listed yet: %s", w.server, w.lastErr)
	}
	return fmt.Errorf("kubenodes: Nodes from %s not listed yet", w.server)
}

// Status reports whether the API answers, when it last did, and how many
// members this source holds (a Status).
func (w *Watcher) Status() any {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := Status{
		Server: w.server, Reachable: w.api == apiUp || w.api == apiRefused, Synced: w.synced.Load(), LastSync: w.lastSync,
		DownSince: w.down, Error: w.lastErr, Nodes: len(w.known),
	}
	if w.waiting {
		st.WaitingFor = w.opts.Kubeconfig
	}
	return st
}

// Run watches Nodes and keeps the State in step until ctx ends, then
// returns once every goroutine it started has ended. Members stay in the
// State when it returns, as they do while the API is unreachable.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("kubenodes: Run called while already running")
	}
	defer w.running.Store(false)
	// An earlier Run's view is not confirmed until this one has listed.
	w.synced.Store(false)
	if !w.awaitKubeconfig(ctx) {
		return nil
	}
	// The informer's own logs (reflector, handler panics) go through our
	// logger rather than klog's global one.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(w.log.Handler()))

	nodes := w.client.CoreV1().Nodes()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = w.opts.LabelSelector
			w.log.Debug("listing Nodes", "resource_version", o.ResourceVersion)
			l, err := nodes.List(ctx, o)
			w.contact(ctx, err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = w.opts.LabelSelector
			wi, err := nodes.Watch(ctx, o)
			w.contact(ctx, err)
			return wi, err
		},
	}
	// Plain list and watch, not a streaming list: client-go's streaming
	// list sleeps out its backoff (up to 30 s) without looking at ctx, so
	// Run could not return promptly while the API is down. A few hundred
	// Nodes make a small list anyway.
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, noStreamingList{}), &corev1.Node{}, 0, cache.Indexers{})
	// The default handler reports every failed list as an error, once per
	// retry; contact already logs an outage once.
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) { w.contact(ctx, err) }); err != nil {
		return fmt.Errorf("kubenodes: informer for %s: %w", w.server, err)
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.upsert(obj) },
		UpdateFunc: func(_, obj any) { w.upsert(obj) },
		DeleteFunc: w.deleted,
	})
	if err != nil {
		return fmt.Errorf("kubenodes: informer for %s: %w", w.server, err)
	}

	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		// Keep-alive connections would outlive Run otherwise.
		utilnet.CloseIdleConnectionsFor(w.http.Transport)
	}()
	wg.Go(func() { inf.RunWithContext(ctx) })

	select {
	case <-ctx.Done():
		return nil
	case <-reg.HasSyncedChecker().Done():
	}
	w.prune(inf.GetStore())
	w.synced.Store(true)
	w.mu.Lock()
	n := len(w.known)
	w.mu.Unlock()
	w.log.Info("Kubernetes Nodes listed", "nodes", n)
	<-ctx.Done()
	return nil
}

// noStreamingList tells the reflector not to list by a watch.
type noStreamingList struct{}

func (noStreamingList) IsWatchListSemanticsUnSupported() bool { return true }

// apiState is how the last request to the API went.
type apiState int

const (
	apiUntried apiState = iota
	apiUp
	apiDown    // no answer, or a failing server
	apiRefused // our credentials are not allowed to read Nodes
)

// contact records the outcome of a request to the API and logs when that
// changes (an outage begins or ends, the credentials are refused), never
// per retry.
func (w *Watcher) contact(ctx context.Context, err error) {
	if err != nil && ctx.Err() != nil {
		return // our own cancellation, not an outage
	}
	now := time.Now()
	next := apiUp
	switch {
	case err == nil:
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		next = apiRefused
	default:
		next = apiDown
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.api
	w.api = next
	if next == apiUp {
		w.lastSync, w.lastErr = now, ""
		if prev == apiDown || prev == apiRefused {
			w.log.Info("Kubernetes API reachable again", "down_for", now.Sub(w.down).Round(time.Millisecond).String())
		}
		w.down = time.Time{}
		return
	}
	w.lastErr = err.Error()
	if prev == next {
		return
	}
	if w.down.IsZero() {
		w.down = now
	}
	if next == apiRefused {
		// The Node authorizer limits a kubelet's own credentials to its
		// own Node object (Kubernetes 1.34 and later), unless RBAC grants
		// more. The informer retries with its backoff; the last view and
		// the configured members stay.
		w.log.Warn("Kubernetes API refuses this kubeconfig's user to list and watch Nodes; keeping the last view and retrying. "+
			"Grant get, list and watch on nodes: apply the ClusterRole and ClusterRoleBinding "+NodeReaderName+
			" that 'appliance manifests' writes to "+NodeReaderManifest+" (kubectl apply -f it), or give --kubeconfig a user allowed to",
			"kubeconfig", w.opts.Kubeconfig, "members", len(w.known), "err", err)
		return
	}
	w.log.Warn("Kubernetes API unreachable; keeping the last view of its Nodes until it answers again",
		"members", len(w.known), "err", err)
}

func (w *Watcher) upsert(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	m := MemberOf(n)
	m.Name = w.memberName(n.Name)
	w.mu.Lock()
	old, had := w.known[m.Name]
	w.known[m.Name] = m
	w.nodeNames[m.Name] = n.Name
	w.lastSync = time.Now()
	w.mu.Unlock()
	w.state.UpsertMember(m)
	switch {
	case !had:
		w.log.Info("node joined", "node", m.Name, "role", m.Role, "ips", m.IPs, "ready", m.Healthy)
	case old.Role != m.Role || !slices.Equal(old.IPs, m.IPs) || old.Healthy != m.Healthy:
		w.log.Info("node changed", "node", m.Name, "role", m.Role, "ips", m.IPs, "ready", m.Healthy)
	}
}

// deleted handles a Node's deletion, seen by a watch or, after the API was
// unreachable, by a relist that no longer holds it (a tombstone).
func (w *Watcher) deleted(obj any) {
	var name string
	switch o := obj.(type) {
	case *corev1.Node:
		name = o.Name
	case cache.DeletedFinalStateUnknown:
		_, name, _ = cache.SplitMetaNamespaceKey(o.Key)
	}
	if name != "" {
		w.remove(w.memberName(name))
	}
}

// memberName is the member a Node called node stands for: its name
// without Options.Domain.
func (w *Watcher) memberName(node string) string {
	d := strings.TrimSuffix(w.opts.Domain, ".")
	if d == "" || len(node) <= len(d)+1 {
		return node
	}
	if cut := len(node) - len(d) - 1; node[cut] == '.' && strings.EqualFold(node[cut+1:], d) {
		return node[:cut]
	}
	return node
}

// remove withdraws what this source said about name. A configured member
// stays (RemoveMember only removes our own entries); it gets back its
// configured addresses and health, since the Node that added to them is
// gone.
func (w *Watcher) remove(name string) {
	w.mu.Lock()
	_, had := w.known[name]
	delete(w.known, name)
	delete(w.nodeNames, name)
	w.lastSync = time.Now()
	w.mu.Unlock()
	if w.state.RemoveMember(name, cluster.SourceKubernetes) {
		w.log.Info("node left", "node", name)
		return
	}
	if m, ok := w.state.Snapshot().Member(name); had && ok && m.Source == cluster.SourceConfig {
		w.state.UpsertMember(cluster.Member{Name: name, Source: cluster.SourceKubernetes, Healthy: true})
		w.log.Info("node left; its configured member stays", "node", name)
	}
}

// prune removes the members this source put in the State before (an
// earlier Run) whose Nodes the first list no longer holds.
func (w *Watcher) prune(store cache.Store) {
	present := map[string]bool{}
	for _, obj := range store.List() {
		if n, ok := obj.(*corev1.Node); ok {
			present[w.memberName(n.Name)] = true
		}
	}
	w.mu.Lock()
	var gone []string
	for name := range w.known {
		if !present[name] {
			gone = append(gone, name)
		}
	}
	w.mu.Unlock()
	for _, name := range gone {
		w.remove(name)
	}
}
