package kubevirt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
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

// ours says whether obj carries infraID's mark.
func ours(obj metav1.Object, infraID string) bool {
	return infraID != "" && obj.GetLabels()[LabelInfraID] == infraID
}

// key is obj's namespace/name in the provider's namespace.
func (p *Provider) key(name string) client.ObjectKey {
	return client.ObjectKey{Namespace: p.opts.Namespace, Name: name}
}

// PrepareImage creates the golden DataVolume that imports spec.Image.URL,
// or reuses one that holds the same image; with a container disk there is
// nothing to prepare. Unless Options.WaitForImport is set it does not wait
// for the import: clones of the golden volume wait for it on the cluster.
// progress gets the import's percentage as done/total of the image size.
func (p *Provider) PrepareImage(ctx context.Context, spec *platform.Spec, progress func(done, total int64)) error {
	if spec.Image.ContainerDisk != "" {
		return nil
	}
	if err := p.ensureGolden(ctx, spec, progress); err != nil {
		return err
	}
	if !p.opts.WaitForImport {
		return nil
	}
	return p.waitImported(ctx, spec, progress)
}

// waitImported polls the golden DataVolume until CDI reports it imported.
func (p *Provider) waitImported(ctx context.Context, spec *platform.Spec, progress func(done, total int64)) error {
	name := GoldenName(spec.InfraID)
	for {
		dv := &cdiv1.DataVolume{}
		err := p.c.Get(ctx, p.key(name), dv)
		switch {
		case apierrors.IsNotFound(err):
			// Only a retained PVC is left: the import finished long ago.
			return nil
		case err != nil:
			return p.errf("kubevirt: image: wait for DataVolume %s: %w", name, err)
		}
		reportProgress(dv, spec, progress)
		switch dv.Status.Phase {
		case cdiv1.Succeeded:
			return nil
		case cdiv1.Failed:
			return fmt.Errorf("kubevirt: image: import of %s into DataVolume %s failed; see `kubectl -n %s describe datavolume %s`", safeURL(spec.Image.URL), name, p.opts.Namespace, name)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubevirt: image: waiting for DataVolume %s (phase %s): %w", name, dv.Status.Phase, ctx.Err())
		case <-time.After(p.poll):
		}
	}
}

// ensureGolden creates or reuses the golden DataVolume.
func (p *Provider) ensureGolden(ctx context.Context, spec *platform.Spec, progress func(done, total int64)) error {
	if spec.Image.URL == "" {
		return fmt.Errorf("kubevirt: image: no URL to import from; a DataVolume imports over HTTP(S), so serve %s or use a container disk", spec.Image.Path)
	}
	size := goldenSizeGiB(spec, p.opts)
	want := BuildGoldenDataVolume(spec, p.opts, size)
	name := want.Name

	got := &cdiv1.DataVolume{}
	err := p.c.Get(ctx, p.key(name), got)
	switch {
	case apierrors.IsNotFound(err):
		// CDI may have garbage-collected a finished DataVolume and kept
		// its PVC; the PVC then is the golden volume.
		pvc := &corev1.PersistentVolumeClaim{}
		if err := p.c.Get(ctx, p.key(name), pvc); err == nil {
			if !ours(pvc, spec.InfraID) {
				return fmt.Errorf("kubevirt: image: PVC %s/%s exists without label %s=%s; remove it or pick another infra ID", p.opts.Namespace, name, LabelInfraID, spec.InfraID)
			}
			p.log.Info("kubevirt: reusing golden image volume", "pvc", name)
			return nil
		} else if !apierrors.IsNotFound(err) {
			return p.errf("kubevirt: image: get PVC %s: %w", name, err)
		}
		return p.createGolden(ctx, want, size)
	case err != nil:
		return p.errf("kubevirt: image: get DataVolume %s: %w", name, err)
	}
	if !ours(got, spec.InfraID) {
		return fmt.Errorf("kubevirt: image: DataVolume %s/%s exists without label %s=%s; remove it or pick another infra ID", p.opts.Namespace, name, LabelInfraID, spec.InfraID)
	}
	if reason := staleGolden(got, spec); reason != "" {
		p.log.Info("kubevirt: replacing golden image", "datavolume", name, "reason", reason)
		if err := p.c.Delete(ctx, got, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil && !apierrors.IsNotFound(err) {
			return p.errf("kubevirt: image: delete stale DataVolume %s: %w", name, err)
		}
		if err := p.waitGone(ctx, &cdiv1.DataVolume{}, name); err != nil {
			return err
		}
		return p.createGolden(ctx, want, size)
	}
	reportProgress(got, spec, progress)
	p.log.Debug("kubevirt: golden image exists", "datavolume", name, "phase", got.Status.Phase)
	return nil
}

func (p *Provider) createGolden(ctx context.Context, dv *cdiv1.DataVolume, size int) error {
	err := p.c.Create(ctx, dv)
	if apierrors.IsAlreadyExists(err) {
		// Another apply made it between our Get and Create.
		return nil
	}
	if err != nil {
		return p.errf("kubevirt: image: create DataVolume %s (%d GiB from %s): %w", dv.Name, size, safeURL(dv.Spec.Source.HTTP.URL), err)
	}
	p.log.Info("kubevirt: importing golden image", "datavolume", dv.Name, "url", safeURL(dv.Spec.Source.HTTP.URL), "sizeGiB", size)
	return nil
}

// staleGolden says why an existing golden DataVolume cannot be reused, or
// "" when it can: it holds another image, or its import failed.
func staleGolden(dv *cdiv1.DataVolume, spec *platform.Spec) string {
	if dv.Status.Phase == cdiv1.Failed {
		return "import failed"
	}
	// The digest decides when both sides know it: the same image from
	// another mirror is still the same image.
	if sum := dv.Annotations[AnnotationImageSHA256]; spec.Image.SHA256 != "" && sum != "" {
		if sum != spec.Image.SHA256 {
			return "image digest changed"
		}
		return ""
	}
	if dv.Spec.Source == nil || dv.Spec.Source.HTTP == nil || dv.Spec.Source.HTTP.URL != spec.Image.URL {
		return "image URL changed"
	}
	return ""
}

// safeURL is u without a password, for logs and errors.
func safeURL(u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return pu.Redacted()
}

// reportProgress turns CDI's "45.20%" into bytes of the image.
func reportProgress(dv *cdiv1.DataVolume, spec *platform.Spec, progress func(done, total int64)) {
	if progress == nil {
		return
	}
	total := spec.Image.Size
	if total <= 0 {
		total = 100
	}
	if dv.Status.Phase == cdiv1.Succeeded {
		progress(total, total)
		return
	}
	pct, err := strconv.ParseFloat(strings.TrimSuffix(string(dv.Status.Progress), "%"), 64)
	if err != nil || pct < 0 || pct > 100 {
		return
	}
	progress(int64(pct/100*float64(total)), total)
}

// goldenSizeGiB sizes the golden volume: the option, else the image's
// virtual size (a qcow2 header read from Path), else 16 GiB, the size RHCOS
// images are built with; plus headroom.
func goldenSizeGiB(spec *platform.Spec, opts Options) int {
	if opts.ImageDiskGiB > 0 {
		return opts.ImageDiskGiB
	}
	var virt int64
	switch spec.Image.Format {
	case "qcow2":
		if f, err := os.Open(spec.Image.Path); err == nil {
			hdr := make([]byte, 32)
			if _, err := f.ReadAt(hdr, 0); err == nil {
				virt, _ = qcow2VirtualSize(hdr)
			}
			f.Close()
		}
	case "raw":
		virt = spec.Image.Size
	}
	if virt <= 0 {
		virt = 16 << 30
	}
	// Round up, and leave a GiB of headroom over the guest-visible size.
	g := int((virt + 1<<30 - 1) >> 30)
	return g + 1
}

// qcow2VirtualSize reads the guest-visible size from a qcow2 header.
func qcow2VirtualSize(hdr []byte) (int64, error) {
	if len(hdr) < 32 || string(hdr[:4]) != "QFI\xfb" {
		return 0, errors.New("not a qcow2 header")
	}
	var n uint64
	for _, b := range hdr[24:32] {
		n = n<<8 | uint64(b)
	}
	if n == 0 || n > 1<<50 {
		return 0, fmt.Errorf("qcow2 virtual size %d out of range", n)
	}
	return int64(n), nil
}

// Create makes m's Ignition Secret and its VirtualMachine (Halted), leaving
// alone whichever already exists with our label.
func (p *Provider) Create(ctx context.Context, spec *platform.Spec, m platform.Machine, stage func(string)) error {
	if stage == nil {
		stage = func(string) {}
	}
	if err := checkMachine(spec, m, p.opts); err != nil {
		return err
	}
	stage("ignition secret")
	if err := p.ensureSecret(ctx, BuildSecret(spec, m, p.opts), spec.InfraID); err != nil {
		return err
	}
	stage("virtual machine")
	vm := BuildVirtualMachine(spec, m, p.opts)
	err := p.c.Create(ctx, vm)
	if apierrors.IsAlreadyExists(err) {
		got := &kubevirtv1.VirtualMachine{}
		if err := p.c.Get(ctx, p.key(vm.Name), got); err != nil {
			return p.errf("kubevirt: node %s: get VirtualMachine %s: %w", m.Node, vm.Name, err)
		}
		if !ours(got, spec.InfraID) {
			return fmt.Errorf("kubevirt: node %s: VirtualMachine %s/%s exists without label %s=%s; remove it or rename the node", m.Node, p.opts.Namespace, vm.Name, LabelInfraID, spec.InfraID)
		}
		p.log.Debug("kubevirt: VirtualMachine exists", "vm", vm.Name)
		return nil
	}
	if err != nil {
		return p.errf("kubevirt: node %s: create VirtualMachine %s: %w", m.Node, vm.Name, err)
	}
	p.log.Info("kubevirt: created VirtualMachine", "vm", vm.Name, "node", m.Node, "mac", m.MAC.String())
	return nil
}

// ensureSecret creates want, or brings an existing Secret of ours up to
// date (the Ignition may have been regenerated since an interrupted run).
func (p *Provider) ensureSecret(ctx context.Context, want *corev1.Secret, infraID string) error {
	err := p.c.Create(ctx, want)
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return p.errf("kubevirt: create Secret %s: %w", want.Name, err)
	}
	got := &corev1.Secret{}
	if err := p.c.Get(ctx, p.key(want.Name), got); err != nil {
		return p.errf("kubevirt: get Secret %s: %w", want.Name, err)
	}
	if !ours(got, infraID) {
		return fmt.Errorf("kubevirt: Secret %s/%s exists without label %s=%s; remove it or rename the node", p.opts.Namespace, want.Name, LabelInfraID, infraID)
	}
	if got.Annotations[AnnotationIgnitionSHA256] == want.Annotations[AnnotationIgnitionSHA256] {
		return nil
	}
	got.Data = want.Data
	if got.Annotations == nil {
		got.Annotations = map[string]string{}
	}
	got.Annotations[AnnotationIgnitionSHA256] = want.Annotations[AnnotationIgnitionSHA256]
	if err := p.c.Update(ctx, got); err != nil {
		return p.errf("kubevirt: update Secret %s: %w", want.Name, err)
	}
	p.log.Info("kubevirt: updated Ignition secret", "secret", want.Name)
	return nil
}

// Start sets m's VM to the configured run strategy (Always by default);
// KubeVirt then starts it. A VM already set so is left alone.
func (p *Provider) Start(ctx context.Context, spec *platform.Spec, m platform.Machine) error {
	want := p.opts.RunStrategy
	// One request for the common case: a JSON patch whose first operation
	// tests our label, so a VM that is not ours is never changed. Setting
	// the value it already has changes nothing on the server.
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/labels/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(LabelInfraID), "value": spec.InfraID},
		{"op": "add", "path": "/spec/runStrategy", "value": want},
	})
	if err != nil {
		return fmt.Errorf("kubevirt: start %s: %w", m.Node, err)
	}
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: p.opts.Namespace}}
	err = p.c.Patch(ctx, vm, client.RawPatch(types.JSONPatchType, patch))
	switch {
	case err == nil && vm.Spec.Running == nil:
		p.log.Info("kubevirt: run strategy set", "vm", m.Name, "runStrategy", string(want))
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("kubevirt: start %s: no VirtualMachine %s/%s; run apply", m.Node, p.opts.Namespace, m.Name)
	}
	// Not ours, or `running` set beside the run strategy: read it to say
	// which, or to fix it.
	return p.startSlow(ctx, spec, m)
}

// startSlow is Start by reading the VM first.
func (p *Provider) startSlow(ctx context.Context, spec *platform.Spec, m platform.Machine) error {
	vm := &kubevirtv1.VirtualMachine{}
	if err := p.c.Get(ctx, p.key(m.Name), vm); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("kubevirt: start %s: no VirtualMachine %s/%s; run apply", m.Node, p.opts.Namespace, m.Name)
		}
		return p.errf("kubevirt: start %s: %w", m.Node, err)
	}
	if !ours(vm, spec.InfraID) {
		return fmt.Errorf("kubevirt: start %s: VirtualMachine %s/%s lacks label %s=%s; not ours to start", m.Node, p.opts.Namespace, m.Name, LabelInfraID, spec.InfraID)
	}
	want := p.opts.RunStrategy
	if vm.Spec.RunStrategy != nil && *vm.Spec.RunStrategy == want && vm.Spec.Running == nil {
		return nil
	}
	before := vm.DeepCopy()
	vm.Spec.RunStrategy = &want
	vm.Spec.Running = nil // the API refuses both fields set
	if err := p.c.Patch(ctx, vm, client.MergeFrom(before)); err != nil {
		return p.errf("kubevirt: start %s: set runStrategy %s: %w", m.Node, want, err)
	}
	p.log.Info("kubevirt: run strategy set", "vm", m.Name, "runStrategy", string(want))
	return nil
}

// List returns the VMs labelled with infraID, with power from the VM's
// printable status and addresses from its running instance.
func (p *Provider) List(ctx context.Context, infraID string) ([]platform.VM, error) {
	if infraID == "" {
		return nil, errors.New("kubevirt: list: empty infra ID")
	}
	sel := []client.ListOption{client.InNamespace(p.opts.Namespace), client.MatchingLabels{LabelInfraID: infraID}}
	var vms kubevirtv1.VirtualMachineList
	if err := p.c.List(ctx, &vms, sel...); err != nil {
		return nil, p.errf("kubevirt: list VirtualMachines: %w", err)
	}
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := p.c.List(ctx, &vmis, sel...); err != nil {
		return nil, p.errf("kubevirt: list VirtualMachineInstances: %w", err)
	}
	var secrets corev1.SecretList
	if err := p.c.List(ctx, &secrets, sel...); err != nil {
		return nil, p.errf("kubevirt: list Secrets: %w", err)
	}
	haveSecret := map[string]bool{}
	for _, s := range secrets.Items {
		haveSecret[s.Name] = true
	}
	instances := map[string]*kubevirtv1.VirtualMachineInstance{}
	for i := range vmis.Items {
		instances[vmis.Items[i].Name] = &vmis.Items[i]
	}
	out := make([]platform.VM, 0, len(vms.Items))
	for i := range vms.Items {
		out = append(out, vmStatus(&vms.Items[i], instances[vms.Items[i].Name], haveSecret))
	}
	slices.SortFunc(out, func(a, b platform.VM) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// vmStatus is the platform view of one VM (pure, for tests).
func vmStatus(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, haveSecret map[string]bool) platform.VM {
	v := platform.VM{Name: vm.Name, Node: vm.Labels[LabelNode], Power: power(vm), Complete: true}
	if t := vm.Spec.Template; t != nil {
		for _, ifc := range t.Spec.Domain.Devices.Interfaces {
			if ifc.Name == nicName {
				v.MAC, _ = net.ParseMAC(ifc.MacAddress)
			}
		}
		// The VM is whole when the Secret its config drive reads exists.
		for _, vol := range t.Spec.Volumes {
			if cd := vol.CloudInitConfigDrive; cd != nil && cd.UserDataSecretRef != nil && !haveSecret[cd.UserDataSecretRef.Name] {
				v.Complete = false
			}
		}
	}
	if vmi != nil {
		for _, ifc := range vmi.Status.Interfaces {
			if ifc.Name != nicName {
				continue
			}
			ips := ifc.IPs
			if len(ips) == 0 && ifc.IP != "" {
				ips = []string{ifc.IP}
			}
			for _, s := range ips {
				// Reported addresses may carry a prefix length.
				s, _, _ = strings.Cut(s, "/")
				if a, err := netip.ParseAddr(s); err == nil && !slices.Contains(v.Addresses, a) {
					v.Addresses = append(v.Addresses, a)
				}
			}
		}
	}
	return v
}

// power maps KubeVirt's printable status to a platform power state; a VM
// the controller has not looked at yet is judged by its run strategy.
func power(vm *kubevirtv1.VirtualMachine) platform.Power {
	switch vm.Status.PrintableStatus {
	case kubevirtv1.VirtualMachineStatusRunning, kubevirtv1.VirtualMachineStatusMigrating:
		return platform.PowerRunning
	case kubevirtv1.VirtualMachineStatusStopped:
		return platform.PowerStopped
	case kubevirtv1.VirtualMachineStatusPaused:
		return platform.PowerPaused
	case kubevirtv1.VirtualMachineStatusStarting, kubevirtv1.VirtualMachineStatusProvisioning,
		kubevirtv1.VirtualMachineStatusWaitingForVolumeBinding:
		return platform.PowerStarting
	case "":
		rs, err := vm.RunStrategy()
		if err != nil {
			return platform.PowerUnknown
		}
		if rs == kubevirtv1.RunStrategyHalted {
			return platform.PowerStopped
		}
		return platform.PowerStarting
	}
	return platform.PowerUnknown
}

// Destroy deletes the VirtualMachines, DataVolumes, Secrets and PVCs
// labelled with infraID in the namespace, and waits until the VMs and
// volumes are gone. It returns one line per deleted object.
func (p *Provider) Destroy(ctx context.Context, infraID string) ([]string, error) {
	if infraID == "" {
		return nil, errors.New("kubevirt: destroy: empty infra ID")
	}
	return p.destroy(ctx, infraID, client.MatchingLabels{LabelInfraID: infraID})
}

// DestroyVMs removes the VMs of vms' nodes and every object labelled with
// the infra ID and one of those nodes: the VM, its root disk DataVolume and
// PVC, its Ignition Secret. The golden image, labelled with no node, stays.
func (p *Provider) DestroyVMs(ctx context.Context, infraID string, vms []platform.VM) ([]string, error) {
	if infraID == "" {
		return nil, errors.New("kubevirt: destroy: empty infra ID")
	}
	var nodes []string
	for _, v := range vms {
		if v.Node == "" {
			return nil, fmt.Errorf("kubevirt: destroy: VM %s has no %s label; remove it with kubectl", v.Name, LabelNode)
		}
		nodes = append(nodes, v.Node)
	}
	if len(nodes) == 0 {
		return nil, nil
	}
	infra, err := labels.NewRequirement(LabelInfraID, selection.Equals, []string{infraID})
	if err != nil {
		return nil, fmt.Errorf("kubevirt: destroy: %w", err)
	}
	node, err := labels.NewRequirement(LabelNode, selection.In, nodes)
	if err != nil {
		return nil, fmt.Errorf("kubevirt: destroy: nodes %v: %w", nodes, err)
	}
	return p.destroy(ctx, infraID, client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*infra, *node)})
}

// destroy deletes infraID's VMs, DataVolumes, Secrets and PVCs that match,
// then waits until they are gone.
func (p *Provider) destroy(ctx context.Context, infraID string, match client.ListOption) ([]string, error) {
	sel := []client.ListOption{client.InNamespace(p.opts.Namespace), match}
	var lines []string
	// Foreground for VMs: the VM object stays until its instance and the
	// DataVolumes it owns are gone, so waiting for VMs waits for those.
	// A zero grace period asks for power-off rather than a guest shutdown
	// (the cluster is being thrown away); KubeVirt releases that ignore a
	// delete's grace period stop the guest gracefully instead. The rest go
	// in the background (their PVCs are owned and collected).
	var now int64
	kinds := []struct {
		kind   string
		list   client.ObjectList
		policy metav1.DeletionPropagation
		grace  *int64
	}{
		{"virtualmachine", &kubevirtv1.VirtualMachineList{}, metav1.DeletePropagationForeground, &now},
		{"datavolume", &cdiv1.DataVolumeList{}, metav1.DeletePropagationBackground, nil},
		{"secret", &corev1.SecretList{}, metav1.DeletePropagationBackground, nil},
		{"persistentvolumeclaim", &corev1.PersistentVolumeClaimList{}, metav1.DeletePropagationBackground, nil},
	}
	var (
		errs []error
		mu   sync.Mutex // guards lines and errs against the deleting goroutines
	)
	for _, k := range kinds {
		if err := p.c.List(ctx, k.list, sel...); err != nil {
			errs = append(errs, p.errf("kubevirt: destroy: list %ss: %w", k.kind, err))
			continue
		}
		objs, err := meta.ExtractList(k.list)
		if err != nil {
			errs = append(errs, fmt.Errorf("kubevirt: destroy: %ss: %w", k.kind, err))
			continue
		}
		// Deletes run Options.Parallel at once: one at a time, 109 objects
		// cost a round trip each in sequence.
		var g errgroup.Group
		g.SetLimit(p.opts.Parallel)
		for _, o := range objs {
			obj := o.(client.Object)
			if !ours(obj, infraID) { // belt and braces over the selector
				continue
			}
			if obj.GetDeletionTimestamp() != nil {
				continue
			}
			opts := []client.DeleteOption{client.PropagationPolicy(k.policy)}
			if k.grace != nil {
				opts = append(opts, client.GracePeriodSeconds(*k.grace))
			}
			g.Go(func() error {
				err := p.c.Delete(ctx, obj, opts...)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case apierrors.IsNotFound(err): // collected with its owner meanwhile
				case err != nil:
					errs = append(errs, p.errf("kubevirt: destroy: delete %s %s/%s: %w", k.kind, obj.GetNamespace(), obj.GetName(), err))
				default:
					lines = append(lines, fmt.Sprintf("%s %s/%s", k.kind, obj.GetNamespace(), obj.GetName()))
				}
				return nil
			})
		}
		_ = g.Wait() // errors are collected in errs
	}
	sortLines(lines)
	if err := errors.Join(errs...); err != nil {
		return lines, err
	}
	return lines, p.waitDestroyed(ctx, sel)
}

// sortLines orders Destroy's "kind namespace/name" lines by kind, in
// deletion order, then by name: the deletes finish in any order.
func sortLines(lines []string) {
	order := []string{"virtualmachine", "datavolume", "secret", "persistentvolumeclaim"}
	slices.SortFunc(lines, func(a, b string) int {
		ka, na, _ := strings.Cut(a, " ")
		kb, nb, _ := strings.Cut(b, " ")
		if c := slices.Index(order, ka) - slices.Index(order, kb); c != 0 {
			return c
		}
		return strings.Compare(na, nb)
	})
}

// waitDestroyed polls until no labelled VM, DataVolume or PVC remains, so
// an apply right after destroy does not collide with terminating objects.
// It lists metadata only: a VM's spec is kilobytes, and the question is only
// whether it is still there.
func (p *Provider) waitDestroyed(ctx context.Context, sel []client.ListOption) error {
	ctx, cancel := context.WithTimeout(ctx, p.wait)
	defer cancel()
	// Short first looks, then every quarter second at most: the garbage
	// collector removes the VMs over a few seconds, and a fixed 2 s poll was
	// most of destroy.
	every, most := min(50*time.Millisecond, p.poll), min(250*time.Millisecond, p.poll)
	kinds := []struct {
		kind string
		gvk  schema.GroupVersionKind
	}{
		{"virtualmachine", kubevirtv1.SchemeGroupVersion.WithKind("VirtualMachineList")},
		{"datavolume", cdiv1.SchemeGroupVersion.WithKind("DataVolumeList")},
		{"persistentvolumeclaim", corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaimList")},
	}
	var left []string
	for {
		var now []string
		for _, k := range kinds {
			l := &metav1.PartialObjectMetadataList{}
			l.SetGroupVersionKind(k.gvk)
			if err := p.c.List(ctx, l, sel...); err != nil {
				if ctx.Err() != nil && len(left) > 0 {
					break // the wait is over: report what was left last time
				}
				return p.errf("kubevirt: destroy: wait: %w", err)
			}
			for _, o := range l.Items {
				now = append(now, k.kind+"/"+o.Name)
			}
		}
		if ctx.Err() == nil {
			left = now
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubevirt: destroy: still terminating after %s: %s; see `kubectl -n %s get %s -o yaml` for their finalizers",
				p.wait, strings.Join(left, ", "), p.opts.Namespace, left[0])
		case <-time.After(every):
		}
		every = min(2*every, most)
	}
}

// waitGone polls until the named object no longer exists.
func (p *Provider) waitGone(ctx context.Context, obj client.Object, name string) error {
	ctx, cancel := context.WithTimeout(ctx, p.wait)
	defer cancel()
	for {
		err := p.c.Get(ctx, p.key(name), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return p.errf("kubevirt: wait for %s to go: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubevirt: %s still terminating after %s", name, p.wait)
		case <-time.After(p.poll):
		}
	}
}
