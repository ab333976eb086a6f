package libvirt

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"libvirt.org/go/libvirtxml"

	"appliance/platform"
)

// IgnitionFWCfgKey is the fw_cfg entry qemu-flavoured CoreOS images read
// their Ignition config from.
const IgnitionFWCfgKey = "opt/com.coreos/config"

// poolInfo is what the builders need to know about the storage pool.
type poolInfo struct {
	Name string
	// Path is the pool's target directory; a volume's path in a directory
	// pool is Path/name, which lets a domain be defined before its volumes.
	Path string
}

// volPath predicts a volume's path in the pool.
func (p poolInfo) volPath(name string) string { return path.Join(p.Path, name) }

// nodeVolumes are the volumes one node owns, in creation order.
type nodeVolumes struct {
	Disk string
	// Ignition is the fw_cfg file volume (qemu flavour), ConfigDrive the ISO
	// (openstack flavour); exactly one is set.
	Ignition, ConfigDrive string
}

// volumesFor names m's volumes; the names start with the machine's name,
// which starts with the infra ID.
func volumesFor(flavor platform.Flavor, m platform.Machine) nodeVolumes {
	v := nodeVolumes{Disk: m.Name + ".qcow2"}
	if flavor == platform.FlavorOpenStack {
		v.ConfigDrive = m.Name + "-config.iso"
	} else {
		v.Ignition = m.Name + ".ign"
	}
	return v
}

// baseVolumeName names the uploaded base image after the infra ID and the
// image digest, so a different image gets a new volume.
func baseVolumeName(img platform.Image, infraID string) string {
	ext := "img"
	if img.Format == "qcow2" {
		ext = "qcow2"
	}
	sum := img.SHA256
	if len(sum) > 16 {
		sum = sum[:16]
	}
	return fmt.Sprintf("%s-base-%s.%s", infraID, sum, ext)
}

// imageDomainName names the marker domain that owns the base images.
func imageDomainName(infraID string) string { return infraID + "-base-image" }

// hostSettings are the provider options the domain XML depends on.
type hostSettings struct {
	DomainType string // "kvm" or "qemu" (TCG)
	Machine    string // machine type, "" for libvirt's default
	Firmware   string // "" (BIOS) or "efi"
	Network    string // libvirt network name, or
	Bridge     string // host bridge name
}

// validateMachine rejects a machine the domain cannot be built from.
func validateMachine(m platform.Machine) error {
	var errs []error
	if m.Name == "" || strings.ContainsAny(m.Name, "/\x00") {
		errs = append(errs, fmt.Errorf("name %q is not a valid domain name", m.Name))
	}
	if m.CPUs <= 0 {
		errs = append(errs, fmt.Errorf("cpus %d must be positive", m.CPUs))
	}
	if m.MemoryMiB <= 0 {
		errs = append(errs, fmt.Errorf("memoryMiB %d must be positive", m.MemoryMiB))
	}
	if m.DiskGiB < 0 {
		errs = append(errs, fmt.Errorf("diskGiB %d must not be negative", m.DiskGiB))
	}
	if len(m.MAC) != 6 {
		errs = append(errs, fmt.Errorf("mac %q is not a 6-byte MAC address", m.MAC))
	}
	if len(m.Ignition) == 0 {
		errs = append(errs, errors.New("ignition config is empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("libvirt: machine %s: %w", m.Node, err)
	}
	return nil
}

// buildNodeDomain is the domain for machine m: pure, so it can be tested
// without a daemon. uuid is "" on first definition and the existing UUID
// when redefining (libvirt refuses a second UUID for the same name).
func buildNodeDomain(spec *platform.Spec, m platform.Machine, pool poolInfo, hs hostSettings, uuid string, complete bool) (*libvirtxml.Domain, error) {
	if err := validateMachine(m); err != nil {
		return nil, err
	}
	if (hs.Network == "") == (hs.Bridge == "") {
		return nil, errors.New("libvirt: exactly one of network and bridge must be set")
	}
	meta, err := encodeMark(nodeMark(spec, m, pool, complete))
	if err != nil {
		return nil, err
	}
	vols := volumesFor(spec.Image.Flavor, m)
	zero := uint(0)

	d := &libvirtxml.Domain{
		Type:  hs.DomainType,
		Name:  m.Name,
		UUID:  uuid,
		Title: fmt.Sprintf("%s %s", clusterFQDN(spec), m.Node),
		Description: fmt.Sprintf("appliance provision: %s node %s of cluster %s (infra ID %s)",
			m.Role, m.Node, clusterFQDN(spec), spec.InfraID),
		Metadata: &libvirtxml.DomainMetadata{XML: meta},
		Memory:   &libvirtxml.DomainMemory{Value: uint(m.MemoryMiB), Unit: "MiB"},
		VCPU:     &libvirtxml.DomainVCPU{Value: uint(m.CPUs)},
		OS: &libvirtxml.DomainOS{
			Type:        &libvirtxml.DomainOSType{Type: "hvm", Arch: "x86_64", Machine: hs.Machine},
			Firmware:    hs.Firmware,
			BootDevices: []libvirtxml.DomainBootDevice{{Dev: "hd"}},
		},
		Features: &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}, APIC: &libvirtxml.DomainFeatureAPIC{}},
		// KVM passes the host CPU through; TCG emulates the richest model it
		// has, since current CoreOS needs more than qemu64's x86-64 baseline.
		CPU:        &libvirtxml.DomainCPU{Mode: "maximum"},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			Disks: []libvirtxml.DomainDisk{{
				Device: "disk",
				Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2"},
				Source: &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: pool.Name, Volume: vols.Disk}},
				Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
			}},
			Interfaces: []libvirtxml.DomainInterface{nic(m, hs)},
			Serials: []libvirtxml.DomainSerial{{
				Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
				Target: &libvirtxml.DomainSerialTarget{Port: &zero},
			}},
			Consoles: []libvirtxml.DomainConsole{{
				Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
				Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: &zero},
			}},
			// The guest agent reports addresses on bridges where libvirt
			// sees no DHCP lease.
			Channels: []libvirtxml.DomainChannel{{
				Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{}},
				Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: "org.qemu.guest_agent.0"}},
			}},
			RNGs: []libvirtxml.DomainRNG{{
				Model:   "virtio",
				Backend: &libvirtxml.DomainRNGBackend{Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"}},
			}},
		},
	}
	if hs.DomainType == "kvm" {
		d.CPU.Mode = "host-passthrough"
	}
	switch {
	case vols.Ignition != "":
		d.SysInfo = []libvirtxml.DomainSysInfo{{FWCfg: &libvirtxml.DomainSysInfoFWCfg{
			Entry: []libvirtxml.DomainSysInfoEntry{{Name: IgnitionFWCfgKey, File: pool.volPath(vols.Ignition)}},
		}}}
	case vols.ConfigDrive != "":
		d.Devices.Disks = append(d.Devices.Disks, libvirtxml.DomainDisk{
			Device:   "cdrom",
			Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
			Source:   &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: pool.Name, Volume: vols.ConfigDrive}},
			Target:   &libvirtxml.DomainDiskTarget{Dev: "sda", Bus: "sata"},
			ReadOnly: &libvirtxml.DomainDiskReadOnly{},
		})
	}
	return d, nil
}

func nic(m platform.Machine, hs hostSettings) libvirtxml.DomainInterface {
	ifc := libvirtxml.DomainInterface{
		MAC:   &libvirtxml.DomainInterfaceMAC{Address: m.MAC.String()},
		Model: &libvirtxml.DomainInterfaceModel{Type: "virtio"},
	}
	if hs.Network != "" {
		ifc.Source = &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: hs.Network}}
	} else {
		ifc.Source = &libvirtxml.DomainInterfaceSource{Bridge: &libvirtxml.DomainInterfaceSourceBridge{Bridge: hs.Bridge}}
	}
	return ifc
}

func clusterFQDN(spec *platform.Spec) string {
	if spec.BaseDomain == "" {
		return spec.ClusterName
	}
	return spec.ClusterName + "." + spec.BaseDomain
}

// buildImageDomain is the never-started marker domain that owns the base
// image volumes; defining it before an upload starts means even a half
// uploaded image is found and removed by destroy.
func buildImageDomain(infraID string, mk Mark, domainType, uuid string) (*libvirtxml.Domain, error) {
	meta, err := encodeMark(mk)
	if err != nil {
		return nil, err
	}
	return &libvirtxml.Domain{
		Type:        domainType,
		Name:        imageDomainName(infraID),
		UUID:        uuid,
		Title:       "appliance base image marker (never started)",
		Description: fmt.Sprintf("appliance provision: owns the base image volumes of infra ID %s; removed by `appliance provision destroy`. Not a VM: do not start.", infraID),
		Metadata:    &libvirtxml.DomainMetadata{XML: meta},
		Memory:      &libvirtxml.DomainMemory{Value: 16, Unit: "MiB"},
		VCPU:        &libvirtxml.DomainVCPU{Value: 1},
		OS:          &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm", Arch: "x86_64"}},
	}, nil
}

// baseVolumeXML is a volume sized for an upload of img.
func baseVolumeXML(name string, img platform.Image) (string, error) {
	format := img.Format
	if format == "" {
		format = "qcow2"
	}
	v := libvirtxml.StorageVolume{
		Name:       name,
		Capacity:   &libvirtxml.StorageVolumeSize{Value: uint64(img.Size), Unit: "bytes"},
		Allocation: &libvirtxml.StorageVolumeSize{Value: 0, Unit: "bytes"},
		Target:     &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: format}},
	}
	return v.Marshal()
}

// overlayVolumeXML is a node's qcow2 disk backed by the base image; its
// capacity is DiskGiB, never smaller than the base image's virtual size.
func overlayVolumeXML(name string, diskGiB int, basePath, baseFormat string, baseCapacity uint64) (string, error) {
	capacity := uint64(diskGiB) << 30
	if capacity < baseCapacity {
		capacity = baseCapacity
	}
	if baseFormat == "" {
		baseFormat = "qcow2"
	}
	v := libvirtxml.StorageVolume{
		Name:         name,
		Capacity:     &libvirtxml.StorageVolumeSize{Value: capacity, Unit: "bytes"},
		Target:       &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
		BackingStore: &libvirtxml.StorageVolumeBackingStore{Path: basePath, Format: &libvirtxml.StorageVolumeTargetFormat{Type: baseFormat}},
	}
	return v.Marshal()
}

// rawVolumeXML is a raw volume of exactly size bytes (Ignition, config drive).
func rawVolumeXML(name string, size int64) (string, error) {
	v := libvirtxml.StorageVolume{
		Name:     name,
		Capacity: &libvirtxml.StorageVolumeSize{Value: uint64(size), Unit: "bytes"},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "raw"}},
	}
	return v.Marshal()
}
