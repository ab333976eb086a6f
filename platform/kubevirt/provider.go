package kubevirt

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/platform"
)

// Provider creates a cluster's VMs as KubeVirt VirtualMachines in one
// namespace. It implements platform.Provider.
type Provider struct {
	c      client.Client
	opts   Options
	log    *slog.Logger
	redact redactor
	host   string // the API server's URL, for messages; "" when unknown
	// poll and wait bound how Destroy and PrepareImage wait for objects
	// the cluster deletes asynchronously; tests shorten them.
	poll, wait time.Duration
}

var _ platform.Provider = (*Provider)(nil)

// NewScheme returns a scheme with the core, KubeVirt and CDI types this
// package reads and writes.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, storagev1.AddToScheme, authorizationv1.AddToScheme,
		kubevirtv1.AddToScheme, cdiv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("kubevirt: scheme: %w", err)
		}
	}
	return s, nil
}

// New connects to the cluster named by opts' kubeconfig and context, and
// checks that KubeVirt (and CDI, when disks are imported) answer in the
// namespace.
func New(ctx context.Context, opts Options, log *slog.Logger) (*Provider, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	conn, err := loadKubeconfig(opts)
	if err != nil {
		return nil, err
	}
	if opts.Namespace == "" {
		opts.Namespace = conn.namespace
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	conn.rest.WarningHandlerWithContext = slogWarnings{log: log}
	conn.rest.UserAgent = "appliance-provision"
	// No client-side token bucket: client-go's default (5 requests/s, burst
	// 10) made a 54-VM apply wait 30 s on an idle server. The server's API
	// Priority and Fairness decides instead, and client-go honours its 429s
	// (Retry-After); Options.Parallel bounds how many requests are in flight.
	conn.rest.QPS, conn.rest.Burst = -1, 0
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(conn.rest, client.Options{Scheme: scheme})
	if err != nil {
		return nil, conn.redact.errorf("kubevirt: client for %s: %w", conn.rest.Host, err)
	}
	// Strict: a field the cluster's CRD does not know (an older KubeVirt,
	// a typo) fails the request instead of being dropped with a warning.
	c = client.WithFieldValidation(c, metav1.FieldValidationStrict)
	p, err := NewWithClient(c, opts, log)
	if err != nil {
		return nil, err
	}
	p.redact, p.host = conn.redact, conn.rest.Host
	if err := p.probe(ctx, conn.rest.Host); err != nil {
		return nil, err
	}
	log.Info("kubevirt: connected", "server", conn.rest.Host, "context", conn.context, "namespace", p.opts.Namespace)
	return p, nil
}

// NewWithClient is New on an existing client (a fake one in tests). The
// client's scheme must hold NewScheme's types.
func NewWithClient(c client.Client, opts Options, log *slog.Logger) (*Provider, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Provider{c: c, opts: opts.withDefaults(), log: log, poll: 2 * time.Second, wait: 5 * time.Minute}, nil
}

// Options returns the options in effect, defaults filled in.
func (p *Provider) Options() Options { return p.opts }

// probe makes one cheap read of each API the provider needs, so a wrong
// context, refused credentials or a missing operator show up before apply.
func (p *Provider) probe(ctx context.Context, host string) error {
	check := func(what string, l client.ObjectList) error {
		err := p.c.List(ctx, l, client.InNamespace(p.opts.Namespace), client.Limit(1))
		switch {
		case err == nil:
			return nil
		case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
			return fmt.Errorf("kubevirt: %s serves no %s API: %s is not installed there (this appliance speaks kubevirt.io/v1 VirtualMachines, built against KubeVirt %s, and cdi.kubevirt.io/v1beta1 DataVolumes, CDI %s); install it, or pick the cluster that has it with provision.kubevirt.context",
				host, what, strings.Fields(what)[0], KubeVirtRelease, CDIRelease)
		case apierrors.IsUnauthorized(err):
			return fmt.Errorf("kubevirt: %s refused the kubeconfig's credentials (401)", host)
		case apierrors.IsForbidden(err):
			return fmt.Errorf("kubevirt: %s: listing %s in namespace %s is forbidden for these credentials", host, what, p.opts.Namespace)
		}
		hint := ""
		if strings.Contains(err.Error(), "x509:") {
			hint = " (put the API server's CA in the kubeconfig, or opt out of verification with insecure: true)"
		}
		return p.redact.errorf("kubevirt: %s: list %s in namespace %s: %w%s", host, what, p.opts.Namespace, err, hint)
	}
	if err := check("KubeVirt "+KubeVirtAPI+" VirtualMachine", &kubevirtv1.VirtualMachineList{}); err != nil {
		return err
	}
	if !p.opts.EphemeralContainerDisk {
		return check("CDI "+CDIAPI+" DataVolume", &cdiv1.DataVolumeList{})
	}
	return nil
}

// Close releases nothing: the client holds no long-lived connection that
// needs closing.
func (p *Provider) Close() error { return nil }

// errf formats an error and scrubs credentials from it.
func (p *Provider) errf(format string, args ...any) error { return p.redact.errorf(format, args...) }

// key is obj's namespace/name in the provider's namespace.
func (p *Provider) key(name string) client.ObjectKey {
	return client.ObjectKey{Namespace: p.opts.Namespace, Name: name}
}
