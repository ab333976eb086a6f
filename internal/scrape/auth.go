package scrape

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"appliance/internal/kubenodes"
)

// The outcomes of a request, as results of appliance_scrape_requests_total.
const (
	resultAllowed         = "allowed"
	resultNoToken         = "no_token"
	resultUnauthenticated = "unauthenticated"
	resultForbidden       = "forbidden"
	resultUnavailable     = "unavailable"
)

// decision is what the API said of one token.
type decision struct {
	result string // resultAllowed, resultUnauthenticated, resultForbidden or resultUnavailable
	user   string
	reason string
}

type cached struct {
	decision
	until time.Time
}

// APIStatus is how the endpoint's reviews reach the Kubernetes API, for
// /status.
type APIStatus struct {
	Kubeconfig string `json:"kubeconfig"`
	Server     string `json:"server,omitempty"`
	// LastAnswer is when the API last answered a review.
	LastAnswer time.Time `json:"last_answer,omitzero"`
	// Error is why the last review, or loading the kubeconfig, failed;
	// empty once the API answered.
	Error string `json:"error,omitempty"`
	// Cached is how many decisions are held.
	Cached int `json:"cached"`
}

// reviewer asks the Kubernetes API who a token is and whether it may get
// path, and remembers the answers briefly.
type reviewer struct {
	kubeconfig, local, path string
	allowTTL, denyTTL       time.Duration
	timeout                 time.Duration
	reload                  time.Duration // least time between two loads of a kubeconfig that failed
	slots                   chan struct{} // reviews in flight at once

	mu         sync.Mutex
	client     kubernetes.Interface
	hc         *http.Client
	server     string
	loaded     time.Time // of the last load attempt
	apiErr     error
	lastAnswer time.Time
	cache      map[[32]byte]cached
}

// maxCached bounds the decisions held: tokens are the callers' to invent.
const maxCached = 512

// loadClient returns the client, loading the kubeconfig when it is not yet
// (a kubelet writes it after its TLS bootstrap).
func (r *reviewer) loadClient() (kubernetes.Interface, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client != nil {
		return r.client, nil
	}
	if !r.loaded.IsZero() && time.Since(r.loaded) < r.reload {
		return nil, r.apiErr
	}
	r.loaded = time.Now()
	cfg, err := kubenodes.RESTConfig(r.kubeconfig, r.local)
	if err == nil {
		var hc *http.Client
		if hc, err = rest.HTTPClientFor(cfg); err == nil {
			var cs kubernetes.Interface
			if cs, err = kubernetes.NewForConfigAndClient(cfg, hc); err == nil {
				r.client, r.hc, r.server = cs, hc, cfg.Host
				return cs, nil
			}
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("waiting for kubeconfig %s (the kubelet writes it after its TLS bootstrap): %w", r.kubeconfig, err)
	}
	r.apiErr = err
	return nil, err
}

// close drops the client's idle connections.
func (r *reviewer) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hc != nil {
		utilnet.CloseIdleConnectionsFor(r.hc.Transport)
	}
}

// decide is the API's decision on token, from the cache when it is fresh.
func (r *reviewer) decide(ctx context.Context, token string) decision {
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	r.mu.Lock()
	if c, ok := r.cache[key]; ok && now.Before(c.until) {
		r.mu.Unlock()
		return c.decision
	}
	r.mu.Unlock()

	client, err := r.loadClient()
	if err != nil {
		return decision{result: resultUnavailable, reason: err.Error()}
	}
	select {
	case r.slots <- struct{}{}:
		defer func() { <-r.slots }()
	case <-ctx.Done():
		return decision{result: resultUnavailable, reason: "gave up waiting for a review slot: " + ctx.Err().Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	d, err := r.review(ctx, client, token)
	r.contact(err)
	if err != nil {
		return decision{result: resultUnavailable, reason: err.Error()}
	}
	ttl := r.denyTTL
	if d.result == resultAllowed {
		ttl = r.allowTTL
	}
	r.store(key, cached{decision: d, until: time.Now().Add(ttl)})
	return d
}

// review asks the API: a TokenReview, then a SubjectAccessReview for the
// user it names. An error means the API gave no decision.
func (r *reviewer) review(ctx context.Context, client kubernetes.Interface, token string) (decision, error) {
	tr, err := client.AuthenticationV1().TokenReviews().Create(ctx,
		&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return decision{}, refusal("tokenreviews", err)
	}
	if !tr.Status.Authenticated {
		reason := "the token is not valid"
		if tr.Status.Error != "" {
			reason += ": " + tr.Status.Error
		}
		return decision{result: resultUnauthenticated, reason: reason}, nil
	}
	u := tr.Status.User
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			NonResourceAttributes: &authzv1.NonResourceAttributes{Path: r.path, Verb: "get"},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return decision{}, refusal("subjectaccessreviews", err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		reason := fmt.Sprintf("%s may not get %s", u.Username, r.path)
		if sar.Status.Reason != "" {
			reason += ": " + sar.Status.Reason
		}
		return decision{result: resultForbidden, user: u.Username, reason: reason}, nil
	}
	return decision{result: resultAllowed, user: u.Username}, nil
}

// refusal names the fix when the API refuses our own credentials.
func refusal(resource string, err error) error {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return fmt.Errorf("the Kubernetes API refuses this node's credentials to create %s; apply %s (the ClusterRole and ClusterRoleBinding %s that 'appliance manifests' writes): %w",
			resource, MonitoringManifest, AuthReviewerName, err)
	}
	return fmt.Errorf("create %s: %w", resource, err)
}

// contact records how the last review went.
func (r *reviewer) contact(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.apiErr = err
	if err == nil {
		r.lastAnswer = time.Now()
	}
}

func (r *reviewer) store(key [32]byte, c cached) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cache == nil {
		r.cache = map[[32]byte]cached{}
	}
	if len(r.cache) >= maxCached {
		now := time.Now()
		for k, v := range r.cache {
			if now.After(v.until) {
				delete(r.cache, k)
			}
		}
		if len(r.cache) >= maxCached {
			return // full of fresh decisions: this one is asked again next time
		}
	}
	r.cache[key] = c
}

func (r *reviewer) status() APIStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := APIStatus{Kubeconfig: r.kubeconfig, Server: r.server, LastAnswer: r.lastAnswer, Cached: len(r.cache)}
	if r.apiErr != nil {
		st.Error = r.apiErr.Error()
	}
	return st
}

// problem is why the last review, or the kubeconfig, failed; nil while
// the API answers (or before anyone asked, once the kubeconfig loads).
func (r *reviewer) problem() error {
	if _, err := r.loadClient(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.apiErr != nil {
		return fmt.Errorf("the Kubernetes API did not answer the last review: %w", r.apiErr)
	}
	return nil
}
