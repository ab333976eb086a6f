package platform

import (
	"context"
	"net"
	"net/netip"

	"appliance/internal/cluster"
)

// Spec is everything a provider needs to build the cluster's VMs.
type Spec struct {
	// InfraID marks every resource created for this cluster (tag, label or
	// metadata) and prefixes resource names. It comes from the installer's
	// metadata.json when present, else from the cluster name.
	InfraID string
	// ClusterName and BaseDomain name the cluster, for descriptions.
	ClusterName, BaseDomain string
	// Image is the base disk every node boots from.
	Image Image
	// Machines lists the VMs in a stable order: bootstrap, masters, workers.
	Machines []Machine
}

// Image is the base OS image, already on local disk (see package images).
type Image struct {
	// Path is the uncompressed image file.
	Path string
	// Format is the disk format of the file at Path: "qcow2" or "raw".
	Format string
	// SHA256 is the hex digest of the file at Path (with no Path, of the
	// file at URL); providers use it to name and recognise an upload or
	// import they finished before.
	SHA256 string
	// Size is the file size in bytes.
	Size int64
	// Flavor says how the image reads its Ignition config: FlavorQEMU images
	// read it from fw_cfg, FlavorOpenStack images from a config drive.
	Flavor Flavor
	// URL is where a platform that imports images itself (a KubeVirt
	// DataVolume) fetches it; empty when only Path is known.
	URL string
	// ContainerDisk is a container image holding the disk, for KubeVirt's
	// containerDisk instead of a DataVolume; empty for none.
	ContainerDisk string
}

// Flavor is how an image finds its Ignition config.
type Flavor string

// Image flavours.
const (
	FlavorQEMU      Flavor = "qemu"      // fw_cfg opt/com.coreos/config
	FlavorOpenStack Flavor = "openstack" // config drive (label config-2)
)

// Machine is one VM the cluster needs.
type Machine struct {
	// Name is the VM's name on the platform: "<infraID>-<node>".
	Name string
	// Node is the node's name in appliance.yaml (its host name).
	Node string
	Role cluster.Role
	CPUs int
	// MemoryMiB and DiskGiB size the VM.
	MemoryMiB int
	DiskGiB   int
	// MAC is the NIC's address: configured, or derived from the cluster and
	// node name so DHCP reservations and DNS records exist before boot.
	MAC net.HardwareAddr
	// IPs are the addresses the node is expected to get (for display).
	IPs []netip.Addr
	// Ignition is the config the VM boots with; IgnitionSource says where it
	// was read (e.g. "assets/master.ign") for plan output.
	Ignition       []byte
	IgnitionSource string
}

// Power is a VM's power state as the platform reports it.
type Power string

// Power states.
const (
	PowerRunning  Power = "running"
	PowerStopped  Power = "stopped"
	PowerStarting Power = "starting"
	PowerPaused   Power = "paused"
	PowerUnknown  Power = "unknown"
)

// VM is a machine that exists on the platform and carries the cluster's mark.
type VM struct {
	// Name is the VM's platform name; Node is the node it was created for
	// (read back from the mark, not parsed from the name).
	Name, Node string
	Power      Power
	MAC        net.HardwareAddr
	// Addresses are what the platform reports (DHCP leases, guest agent);
	// empty when it knows none yet.
	Addresses []netip.Addr
	// Complete is false when creation was interrupted before the VM was
	// fully built (apply finishes it).
	Complete bool
}

// Provider is one platform. Every method is idempotent and safe to call
// again after an interruption at any point: it finishes or reuses what an
// earlier call left, and never creates a second copy of anything.
type Provider interface {
	// List returns the VMs carrying infraID's mark (tag, label, metadata).
	List(ctx context.Context, infraID string) ([]VM, error)
	// PrepareImage makes spec.Image usable by Create (a storage volume, a
	// template, a DataVolume), reusing a complete earlier upload and replacing
	// an incomplete one. progress, when not nil, is called with bytes done
	// and total.
	PrepareImage(ctx context.Context, spec *Spec, progress func(done, total int64)) error
	// Create builds m's VM without starting it, or completes a partly built
	// one. stage, when not nil, reports each step for the progress line.
	Create(ctx context.Context, spec *Spec, m Machine, stage func(string)) error
	// Start powers m's VM on; starting a running VM is not an error.
	Start(ctx context.Context, spec *Spec, m Machine) error
	// Destroy removes every resource carrying infraID's mark (VMs, disks,
	// templates, secrets, groups) and nothing else, and returns a line per
	// removed resource.
	Destroy(ctx context.Context, infraID string) ([]string, error)
	// DestroyVMs removes the given VMs (as List reported them; each must
	// carry infraID's mark) and what each owns alone: its disks, its
	// Ignition volume or Secret. What the cluster's VMs share (the base
	// image, a template, groups, tags) stays. It returns a line per removed
	// resource; a VM already gone is not an error.
	DestroyVMs(ctx context.Context, infraID string, vms []VM) ([]string, error)
	// Close releases the connection.
	Close() error
}
