package kubevirt

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// DefaultTopologyKey spreads nodes of one role group across hosts.
const DefaultTopologyKey = "kubernetes.io/hostname"

// Options says where and how the VMs are created. Credentials are never
// options: they come only from the kubeconfig file.
type Options struct {
	// Kubeconfig is the kubeconfig file; empty means $KUBECONFIG, then
	// ~/.kube/config.
	Kubeconfig string
	// Context is the kubeconfig context; empty means its current context.
	Context string
	// Namespace holds every object; empty means the context's namespace,
	// then "default".
	Namespace string
	// Network is the Multus NetworkAttachmentDefinition of the machine
	// network, "name" (in Namespace) or "namespace/name". Required: the
	// nodes' MACs, DHCP reservations and VIPs live on it.
	Network string
	// StorageClass for the golden image and the root disks; empty means the
	// cluster's default class.
	StorageClass string
	// NodeSelector restricts the infra nodes the VMs may run on.
	NodeSelector map[string]string
	// TopologyKey is the node label that anti-affinity spreads over
	// (default kubernetes.io/hostname).
	TopologyKey string
	// RequireAntiAffinity makes anti-affinity a hard rule: a VM stays
	// unscheduled rather than share a host with a peer of its group.
	RequireAntiAffinity bool
	// RunStrategy is what Start sets: Always (default) or RerunOnFailure.
	// VMs are created Halted either way.
	RunStrategy kubevirtv1.VirtualMachineRunStrategy
	// ImageDiskGiB sizes the golden image volume; 0 means the image's
	// virtual size (read from the qcow2 header) or, failing that, RHCOS's
	// 16 GiB, plus 1 GiB of headroom.
	ImageDiskGiB int
	// EphemeralContainerDisk boots Image.ContainerDisk as a containerDisk
	// volume, which loses every write when the VM stops — only for
	// throwaway clusters. By default a container disk is imported into a
	// persistent root DataVolume per node.
	EphemeralContainerDisk bool
	// WaitForImport makes PrepareImage wait until the golden image is
	// imported, reporting progress. Without it PrepareImage returns at
	// once and the root disk clones wait for the import on the cluster.
	WaitForImport bool
	// Insecure skips TLS verification of the API server. Only when the
	// user asks for it explicitly.
	Insecure bool
	// Parallel bounds the requests Destroy has in flight at once (apply's
	// machines are bounded by the engine); 0 means 8.
	Parallel int
}

// validate checks the options a user wrote, naming the field at fault.
func (o *Options) validate() error {
	if o.Network == "" {
		return fmt.Errorf("kubevirt: network: empty; name the NetworkAttachmentDefinition of the machine network (\"name\" or \"namespace/name\")")
	}
	ns, name, ok := strings.Cut(o.Network, "/")
	if !ok {
		ns, name = "", o.Network
	}
	if ns != "" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("kubevirt: network %q: namespace: %s", o.Network, strings.Join(errs, "; "))
		}
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || strings.Contains(name, "/") {
		return fmt.Errorf("kubevirt: network %q: not a NetworkAttachmentDefinition name (\"name\" or \"namespace/name\")", o.Network)
	}
	if o.Namespace != "" {
		if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
			return fmt.Errorf("kubevirt: namespace %q: %s", o.Namespace, strings.Join(errs, "; "))
		}
	}
	switch o.RunStrategy {
	case "", kubevirtv1.RunStrategyAlways, kubevirtv1.RunStrategyRerunOnFailure:
	default:
		return fmt.Errorf("kubevirt: runStrategy %q: use Always or RerunOnFailure", o.RunStrategy)
	}
	if o.ImageDiskGiB < 0 {
		return fmt.Errorf("kubevirt: imageDiskGiB %d: must not be negative", o.ImageDiskGiB)
	}
	return nil
}

// withDefaults fills the fields that have defaults.
func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.TopologyKey == "" {
		o.TopologyKey = DefaultTopologyKey
	}
	if o.RunStrategy == "" {
		o.RunStrategy = kubevirtv1.RunStrategyAlways
	}
	if o.Parallel <= 0 {
		o.Parallel = 8
	}
	return o
}
