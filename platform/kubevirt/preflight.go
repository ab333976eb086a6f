package kubevirt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/platform"
)

// The APIs this package speaks, and the releases it is built and tested
// against; refusals name them so a user can compare with the cluster.
const (
	KubeVirtAPI     = "kubevirt.io/v1"
	KubeVirtRelease = "v1.8.2"
	CDIAPI          = "cdi.kubevirt.io/v1beta1"
	CDIRelease      = "v1.64.0"
	// MultusAPI serves the NetworkAttachmentDefinition the NIC names.
	MultusAPI = "k8s.cni.cncf.io/v1"
)

// Default-class annotations: Kubernetes' own, and KubeVirt's for VM disks
// (CDI prefers the latter).
const (
	annDefaultClass     = "storageclass.kubernetes.io/is-default-class"
	annDefaultVirtClass = "storageclass.kubevirt.io/is-default-virt-class"
)

// usesCDI says whether spec's VMs need DataVolumes (all but an ephemeral
// container disk do).
func (p *Provider) usesCDI(spec *platform.Spec) bool {
	return spec.Image.ContainerDisk == "" || !p.opts.EphemeralContainerDisk
}

// where names the API server for messages.
func (p *Provider) where() string {
	if p.host == "" {
		return "the API server"
	}
	return p.host
}

// Preflight checks, without creating anything, what spec's VMs need from
// the cluster: every machine's names and Ignition size, the namespace,
// KubeVirt's and CDI's APIs, Multus' API and the named network, the storage
// class (or a default one), and that the credentials may create the
// objects. Every refusal is returned at once, joined, each naming the
// object, where it was looked for and the fix. What the credentials may not
// read (a cluster-scoped StorageClass for a namespace-bound user) cannot be
// checked, and comes back as a warning instead.
func (p *Provider) Preflight(ctx context.Context, spec *platform.Spec) (warnings []string, err error) {
	var errs []error
	refuse := func(format string, args ...any) { errs = append(errs, p.errf(format, args...)) }
	warn := func(format string, args ...any) { warnings = append(warnings, fmt.Sprintf(format, args...)) }

	for _, m := range spec.Machines {
		if err := checkMachine(spec, m, p.opts); err != nil {
			errs = append(errs, err)
		}
	}
	cdi := p.usesCDI(spec)

	// APIs first: without KubeVirt nothing else matters.
	apis := []struct {
		gk      schema.GroupKind
		version string
		need    bool
		missing string
	}{
		{schema.GroupKind{Group: "kubevirt.io", Kind: "VirtualMachine"}, "v1", true,
			fmt.Sprintf("KubeVirt is not installed there; this appliance creates %s VirtualMachines (built against KubeVirt %s); install KubeVirt, or pick the cluster that has it with provision.kubevirt.context", KubeVirtAPI, KubeVirtRelease)},
		{schema.GroupKind{Group: "kubevirt.io", Kind: "VirtualMachineInstance"}, "v1", true,
			fmt.Sprintf("KubeVirt is not installed there (or too old); this appliance reads %s VirtualMachineInstances (built against KubeVirt %s)", KubeVirtAPI, KubeVirtRelease)},
		{schema.GroupKind{Group: "cdi.kubevirt.io", Kind: "DataVolume"}, "v1beta1", cdi,
			fmt.Sprintf("CDI (the Containerized Data Importer) is not installed there; the root disks are %s DataVolumes (built against CDI %s); install CDI", CDIAPI, CDIRelease)},
	}
	for _, a := range apis {
		if !a.need {
			continue
		}
		ok, err := p.served(a.gk, a.version)
		switch {
		case err != nil:
			refuse("kubevirt: %s: discover %s/%s %s: %w", p.where(), a.gk.Group, a.version, a.gk.Kind, err)
		case !ok:
			refuse("kubevirt: %s serves no %s in %s/%s: %s", p.where(), a.gk.Kind, a.gk.Group, a.version, a.missing)
		}
		if a.gk.Kind == "VirtualMachine" && !ok {
			// Without KubeVirt the rest is noise.
			return warnings, errors.Join(errs...)
		}
	}

	ns := p.opts.Namespace
	nsMissing := false
	switch err := p.c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); {
	case apierrors.IsNotFound(err):
		nsMissing = true
		refuse("kubevirt: namespace %q not found on %s; create it (kubectl create namespace %s) or set provision.kubevirt.namespace to an existing one", ns, p.where(), ns)
	case apierrors.IsForbidden(err):
		warn("kubevirt: these credentials may not read namespace %q on %s; its existence is not checked", ns, p.where())
	case err != nil:
		refuse("kubevirt: namespace %q on %s: %w", ns, p.where(), err)
	}

	p.checkNetwork(ctx, nsMissing, refuse, warn)
	if cdi {
		p.checkStorageClass(ctx, refuse, warn)
	}
	if !nsMissing {
		p.checkAccess(ctx, spec, refuse, warn)
	}
	return warnings, errors.Join(errs...)
}

// served says whether the API server serves gk at version.
func (p *Provider) served(gk schema.GroupKind, version string) (bool, error) {
	_, err := p.c.RESTMapper().RESTMapping(gk, version)
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	return err == nil, err
}

// networkKey is the NetworkAttachmentDefinition opts.Network names.
func (p *Provider) networkKey() client.ObjectKey {
	ns, name, ok := strings.Cut(p.opts.Network, "/")
	if !ok {
		ns, name = p.opts.Namespace, p.opts.Network
	}
	return client.ObjectKey{Namespace: ns, Name: name}
}

// checkNetwork refuses a missing Multus API or network. nsMissing skips the
// lookup when the network would live in the namespace already refused.
func (p *Provider) checkNetwork(ctx context.Context, nsMissing bool, refuse, warn func(string, ...any)) {
	key := p.networkKey()
	gk := schema.GroupKind{Group: "k8s.cni.cncf.io", Kind: "NetworkAttachmentDefinition"}
	ok, err := p.served(gk, "v1")
	switch {
	case err != nil:
		refuse("kubevirt: %s: discover %s NetworkAttachmentDefinition: %w", p.where(), MultusAPI, err)
		return
	case !ok:
		refuse("kubevirt: %s serves no NetworkAttachmentDefinition in %s: Multus is not installed, and the VMs' NIC joins the machine network through it (provision.kubevirt.network %q); install Multus (OpenShift has it) and create that network",
			p.where(), MultusAPI, p.opts.Network)
		return
	}
	if nsMissing && key.Namespace == p.opts.Namespace {
		return
	}
	nad := &unstructured.Unstructured{}
	nad.SetGroupVersionKind(gk.WithVersion("v1"))
	switch err := p.c.Get(ctx, key, nad); {
	case apierrors.IsNotFound(err):
		refuse("kubevirt: network: NetworkAttachmentDefinition %s not found on %s (provision.kubevirt.network %q); create it, or name an existing one (kubectl get network-attachment-definitions -A lists them)",
			key, p.where(), p.opts.Network)
	case apierrors.IsForbidden(err):
		warn("kubevirt: these credentials may not read NetworkAttachmentDefinition %s on %s; not checked: the VMs will not start if it does not exist", key, p.where())
	case err != nil:
		refuse("kubevirt: network: get NetworkAttachmentDefinition %s on %s: %w", key, p.where(), err)
	}
}

// checkStorageClass refuses a named class that does not exist, or no class
// named and no default one: the root disks would stay Pending forever.
func (p *Provider) checkStorageClass(ctx context.Context, refuse, warn func(string, ...any)) {
	var list storagev1.StorageClassList
	err := p.c.List(ctx, &list)
	if apierrors.IsForbidden(err) {
		// Classes are cluster-scoped; a namespace-bound user often may not
		// read them. Try the one named, in case a single get is allowed.
		if sc := p.opts.StorageClass; sc != "" {
			switch err := p.c.Get(ctx, client.ObjectKey{Name: sc}, &storagev1.StorageClass{}); {
			case err == nil:
				return
			case apierrors.IsNotFound(err):
				refuse("kubevirt: StorageClass %q not found on %s (provision.kubevirt.storageClass); name an existing one (kubectl get storageclass)", sc, p.where())
				return
			}
		}
		what := "the default StorageClass"
		if p.opts.StorageClass != "" {
			what = fmt.Sprintf("StorageClass %q", p.opts.StorageClass)
		}
		warn("kubevirt: these credentials may not read StorageClasses (cluster-scoped) on %s; %s is not checked: the disks stay Pending if it does not exist", p.where(), what)
		return
	}
	if err != nil {
		refuse("kubevirt: list StorageClasses on %s: %w", p.where(), err)
		return
	}
	var names, defaults []string
	for _, sc := range list.Items {
		names = append(names, sc.Name)
		if sc.Annotations[annDefaultClass] == "true" || sc.Annotations[annDefaultVirtClass] == "true" {
			defaults = append(defaults, sc.Name)
		}
	}
	slices.Sort(names)
	have := "it has none"
	if len(names) > 0 {
		have = "it has " + strings.Join(names, ", ")
	}
	if sc := p.opts.StorageClass; sc != "" {
		if !slices.Contains(names, sc) {
			refuse("kubevirt: StorageClass %q not found on %s (provision.kubevirt.storageClass); %s", sc, p.where(), have)
		}
		return
	}
	if len(defaults) == 0 {
		refuse("kubevirt: no StorageClass named and none is the default on %s (annotation %s=true); set provision.kubevirt.storageClass (%s) or mark one default",
			p.where(), annDefaultClass, have)
	}
}

// access is one permission the VMs need.
type access struct {
	verb, group, resource, subresource string
	why                                string
}

// checkAccess asks the API server (SelfSubjectAccessReview) whether the
// credentials may do what apply does in the namespace.
func (p *Provider) checkAccess(ctx context.Context, spec *platform.Spec, refuse, warn func(string, ...any)) {
	need := []access{
		{verb: "list", resource: "secrets", why: "finding what an earlier apply made"},
		{verb: "create", resource: "secrets", why: "the Ignition configs"},
		{verb: "list", group: "kubevirt.io", resource: "virtualmachines", why: "finding what an earlier apply made"},
		{verb: "list", group: "kubevirt.io", resource: "virtualmachineinstances", why: "reading the VMs' addresses"},
		{verb: "create", group: "kubevirt.io", resource: "virtualmachines", why: "the VMs"},
		{verb: "patch", group: "kubevirt.io", resource: "virtualmachines", why: "starting the VMs"},
	}
	if p.usesCDI(spec) {
		need = append(need, access{verb: "create", group: "cdi.kubevirt.io", resource: "datavolumes", why: "the disks"})
		if spec.Image.ContainerDisk == "" {
			// KubeVirt admits a VM whose disk clones a PVC only when its
			// creator may clone from the source namespace.
			need = append(need, access{verb: "create", group: "cdi.kubevirt.io", resource: "datavolumes", subresource: "source", why: "cloning the golden image"})
		}
	}
	// The reviews are independent: ask them all at once, report in order.
	reviews := make([]*authorizationv1.SelfSubjectAccessReview, len(need))
	errs := make([]error, len(need))
	var g errgroup.Group
	for i, a := range need {
		reviews[i] = &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: p.opts.Namespace, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource,
			},
		}}
		g.Go(func() error { errs[i] = p.c.Create(ctx, reviews[i]); return nil })
	}
	_ = g.Wait() // errors are in errs
	for i, a := range need {
		what := a.resource
		if a.group != "" {
			what += "." + a.group
		}
		if a.subresource != "" {
			what += "/" + a.subresource
		}
		r := reviews[i]
		if err := errs[i]; err != nil {
			warn("kubevirt: cannot ask %s whether these credentials may %s %s in namespace %s: %v", p.where(), a.verb, what, p.opts.Namespace, err)
			continue
		}
		if r.Status.Allowed {
			continue
		}
		reason := ""
		if r.Status.Reason != "" {
			reason = " (" + r.Status.Reason + ")"
		}
		refuse("kubevirt: these credentials may not %s %s in namespace %s on %s, needed for %s%s; ask an administrator for a RoleBinding in %s to a role that grants it (KubeVirt's kubevirt.io:edit and CDI's cdi.kubevirt.io:edit do)",
			a.verb, what, p.opts.Namespace, p.where(), a.why, reason, p.opts.Namespace)
	}
}
