package ovirt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"
	"golang.org/x/sync/errgroup"

	"appliance/platform"
)

// Options configures the provider: where to connect and where to place VMs.
type Options struct {
	// Credentials reach the engine (see LoadCredentials); unused by
	// NewWithClient.
	Credentials Credentials
	// ClusterID, StorageDomainID and VNICProfileID are the oVirt IDs (UUIDs)
	// of the cluster VMs run in, the storage domain for the template and VM
	// disks, and the vNIC profile of the machine network.
	ClusterID       string
	StorageDomainID string
	VNICProfileID   string
	// Affinity controls the anti-affinity groups.
	Affinity Affinity
	// PollInterval is how often long engine operations (disk locks, template
	// creation, power changes) are polled; default 2s.
	PollInterval time.Duration
	// WaitTimeout bounds each such wait; default 30m (a template copy of a
	// large image on slow storage takes long).
	WaitTimeout time.Duration
	// Workers bounds the parallel calls of List and Destroy; default 8.
	Workers int
}

// Affinity selects the negative VM affinity groups "<infraID>-controlplane"
// (masters) and "<infraID>-compute" (workers); the bootstrap VM is in none.
type Affinity struct {
	// Disabled creates no groups.
	Disabled bool
	// Soft makes the groups non-enforcing: the scheduler spreads the VMs when
	// it can but still starts them on a cluster with fewer hosts than
	// masters. By default the groups are enforcing.
	Soft bool
}

// Affinity group priorities: the control plane's spread matters more.
const (
	controlPlanePriority = 5
	computePriority      = 3
)

func (o *Options) defaults() {
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Second
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = 30 * time.Minute
	}
	if o.Workers <= 0 {
		o.Workers = 8
	}
}

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

// Names of the objects a cluster owns.
func templateName(infraID string) string { return infraID + "-rhcos" }
func builderName(infraID string) string  { return infraID + "-rhcos-builder" }
func imageAlias(infraID string) string   { return infraID + "-rhcos-image" }
func groupName(infraID string, role string) string {
	switch role {
	case "master":
		return infraID + "-controlplane"
	case "worker":
		return infraID + "-compute"
	}
	return ""
}

// nicName is the machine NIC's name (scoped per VM on an engine).
const nicName = "nic1"

// osType makes the engine present the hardware RHCOS expects.
const osType = "rhcos_x64"

// completeComment is written to a VM's comment as the last step of Create.
const completeComment = "appliance-provision: complete"

// roleBuilder marks the temporary VM the template is made from.
const roleBuilder = "image-builder"

// mark is the ownership record kept in an object's description.
type mark struct {
	InfraID, Node, Role, Image string
}

const markPrefix = "appliance-provision"

func (m mark) String() string {
	var b strings.Builder
	b.WriteString(markPrefix)
	for _, kv := range [][2]string{{"infraID", m.InfraID}, {"node", m.Node}, {"role", m.Role}, {"image", m.Image}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, " %s=%s", kv[0], kv[1])
		}
	}
	return b.String()
}

// parseMark reads a description written by mark.String; ok is false for
// any other text, so a foreign object is never taken for ours.
func parseMark(s string) (m mark, ok bool) {
	f := strings.Fields(s)
	if len(f) < 2 || f[0] != markPrefix {
		return mark{}, false
	}
	for _, kv := range f[1:] {
		k, v, found := strings.Cut(kv, "=")
		if !found || v == "" {
			return mark{}, false
		}
		switch k {
		case "infraID":
			m.InfraID = v
		case "node":
			m.Node = v
		case "role":
			m.Role = v
		case "image":
			m.Image = v
		default:
			return mark{}, false
		}
	}
	if m.InfraID == "" {
		return mark{}, false
	}
	return m, true
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

// owned is a VM that carries the cluster's mark or tag.
type owned struct {
	vm ovirtclient.VM
	m  mark
}

// ownedVMs finds the VMs carrying infraID's description mark or its tag
// (the tag alone covers VMs tagged by other tools for the same cluster).
func (p *Provider) ownedVMs(ctx context.Context, infraID string) ([]owned, error) {
	e := p.eng(ctx)
	all, err := e.ListVMs()
	if err != nil {
		return nil, fmt.Errorf("list VMs: %w", err)
	}
	var out []owned
	seen := map[ovirtclient.VMID]bool{}
	for _, vm := range all {
		if m, ok := parseMark(vm.Description()); ok && m.InfraID == infraID {
			out = append(out, owned{vm, m})
			seen[vm.ID()] = true
		}
	}
	tagID, ok, err := p.findTag(ctx, infraID)
	if err != nil || !ok {
		return out, err
	}
	// An engine answers the tag search itself; the mock ignores the tag
	// criterion, so every hit is confirmed against the VM's tags.
	tagged, err := e.SearchVMs(ovirtclient.VMSearchParams().WithTag(infraID))
	if err != nil {
		return nil, fmt.Errorf("search VMs tagged %s: %w", infraID, err)
	}
	for _, vm := range tagged {
		if seen[vm.ID()] {
			continue
		}
		tags, err := e.ListVMTags(vm.ID())
		if err != nil {
			if notFound(err) {
				continue
			}
			return nil, fmt.Errorf("list tags of VM %s: %w", vm.Name(), err)
		}
		if slices.ContainsFunc(tags, func(t ovirtclient.Tag) bool { return t.ID() == tagID }) {
			out = append(out, owned{vm, mark{InfraID: infraID}})
			seen[vm.ID()] = true
		}
	}
	return out, nil
}

// findTag returns the ID of the tag named infraID that we created.
func (p *Provider) findTag(ctx context.Context, infraID string) (ovirtclient.TagID, bool, error) {
	tags, err := p.eng(ctx).ListTags()
	if err != nil {
		return "", false, fmt.Errorf("list tags: %w", err)
	}
	foreign := false
	for _, t := range tags {
		if t.Name() != infraID {
			continue
		}
		if d := t.Description(); d != nil {
			if m, ok := parseMark(*d); ok && m.InfraID == infraID {
				return t.ID(), true, nil
			}
		}
		foreign = true
	}
	if foreign {
		return "", false, fmt.Errorf("tag %s exists but was not created by appliance provision (its description lacks %q)", infraID, markPrefix)
	}
	return "", false, nil
}

// ensureTag returns the cluster's tag, creating it once.
func (p *Provider) ensureTag(ctx context.Context, infraID string) (ovirtclient.TagID, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.tags[infraID]; ok {
		return id, nil
	}
	id, ok, err := p.findTag(ctx, infraID)
	if err != nil {
		return "", err
	}
	if !ok {
		t, err := p.eng(ctx).CreateTag(infraID, ovirtclient.NewCreateTagParams().MustWithDescription(mark{InfraID: infraID}.String()))
		if err != nil {
			return "", fmt.Errorf("create tag %s: %w", infraID, err)
		}
		id = t.ID()
		p.log.Info("created tag", "tag", infraID)
	}
	p.tags[infraID] = id
	return id, nil
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

// List returns the cluster's VMs with their power state, MAC and the
// addresses the guest agent reports; it does not wait for any of them.
func (p *Provider) List(ctx context.Context, infraID string) ([]platform.VM, error) {
	vms, err := p.ownedVMs(ctx, infraID)
	if err != nil {
		return nil, p.s.err(fmt.Errorf("ovirt: list %s: %w", infraID, err))
	}
	vms = slices.DeleteFunc(vms, func(o owned) bool { return o.m.Role == roleBuilder })
	out := make([]platform.VM, len(vms))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.opts.Workers)
	for i, o := range vms {
		g.Go(func() error {
			v, err := p.describe(gctx, o)
			out[i] = v
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, p.s.err(fmt.Errorf("ovirt: list %s: %w", infraID, err))
	}
	slices.SortFunc(out, func(a, b platform.VM) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (p *Provider) describe(ctx context.Context, o owned) (platform.VM, error) {
	e := p.eng(ctx)
	v := platform.VM{
		Name:     o.vm.Name(),
		Node:     o.m.Node,
		Power:    power(o.vm.Status()),
		Complete: o.vm.Comment() == completeComment,
	}
	nics, err := e.ListNICs(o.vm.ID())
	if err != nil && !notFound(err) {
		return v, fmt.Errorf("NICs of %s: %w", v.Name, err)
	}
	for _, n := range nics {
		if mac, err := net.ParseMAC(n.Mac()); err == nil {
			v.MAC = mac
			break
		}
	}
	if v.Power == platform.PowerRunning || v.Power == platform.PowerStarting {
		ips, err := e.GetVMIPAddresses(o.vm.ID(), ovirtclient.NewVMIPSearchParams())
		if err != nil && !notFound(err) {
			return v, fmt.Errorf("addresses of %s: %w", v.Name, err)
		}
		v.Addresses = usable(ips)
	}
	return v, nil
}

// usable keeps the addresses other machines can reach: no loopback or
// link-local, sorted and deduplicated.
func usable(ips map[string][]net.IP) []netip.Addr {
	var out []netip.Addr
	for _, list := range ips {
		for _, ip := range list {
			a, ok := netip.AddrFromSlice(ip)
			if !ok {
				continue
			}
			a = a.Unmap()
			if a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast() {
				continue
			}
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out)
}

func power(s ovirtclient.VMStatus) platform.Power {
	switch s {
	case ovirtclient.VMStatusUp, ovirtclient.VMStatusMigrating, ovirtclient.VMStatusPoweringDown,
		ovirtclient.VMStatusRebooting, ovirtclient.VMStatusSavingState:
		return platform.PowerRunning
	case ovirtclient.VMStatusDown, ovirtclient.VMStatusImageLocked:
		return platform.PowerStopped
	case ovirtclient.VMStatusWaitForLaunch, ovirtclient.VMStatusPoweringUp, ovirtclient.VMStatusRestoringState:
		return platform.PowerStarting
	case ovirtclient.VMStatusPaused, ovirtclient.VMStatusSuspended:
		return platform.PowerPaused
	}
	return platform.PowerUnknown
}

// WaitForAddresses polls List until every VM in names reports at least one
// usable address, or timeout passes; it returns what is known either way,
// with an error naming the VMs still without one.
func (p *Provider) WaitForAddresses(ctx context.Context, infraID string, names []string, timeout time.Duration) (map[string][]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	got := map[string][]netip.Addr{}
	for {
		vms, err := p.List(ctx, infraID)
		if err == nil {
			for _, v := range vms {
				if len(v.Addresses) > 0 {
					got[v.Name] = v.Addresses
				}
			}
		}
		var missing []string
		for _, n := range names {
			if len(got[n]) == 0 {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return got, nil
		}
		t := time.NewTimer(p.opts.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return got, fmt.Errorf("ovirt: no address reported after %s for %s", timeout, strings.Join(missing, ", "))
		case <-t.C:
		}
	}
}

// Start powers m's VM on. The engine places it according to the affinity
// groups, so with enforcing groups a cluster with too few hosts refuses.
func (p *Provider) Start(ctx context.Context, spec *platform.Spec, m platform.Machine) error {
	vm, _, err := p.findVM(ctx, spec.InfraID, m.Name)
	if err == nil && vm == nil {
		err = errors.New("VM does not exist (run apply)")
	}
	if err == nil {
		switch power(vm.Status()) {
		case platform.PowerRunning, platform.PowerStarting:
			return nil
		}
		err = p.eng(ctx).StartVM(vm.ID())
	}
	if err != nil {
		return p.s.err(fmt.Errorf("ovirt: start %s: %w", m.Name, err))
	}
	p.log.Info("started VM", "vm", m.Name)
	return nil
}

// Destroy removes the cluster's VMs (with their disks and NICs), affinity
// groups, template, leftover image upload and tag, in that order, and
// nothing without the cluster's mark.
func (p *Provider) Destroy(ctx context.Context, infraID string) ([]string, error) {
	lines, err := p.destroy(ctx, infraID)
	slices.Sort(lines)
	if err != nil {
		return lines, p.s.err(fmt.Errorf("ovirt: destroy %s: %w", infraID, err))
	}
	return lines, nil
}

// DestroyVMs removes the VMs among vms that carry infraID's mark or tag,
// each powered off and removed with its disks (its Ignition is in its
// initialization, gone with it). The template, base image disk, affinity
// groups and tag stay for the VMs left.
func (p *Provider) DestroyVMs(ctx context.Context, infraID string, vms []platform.VM) ([]string, error) {
	owned, err := p.ownedVMs(ctx, infraID)
	if err != nil {
		return nil, p.s.err(fmt.Errorf("ovirt: destroy %s: %w", infraID, err))
	}
	var (
		mu    sync.Mutex
		lines []string
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.opts.Workers)
	for _, o := range owned {
		if o.m.Role == roleBuilder || !slices.ContainsFunc(vms, func(v platform.VM) bool { return v.Name == o.vm.Name() }) {
			continue
		}
		g.Go(func() error {
			if err := p.removeVM(gctx, o.vm); err != nil {
				return err
			}
			mu.Lock()
			lines = append(lines, "vm "+o.vm.Name())
			mu.Unlock()
			p.log.Info("removed", "object", "vm "+o.vm.Name())
			return nil
		})
	}
	err = g.Wait()
	slices.Sort(lines)
	if err != nil {
		return lines, p.s.err(fmt.Errorf("ovirt: destroy %s: %w", infraID, err))
	}
	return lines, nil
}

func (p *Provider) destroy(ctx context.Context, infraID string) ([]string, error) {
	e := p.eng(ctx)
	vms, err := p.ownedVMs(ctx, infraID)
	if err != nil {
		return nil, err
	}
	var (
		mu    sync.Mutex
		lines []string
	)
	add := func(s string) {
		mu.Lock()
		lines = append(lines, s)
		mu.Unlock()
		p.log.Info("removed", "object", s)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.opts.Workers)
	for _, o := range vms {
		g.Go(func() error {
			if err := p.removeVM(gctx, o.vm); err != nil {
				return err
			}
			add("vm " + o.vm.Name())
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return lines, err
	}

	groups, err := e.ListAffinityGroups(ovirtclient.ClusterID(p.opts.ClusterID))
	if err != nil {
		return lines, fmt.Errorf("list affinity groups: %w", err)
	}
	for _, ag := range groups {
		if m, ok := parseMark(ag.Description()); !ok || m.InfraID != infraID {
			continue
		}
		if err := e.RemoveAffinityGroup(ag.ClusterID(), ag.ID()); err != nil && !notFound(err) {
			return lines, fmt.Errorf("remove affinity group %s: %w", ag.Name(), err)
		}
		add("affinity-group " + ag.Name())
	}
	p.mu.Lock()
	clear(p.groups)
	p.mu.Unlock()

	tpl, err := p.findTemplate(ctx, infraID)
	if err != nil {
		return lines, err
	}
	if tpl != nil {
		if err := p.wait(ctx, "template "+tpl.Name()+" unlock", func() (bool, error) {
			t, err := e.GetTemplate(tpl.ID())
			if notFound(err) {
				return true, nil
			}
			return err == nil && t.Status() != ovirtclient.TemplateStatusLocked, err
		}); err != nil {
			return lines, err
		}
		if err := e.RemoveTemplate(tpl.ID()); err != nil && !notFound(err) {
			return lines, fmt.Errorf("remove template %s: %w", tpl.Name(), err)
		}
		add("template " + tpl.Name())
	}

	n, err := p.removeImageDisks(ctx, infraID)
	for range n {
		add("disk " + imageAlias(infraID))
	}
	if err != nil {
		return lines, err
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.tags, infraID)
	tagID, ok, err := p.findTag(ctx, infraID)
	if err != nil || !ok {
		return lines, err
	}
	if err := e.RemoveTag(tagID); err != nil && !notFound(err) {
		return lines, fmt.Errorf("remove tag %s: %w", infraID, err)
	}
	lines = append(lines, "tag "+infraID)
	return lines, nil
}

// removeVM powers vm off if needed and removes it with its disks.
func (p *Provider) removeVM(ctx context.Context, vm ovirtclient.VM) error {
	e := p.eng(ctx)
	if vm.Status() != ovirtclient.VMStatusDown {
		if err := e.StopVM(vm.ID(), true); err != nil && !notFound(err) {
			return fmt.Errorf("stop VM %s: %w", vm.Name(), err)
		}
		if err := p.wait(ctx, "VM "+vm.Name()+" power off", func() (bool, error) {
			v, err := e.GetVM(vm.ID())
			if notFound(err) {
				return true, nil
			}
			return err == nil && v.Status() == ovirtclient.VMStatusDown, err
		}); err != nil {
			return err
		}
	}
	// A disk still locked by a clone or resize makes the engine refuse the
	// removal for a moment: wait for the disks first.
	if err := p.waitDisksUnlocked(ctx, vm.ID()); err != nil && !notFound(err) {
		return err
	}
	if err := e.RemoveVM(vm.ID()); err != nil && !notFound(err) {
		return fmt.Errorf("remove VM %s: %w", vm.Name(), err)
	}
	return nil
}

// waitDisksUnlocked waits until every disk attached to vm is unlocked.
func (p *Provider) waitDisksUnlocked(ctx context.Context, id ovirtclient.VMID) error {
	e := p.eng(ctx)
	atts, err := e.ListDiskAttachments(id)
	if err != nil {
		return err
	}
	for _, a := range atts {
		if err := p.waitDiskOK(ctx, a.DiskID()); err != nil && !notFound(err) {
			return err
		}
	}
	return nil
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
