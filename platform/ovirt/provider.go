package ovirt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"

	"appliance/platform"
)

// Provider implements platform.Provider on an oVirt engine.
type Provider struct {
	client ovirtclient.Client
	mock   bool
	owns   bool // New made the connection, Close ends it
	opts   Options
	log    *slog.Logger
	s      scrubber

	// mu serialises the creation of the objects all machines share (the
	// tag, the affinity groups), which parallel Creates would race to make.
	mu     sync.Mutex
	tags   map[string]ovirtclient.TagID
	groups map[string]ovirtclient.AffinityGroupID
}

var _ platform.Provider = (*Provider)(nil)

// New connects to the engine with opts.Credentials, verifies the
// connection and the placement IDs, and returns the provider. The password
// never appears in its errors or logs.
func New(ctx context.Context, opts Options, log *slog.Logger) (*Provider, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := opts.Credentials
	s := newScrubber(c.Password.Reveal())
	if err := c.validate(); err != nil {
		return nil, s.err(fmt.Errorf("ovirt: credentials: %w", err))
	}
	log = log.With("component", "ovirt", "engine", c.URL)
	verify := func(cl ovirtclient.Client) error {
		return cl.WithContext(ctx).Test(ovirtclient.MaxTries(2), ovirtclient.ContextStrategy(ctx))
	}
	client, err := ovirtclient.NewWithVerify(c.URL, c.Username, c.Password.Reveal(), c.tlsProvider(),
		clientLogger{log: log, s: s}, nil, verify)
	if err != nil {
		return nil, s.err(fmt.Errorf("ovirt: connect to %s as %s: %w", c.URL, c.Username, err))
	}
	p, err := newProvider(ctx, client, opts, log, s)
	if err != nil {
		if c := client.GetSDKClient(); c != nil {
			_ = c.Close()
		}
		return nil, s.err(err)
	}
	p.owns = true
	return p, nil
}

// NewWithClient returns a provider on an existing client, e.g. the
// in-memory ovirtclient.NewMock() in tests. opts.Credentials is ignored.
func NewWithClient(ctx context.Context, client ovirtclient.Client, opts Options, log *slog.Logger) (*Provider, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return newProvider(ctx, client, opts, log.With("component", "ovirt"), scrubber{})
}

func newProvider(ctx context.Context, client ovirtclient.Client, opts Options, log *slog.Logger, s scrubber) (*Provider, error) {
	opts.defaults()
	var errs []error
	if opts.ClusterID == "" {
		errs = append(errs, errors.New("clusterID is required"))
	}
	if opts.StorageDomainID == "" {
		errs = append(errs, errors.New("storageDomainID is required"))
	}
	if opts.VNICProfileID == "" {
		errs = append(errs, errors.New("vnicProfileID is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ovirt: options: %w", err)
	}
	cl := client.WithContext(ctx)
	if _, err := cl.GetCluster(ovirtclient.ClusterID(opts.ClusterID)); err != nil {
		return nil, fmt.Errorf("ovirt: clusterID %s: %w", opts.ClusterID, err)
	}
	if _, err := cl.GetStorageDomain(ovirtclient.StorageDomainID(opts.StorageDomainID)); err != nil {
		return nil, fmt.Errorf("ovirt: storageDomainID %s: %w", opts.StorageDomainID, err)
	}
	if _, err := cl.GetVNICProfile(ovirtclient.VNICProfileID(opts.VNICProfileID)); err != nil {
		return nil, fmt.Errorf("ovirt: vnicProfileID %s: %w", opts.VNICProfileID, err)
	}
	_, mock := client.(ovirtclient.MockClient)
	return &Provider{
		client: client, mock: mock, opts: opts, log: log, s: s,
		tags:   map[string]ovirtclient.TagID{},
		groups: map[string]ovirtclient.AffinityGroupID{},
	}, nil
}

// Close logs out of the engine (revokes the SSO token) when the provider
// made the connection; a client given to NewWithClient is left alone.
func (p *Provider) Close() error {
	if !p.owns {
		return nil
	}
	if c, ok := p.client.(ovirtclient.ClientWithLegacySupport); ok && c.GetSDKClient() != nil {
		if err := c.GetSDKClient().Close(); err != nil {
			return p.s.err(fmt.Errorf("ovirt: logout: %w", err))
		}
	}
	return nil
}

// eng returns the API bound to ctx, so the client's retries stop with it.
func (p *Provider) eng(ctx context.Context) engine {
	c := p.client.WithContext(ctx)
	if p.mock {
		return mockEngine{c}
	}
	return c
}

// notFound reports an ENotFound error; HasErrorCode itself panics on nil.
func notFound(err error) bool {
	return err != nil && ovirtclient.HasErrorCode(err, ovirtclient.ENotFound)
}

// wait polls cond every PollInterval until it is true, ctx ends or
// WaitTimeout passes.
func (p *Provider) wait(ctx context.Context, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(p.opts.WaitTimeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: still not done after %s", what, p.opts.WaitTimeout)
		}
		t := time.NewTimer(p.opts.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

// waitDiskOK polls the disk's status instead of the client's WaitForDiskOK,
// which in the mock sleeps while holding its global lock.
func (p *Provider) waitDiskOK(ctx context.Context, id ovirtclient.DiskID) error {
	e := p.eng(ctx)
	return p.wait(ctx, "disk "+string(id)+" unlock", func() (bool, error) {
		d, err := e.GetDisk(id)
		if err != nil {
			return false, err
		}
		switch d.Status() {
		case ovirtclient.DiskStatusOK:
			return true, nil
		case ovirtclient.DiskStatusIllegal:
			return false, fmt.Errorf("disk %s (%s) is illegal", d.Alias(), id)
		}
		return false, nil
	})
}

// findVM returns the VM named name if it exists; it must be ours.
func (p *Provider) findVM(ctx context.Context, infraID, name string) (ovirtclient.VM, *mark, error) {
	vm, err := p.eng(ctx).GetVMByName(name)
	if notFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("look up VM %s: %w", name, err)
	}
	m, ok := parseMark(vm.Description())
	if !ok || m.InfraID != infraID {
		return nil, nil, fmt.Errorf("VM %s exists but is not part of cluster %s (its description is %q); rename or remove it", name, infraID, vm.Description())
	}
	return vm, &m, nil
}
