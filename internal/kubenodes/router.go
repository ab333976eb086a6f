package kubenodes

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Where OpenShift's default ingress router runs: its pods are in
// RouterNamespace, labelled DefaultRouterLabel=default by the ingress
// operator and named after their Deployment, router-default.
const (
	RouterNamespace    = "openshift-ingress"
	DefaultRouterLabel = "ingresscontroller.operator.openshift.io/deployment-ingresscontroller"
)

// defaultRouterName is the pattern MCO's chk_default_ingress looks for in
// the node's pod list (crictl pods | grep).
var defaultRouterName = regexp.MustCompile(`^router-default-[[:alnum:]]{5,}-[[:alnum:]]{5,}$`)

// routerCheckTimeout bounds one listing.
const routerCheckTimeout = 4 * time.Second

// DefaultRouterHere returns a check that passes while a running pod of
// OpenShift's default router is bound to member's Node: what MCO's
// chk_default_ingress asks the node's container runtime, asked of the API
// instead. The query is the one the Node authorizer grants a kubelet's own
// credentials (pods with spec.nodeName its Node), so the kubeconfig the
// member source reads serves it, and the appliance needs no container
// runtime socket. While the API does not answer, the last answer stands:
// an outage says nothing about where the router runs, and every node
// failing the check at once would only shuffle the ingress VIP.
func (w *Watcher) DefaultRouterHere(member string) func(context.Context) error {
	var (
		mu   sync.Mutex
		last error = errors.New("the Kubernetes API has not answered yet")
	)
	return func(ctx context.Context) error {
		err := w.defaultRouterHere(ctx, member)
		mu.Lock()
		defer mu.Unlock()
		var api *apiError
		if errors.As(err, &api) {
			if last == nil {
				return nil
			}
			return fmt.Errorf("%w (and %w)", last, err)
		}
		last = err
		return err
	}
}

// apiError is a listing the API did not answer.
type apiError struct{ err error }

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

func (w *Watcher) defaultRouterHere(ctx context.Context, member string) error {
	w.mu.Lock()
	client := w.client
	node, ok := w.nodeNames[member]
	w.mu.Unlock()
	if client == nil {
		return &apiError{errors.New("kubenodes: no kubeconfig loaded yet")}
	}
	if !ok {
		node = member // a kubelet registers under its host name
	}
	ctx, cancel := context.WithTimeout(ctx, routerCheckTimeout)
	defer cancel()
	pods, err := client.CoreV1().Pods(RouterNamespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return &apiError{fmt.Errorf("kubenodes: list the pods of %s on %s: %w", RouterNamespace, node, err)}
	}
	for _, p := range pods.Items {
		if IsDefaultRouter(&p) && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			return nil
		}
	}
	return fmt.Errorf("kubenodes: no pod of the default router runs on %s", node)
}

// IsDefaultRouter reports whether p is a pod of the default
// IngressController: by the ingress operator's label, or by the name MCO's
// check looks for.
func IsDefaultRouter(p *corev1.Pod) bool {
	return p.Namespace == RouterNamespace && (p.Labels[DefaultRouterLabel] == "default" || defaultRouterName.MatchString(p.Name))
}
