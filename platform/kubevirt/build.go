package kubevirt

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"appliance/platform"
)

// CDI annotations on the golden DataVolume: bind at once even with a
// WaitForFirstConsumer storage class (nothing ever consumes the golden
// volume but clones), and keep the DataVolume after the import so a re-run
// finds it.
const (
	annBindImmediate       = "cdi.kubevirt.io/storage.bind.immediate.requested"
	annDeleteAfterComplete = "cdi.kubevirt.io/storage.deleteAfterCompletion"
)

// Names of the VM's NIC/network, disks and the Secret key KubeVirt reads.
const (
	nicName       = "nic0"
	rootDiskName  = "rootdisk"
	cloudInitName = "cloudinitdisk"
	userDataKey   = "userdata"
	// maxSecretBytes is the API server's limit on a Secret's data.
	maxSecretBytes = 1 << 20
)

// GoldenName is the golden image DataVolume's name.
func GoldenName(infraID string) string { return infraID + "-rhcos" }

// SecretName is the name of m's Ignition Secret.
func SecretName(m platform.Machine) string { return m.Name + "-ignition" }

// RootDiskName is the name of m's root disk DataVolume.
func RootDiskName(m platform.Machine) string { return m.Name + "-rootdisk" }

// checkMachine rejects a machine whose names or labels a cluster would
// refuse, before anything is sent.
func checkMachine(spec *platform.Spec, m platform.Machine, opts Options) error {
	if errs := validation.IsValidLabelValue(spec.InfraID); spec.InfraID == "" || len(errs) > 0 {
		return fmt.Errorf("kubevirt: infra ID %q is not a valid label value: %s", spec.InfraID, strings.Join(errs, "; "))
	}
	// The VM name becomes a label value and the launcher pod's name prefix,
	// hence a DNS label; the DataVolume and Secret names add a suffix.
	for _, n := range []string{m.Name, RootDiskName(m), SecretName(m)} {
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			return fmt.Errorf("kubevirt: node %s: name %q: %s", m.Node, n, strings.Join(errs, "; "))
		}
	}
	if errs := validation.IsDNS1123Label(m.Node); len(errs) > 0 {
		return fmt.Errorf("kubevirt: node %q: not a host name: %s", m.Node, strings.Join(errs, "; "))
	}
	if m.CPUs <= 0 || m.MemoryMiB <= 0 {
		return fmt.Errorf("kubevirt: node %s: cpus %d, memoryMiB %d: both must be positive", m.Node, m.CPUs, m.MemoryMiB)
	}
	if spec.Image.ContainerDisk == "" || !opts.EphemeralContainerDisk {
		if m.DiskGiB <= 0 {
			return fmt.Errorf("kubevirt: node %s: diskGiB %d: must be positive", m.Node, m.DiskGiB)
		}
	}
	if len(m.MAC) != 6 {
		return fmt.Errorf("kubevirt: node %s: MAC %q is not a 48-bit address", m.Node, m.MAC)
	}
	if len(m.Ignition) > maxSecretBytes {
		return fmt.Errorf("kubevirt: node %s: Ignition from %s is %d bytes, over the %d-byte Secret limit; give `appliance provision apply --serve-ignition ADDR:PORT` to serve it over HTTPS behind a small pointer config", m.Node, m.IgnitionSource, len(m.Ignition), maxSecretBytes)
	}
	return nil
}

// gib is n GiB as a quantity.
func gib(n int) resource.Quantity { return *resource.NewQuantity(int64(n)<<30, resource.BinarySI) }

// BuildGoldenDataVolume is the DataVolume that imports spec.Image.URL once;
// every root disk is cloned from it. sizeGiB is the volume size (at least
// the image's virtual size).
func BuildGoldenDataVolume(spec *platform.Spec, opts Options, sizeGiB int) *cdiv1.DataVolume {
	dv := &cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: cdiv1.SchemeGroupVersion.String(), Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      GoldenName(spec.InfraID),
			Namespace: opts.Namespace,
			Labels:    map[string]string{LabelInfraID: spec.InfraID},
			Annotations: map[string]string{
				AnnotationImageSHA256:  spec.Image.SHA256,
				AnnotationImageSource:  safeURL(spec.Image.URL),
				annBindImmediate:       "true",
				annDeleteAfterComplete: "false",
			},
		},
		Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: spec.Image.URL}},
			Storage: storage(opts, sizeGiB),
		},
	}
	return dv
}

// storage is a StorageSpec of size GiB in the configured class; CDI fills in
// access and volume modes from the class's StorageProfile.
func storage(opts Options, sizeGiB int) *cdiv1.StorageSpec {
	s := &cdiv1.StorageSpec{
		Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: gib(sizeGiB)},
		},
	}
	if opts.StorageClass != "" {
		sc := opts.StorageClass
		s.StorageClassName = &sc
	}
	return s
}

// BuildSecret is m's Ignition Secret, read by the VM's config drive.
func BuildSecret(spec *platform.Spec, m platform.Machine, opts Options) *corev1.Secret {
	sum := sha256.Sum256(m.Ignition)
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        SecretName(m),
			Namespace:   opts.Namespace,
			Labels:      machineLabels(spec.InfraID, m),
			Annotations: map[string]string{AnnotationIgnitionSHA256: hex.EncodeToString(sum[:])},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{userDataKey: m.Ignition},
	}
}

// BuildVirtualMachine is m's VirtualMachine, created Halted: Start sets the
// run strategy once every VM exists.
func BuildVirtualMachine(spec *platform.Spec, m platform.Machine, opts Options) *kubevirtv1.VirtualMachine {
	labels := machineLabels(spec.InfraID, m)
	halted := kubevirtv1.RunStrategyHalted
	mem := resource.NewQuantity(int64(m.MemoryMiB)<<20, resource.BinarySI)
	bootOrder := uint(1)

	vm := &kubevirtv1.VirtualMachine{
		TypeMeta: metav1.TypeMeta{APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachine"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      m.Name,
			Namespace: opts.Namespace,
			Labels:    maps.Clone(labels),
		},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: &halted,
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				// The launcher pod inherits these labels; anti-affinity
				// matches on them.
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels)},
				Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Hostname:     m.Node,
					NodeSelector: maps.Clone(opts.NodeSelector),
					Affinity:     antiAffinity(spec.InfraID, m, opts),
					Domain: kubevirtv1.DomainSpec{
						CPU:    &kubevirtv1.CPU{Cores: uint32(m.CPUs), Sockets: 1, Threads: 1},
						Memory: &kubevirtv1.Memory{Guest: mem},
						Devices: kubevirtv1.Devices{
							Disks: []kubevirtv1.Disk{
								{
									Name:       rootDiskName,
									BootOrder:  &bootOrder,
									DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}},
								},
								{
									Name:       cloudInitName,
									DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}},
								},
							},
							Interfaces: []kubevirtv1.Interface{{
								Name:                   nicName,
								Model:                  "virtio",
								InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}},
								MacAddress:             m.MAC.String(),
							}},
						},
					},
					Networks: []kubevirtv1.Network{{
						Name:          nicName,
						NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: opts.Network}},
					}},
					Volumes: []kubevirtv1.Volume{
						rootVolume(spec, m, opts),
						{
							Name: cloudInitName,
							VolumeSource: kubevirtv1.VolumeSource{CloudInitConfigDrive: &kubevirtv1.CloudInitConfigDriveSource{
								UserDataSecretRef: &corev1.LocalObjectReference{Name: SecretName(m)},
							}},
						},
					},
				},
			},
		},
	}
	if dvt := rootDataVolumeTemplate(spec, m, opts); dvt != nil {
		vm.Spec.DataVolumeTemplates = []kubevirtv1.DataVolumeTemplateSpec{*dvt}
	}
	return vm
}

// rootVolume is the VM's root disk: a DataVolume from the template, or the
// container disk itself when ephemeral disks were asked for.
func rootVolume(spec *platform.Spec, m platform.Machine, opts Options) kubevirtv1.Volume {
	if spec.Image.ContainerDisk != "" && opts.EphemeralContainerDisk {
		return kubevirtv1.Volume{Name: rootDiskName, VolumeSource: kubevirtv1.VolumeSource{
			ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: spec.Image.ContainerDisk},
		}}
	}
	return kubevirtv1.Volume{Name: rootDiskName, VolumeSource: kubevirtv1.VolumeSource{
		DataVolume: &kubevirtv1.DataVolumeSource{Name: RootDiskName(m)},
	}}
}

// rootDataVolumeTemplate is the root disk DataVolume KubeVirt creates with
// (and owns by) the VM: a clone of the golden volume, or an import of the
// container disk. Nil for an ephemeral container disk.
func rootDataVolumeTemplate(spec *platform.Spec, m platform.Machine, opts Options) *kubevirtv1.DataVolumeTemplateSpec {
	var src cdiv1.DataVolumeSource
	switch {
	case spec.Image.ContainerDisk != "" && opts.EphemeralContainerDisk:
		return nil
	case spec.Image.ContainerDisk != "":
		url := "docker://" + strings.TrimPrefix(spec.Image.ContainerDisk, "docker://")
		src.Registry = &cdiv1.DataVolumeSourceRegistry{URL: &url}
	default:
		src.PVC = &cdiv1.DataVolumeSourcePVC{Namespace: opts.Namespace, Name: GoldenName(spec.InfraID)}
	}
	return &kubevirtv1.DataVolumeTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Name: RootDiskName(m), Labels: machineLabels(spec.InfraID, m)},
		Spec: cdiv1.DataVolumeSpec{
			Source:  &src,
			Storage: storage(opts, m.DiskGiB),
		},
	}
}

// antiAffinity keeps VMs of one group (control plane, compute) of this
// cluster on different hosts: preferred by default so a small infra cluster
// still schedules them, required when asked.
func antiAffinity(infraID string, m platform.Machine, opts Options) *corev1.Affinity {
	term := corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
			LabelInfraID: infraID,
			LabelGroup:   group(m.Role),
		}},
		TopologyKey: opts.TopologyKey,
	}
	aa := &corev1.PodAntiAffinity{}
	if opts.RequireAntiAffinity {
		aa.RequiredDuringSchedulingIgnoredDuringExecution = []corev1.PodAffinityTerm{term}
	} else {
		aa.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: term}}
	}
	return &corev1.Affinity{PodAntiAffinity: aa}
}
