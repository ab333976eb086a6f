package cluster

import (
	"crypto/sha256"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
)

// Platforms `appliance provision` creates VMs on.
const (
	PlatformLibvirt  = "libvirt"
	PlatformOVirt    = "ovirt"
	PlatformKubeVirt = "kubevirt"
)

// Provision defaults.
const (
	DefaultProvisionParallel = 8
	DefaultLibvirtURI        = "qemu:///system"
	DefaultLibvirtPool       = "default"
	DefaultLibvirtNetwork    = "default"
)

// Provision configures `appliance provision`: where the cluster's VMs are
// created and how big they are. It is nil when appliance.yaml has no
// provision section.
type Provision struct {
	Platform string // PlatformLibvirt, PlatformOVirt or PlatformKubeVirt
	// InfraID marks everything created; "" means the installer's
	// metadata.json, else the cluster name.
	InfraID string
	// Parallel bounds how many VMs are built at once.
	Parallel int
	Image    ProvisionImage
	// Sizes holds the VM size of each role.
	Sizes    map[Role]Size
	Libvirt  LibvirtPlatform
	OVirt    OVirtPlatform
	KubeVirt KubeVirtPlatform
}

// ProvisionImage says where the base OS image comes from: a local file, a
// URL, or (the default) the RHCOS stream metadata.
type ProvisionImage struct {
	Stream string // stream metadata URL or file; "" means the built-in default
	Arch   string // architecture picked from the stream; "" means x86_64
	URL    string // a direct image URL instead of the stream
	// SHA256 is the digest of the file at URL as downloaded (required with
	// URL), or of File (optional; checked when set).
	SHA256   string
	File     string // a local, uncompressed image file instead of a download
	CacheDir string // "" means the user's cache directory
	// Flavor says how a URL or File image reads Ignition: "qemu" (fw_cfg)
	// or "openstack" (config drive); "" means the platform's usual one.
	Flavor string
	// ContainerDisk is a container image holding the disk (KubeVirt only).
	ContainerDisk string
}

// Size is one VM's shape.
type Size struct {
	CPUs      int
	MemoryMiB int
	DiskGiB   int
}

// DefaultSizes are OpenShift's documented minimums per role.
var DefaultSizes = map[Role]Size{
	RoleBootstrap: {CPUs: 4, MemoryMiB: 16384, DiskGiB: 120},
	RoleMaster:    {CPUs: 4, MemoryMiB: 16384, DiskGiB: 120},
	RoleWorker:    {CPUs: 2, MemoryMiB: 8192, DiskGiB: 120},
}

// LibvirtPlatform places VMs on a libvirt host.
type LibvirtPlatform struct {
	URI        string // e.g. qemu:///system, qemu+tcp://host/system
	Pool       string // storage pool for the base image and node disks
	Network    string // libvirt network; exclusive with Bridge
	Bridge     string // host bridge; exclusive with Network
	DomainType string // "kvm" (default) or "qemu" (software emulation)
	// Socket overrides a local URI's unix socket path.
	Socket   string
	Machine  string // machine type, e.g. q35; "" means libvirt's default
	Firmware string // "" (BIOS) or "efi"
}

// OVirtPlatform places VMs on an oVirt/RHV engine. The engine URL and the
// credentials are read from CredentialsFile or the environment, never from
// appliance.yaml itself.
type OVirtPlatform struct {
	CredentialsFile string // "" means ~/.ovirt/ovirt-config.yaml or OVIRT_* variables
	ClusterID       string
	StorageDomainID string
	VNICProfileID   string
	// Affinity is "enforcing" (default), "soft" or "none": the negative VM
	// affinity groups that keep masters (and workers) on different hosts.
	Affinity string
	// Insecure skips TLS verification of the engine: an explicit opt-out.
	Insecure bool
}

// KubeVirtPlatform places VMs in a KubeVirt namespace.
type KubeVirtPlatform struct {
	Kubeconfig   string // "" means $KUBECONFIG, then ~/.kube/config
	Context      string
	Namespace    string
	Network      string // Multus NetworkAttachmentDefinition, "name" or "ns/name"
	StorageClass string // "" means the cluster default
}

type rawProvision struct {
	Platform string             `json:"platform"`
	InfraID  string             `json:"infraID"`
	Parallel int                `json:"parallel"`
	Image    rawProvisionImage  `json:"image"`
	Sizes    map[string]rawSize `json:"sizes"`
	Libvirt  rawLibvirt         `json:"libvirt"`
	OVirt    rawOVirt           `json:"ovirt"`
	KubeVirt rawKubeVirt        `json:"kubevirt"`
}

type rawProvisionImage struct {
	Stream        string `json:"stream"`
	Arch          string `json:"arch"`
	URL           string `json:"url"`
	SHA256        string `json:"sha256"`
	File          string `json:"file"`
	CacheDir      string `json:"cacheDir"`
	Flavor        string `json:"flavor"`
	ContainerDisk string `json:"containerDisk"`
}

type rawSize struct {
	CPUs      int `json:"cpus"`
	MemoryMiB int `json:"memoryMiB"`
	DiskGiB   int `json:"diskGiB"`
}

type rawLibvirt struct {
	URI        string `json:"uri"`
	Pool       string `json:"pool"`
	Network    string `json:"network"`
	Bridge     string `json:"bridge"`
	DomainType string `json:"domainType"`
	Socket     string `json:"socket"`
	Machine    string `json:"machine"`
	Firmware   string `json:"firmware"`
}

type rawOVirt struct {
	CredentialsFile string `json:"credentialsFile"`
	ClusterID       string `json:"clusterID"`
	StorageDomainID string `json:"storageDomainID"`
	VNICProfileID   string `json:"vnicProfileID"`
	Affinity        string `json:"affinity"`
	Insecure        bool   `json:"insecure"`
}

type rawKubeVirt struct {
	Kubeconfig   string `json:"kubeconfig"`
	Context      string `json:"context"`
	Namespace    string `json:"namespace"`
	Network      string `json:"network"`
	StorageClass string `json:"storageClass"`
}

// DeriveMAC is the MAC address a node gets when appliance.yaml gives none:
// locally administered, unicast, and a pure function of the cluster domain
// and node name, so DHCP reservations and DNS records are known before any
// VM exists and a re-run of provision gives the same address.
func DeriveMAC(c Cluster, node string) net.HardwareAddr {
	h := sha256.Sum256([]byte("appliance/mac/v1\x00" + c.Domain() + "\x00" + node))
	// 0x02: the locally-administered bit set, the multicast bit clear.
	return net.HardwareAddr{0x02, h[0], h[1], h[2], h[3], h[4]}
}

// provision validates the provision section and, when it is present, gives
// every node without a configured MAC its derived one.
func (v *validator) provision(r *rawConfig, c *Config) {
	rp := r.Provision
	if rp == nil {
		return
	}
	p := &Provision{Platform: rp.Platform, InfraID: rp.InfraID, Parallel: rp.Parallel}
	c.Provision = p

	switch rp.Platform {
	case PlatformLibvirt, PlatformOVirt, PlatformKubeVirt:
	case "":
		v.add("provision.platform", "required: libvirt, ovirt or kubevirt")
	default:
		v.add("provision.platform", "%q is not a platform (want libvirt, ovirt or kubevirt)%s", rp.Platform, lowerHint(rp.Platform, func(s string) bool {
			return s == PlatformLibvirt || s == PlatformOVirt || s == PlatformKubeVirt
		}))
	}
	if rp.InfraID != "" && (!isDNSLabel(rp.InfraID) || len(rp.InfraID) > 40) {
		v.add("provision.infraID", "%q is not a lowercase DNS label of at most 40 characters (VM names are <infraID>-<node>)", rp.InfraID)
	}
	switch {
	case rp.Parallel == 0:
		p.Parallel = DefaultProvisionParallel
	case rp.Parallel < 1 || rp.Parallel > 64:
		v.add("provision.parallel", "%d is out of range; want 1..64 VMs built at once", rp.Parallel)
	}

	v.provisionImage(rp, p)
	v.sizes(rp, p)
	switch rp.Platform {
	case PlatformLibvirt:
		v.libvirt(rp, p)
	case PlatformOVirt:
		v.ovirt(rp, p)
	case PlatformKubeVirt:
		v.kubevirt(rp, p)
	}
	for _, other := range []string{PlatformLibvirt, PlatformOVirt, PlatformKubeVirt} {
		if other != rp.Platform && rp.Platform != "" && platformSet(rp, other) {
			v.add("provision."+other, "set, but provision.platform is %s; remove this section or change the platform", rp.Platform)
		}
	}

	// Derived MACs for the nodes that have none; a derived one may not
	// collide with a configured one (vanishingly unlikely, but then the fix
	// is to configure this node's MAC too).
	used := map[string]string{}
	for i, n := range c.Nodes {
		if n.MAC != nil {
			used[n.MAC.String()] = fmt.Sprintf("nodes[%d].mac", i)
		}
	}
	for i := range c.Nodes {
		n := &c.Nodes[i]
		if n.MAC != nil || n.Name == "" {
			continue
		}
		m := DeriveMAC(c.Cluster, n.Name)
		if prev, dup := used[m.String()]; dup {
			v.add(fmt.Sprintf("nodes[%d].mac", i), "the derived MAC %s equals %s; set this node's mac explicitly", m, v.p(prev))
			continue
		}
		used[m.String()] = fmt.Sprintf("nodes[%d].mac", i)
		n.MAC = m
	}
}

func platformSet(rp *rawProvision, name string) bool {
	switch name {
	case PlatformLibvirt:
		return rp.Libvirt != rawLibvirt{}
	case PlatformOVirt:
		return rp.OVirt != rawOVirt{}
	default:
		return rp.KubeVirt != rawKubeVirt{}
	}
}

func (v *validator) provisionImage(rp *rawProvision, p *Provision) {
	ri := rp.Image
	p.Image = ProvisionImage(ri)
	sources := 0
	for _, s := range []string{ri.URL, ri.File, ri.ContainerDisk} {
		if s != "" {
			sources++
		}
	}
	if sources > 1 {
		v.add("provision.image", "url, file and containerDisk are alternatives; set at most one")
	}
	if ri.Stream != "" && sources > 0 {
		v.add("provision.image.stream", "set together with url, file or containerDisk; the stream is only read when none of them is given")
	}
	if ri.Stream != "" && strings.Contains(ri.Stream, "://") {
		v.httpURL("provision.image.stream", ri.Stream)
	}
	if ri.URL != "" {
		v.httpURL("provision.image.url", ri.URL)
		if ri.SHA256 == "" {
			v.add("provision.image.sha256", "required with url: the sha256 of the file at url (as downloaded), so the download can be verified")
		}
	}
	if ri.SHA256 != "" {
		if !isHexDigest(ri.SHA256) {
			v.add("provision.image.sha256", "%q is not a sha256 digest (want 64 lowercase hex digits)", ri.SHA256)
		}
		if ri.URL == "" && ri.File == "" {
			v.add("provision.image.sha256", "set without url or file; the stream metadata carries its own digests")
		}
	}
	switch ri.Flavor {
	case "", "qemu", "openstack":
	default:
		v.add("provision.image.flavor", "%q is not a flavour; want qemu (Ignition over fw_cfg) or openstack (config drive)", ri.Flavor)
	}
	if ri.Flavor != "" && ri.URL == "" && ri.File == "" {
		v.add("provision.image.flavor", "set without url or file; a stream image's flavour follows the platform")
	}
	switch ri.Arch {
	case "", "x86_64", "aarch64", "ppc64le", "s390x":
	default:
		v.add("provision.image.arch", "%q is not an RHCOS architecture; want x86_64, aarch64, ppc64le or s390x", ri.Arch)
	}
	if ri.ContainerDisk != "" && rp.Platform != PlatformKubeVirt && rp.Platform != "" {
		v.add("provision.image.containerDisk", "only KubeVirt boots from a container disk; use stream, url or file for %s", rp.Platform)
	}
}

func (v *validator) httpURL(path, s string) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.add(path, "%q is not an http(s) URL", s)
		return
	}
	if u.User != nil {
		// A password in a URL ends up in logs; refuse it rather than echo it.
		v.add(path, "carries user information; put no credentials in appliance.yaml")
	}
}

func isHexDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

func (v *validator) sizes(rp *rawProvision, p *Provision) {
	p.Sizes = map[Role]Size{}
	for role, d := range DefaultSizes {
		p.Sizes[role] = d
	}
	roles := []string{string(RoleBootstrap), string(RoleMaster), string(RoleWorker)}
	for _, k := range slicesSortedKeys(rp.Sizes) {
		rs := rp.Sizes[k]
		base := "provision.sizes." + k
		if !slices.Contains(roles, k) {
			v.add(base, "not a role; want bootstrap, master or worker")
			continue
		}
		s := p.Sizes[Role(k)]
		if rs.CPUs != 0 {
			if rs.CPUs < 1 || rs.CPUs > 512 {
				v.add(base+".cpus", "%d is out of range; want 1..512", rs.CPUs)
			}
			s.CPUs = rs.CPUs
		}
		if rs.MemoryMiB != 0 {
			if rs.MemoryMiB < 512 || rs.MemoryMiB > 16<<20 {
				v.add(base+".memoryMiB", "%d is out of range; want 512..16777216 MiB (16384 is 16 GiB)", rs.MemoryMiB)
			}
			s.MemoryMiB = rs.MemoryMiB
		}
		if rs.DiskGiB != 0 {
			if rs.DiskGiB < 1 || rs.DiskGiB > 65536 {
				v.add(base+".diskGiB", "%d is out of range; want 1..65536 GiB", rs.DiskGiB)
			}
			s.DiskGiB = rs.DiskGiB
		}
		p.Sizes[Role(k)] = s
	}
}

func slicesSortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func (v *validator) libvirt(rp *rawProvision, p *Provision) {
	l := rp.Libvirt
	p.Libvirt = LibvirtPlatform(l)
	out := &p.Libvirt
	if out.URI == "" {
		out.URI = DefaultLibvirtURI
	} else if u, err := url.Parse(out.URI); err != nil || u.Scheme == "" {
		v.add("provision.libvirt.uri", "%q is not a libvirt URI (want e.g. qemu:///system or qemu+tcp://host/system)", out.URI)
	} else if u.User != nil {
		if _, hasPass := u.User.Password(); hasPass {
			v.add("provision.libvirt.uri", "carries a password; put no credentials in appliance.yaml")
		}
	}
	if out.Pool == "" {
		out.Pool = DefaultLibvirtPool
	}
	switch {
	case l.Network != "" && l.Bridge != "":
		v.add("provision.libvirt.bridge", "set together with network; a NIC joins one of them, remove one")
	case l.Network == "" && l.Bridge == "":
		out.Network = DefaultLibvirtNetwork
	}
	if l.Bridge != "" {
		if why := badIfName(l.Bridge); why != "" {
			v.add("provision.libvirt.bridge", "%q %s", l.Bridge, why)
		}
	}
	if l.Socket != "" && !strings.HasPrefix(l.Socket, "/") {
		v.add("provision.libvirt.socket", "%q is not an absolute path to a unix socket", l.Socket)
	}
	switch l.Firmware {
	case "", "bios", "efi":
	default:
		v.add("provision.libvirt.firmware", "%q is not a firmware; want bios or efi", l.Firmware)
	}
	switch l.DomainType {
	case "":
		out.DomainType = "kvm"
	case "kvm", "qemu":
	default:
		v.add("provision.libvirt.domainType", "%q is not a domain type; want kvm or qemu (software emulation)", l.DomainType)
	}
}

func (v *validator) ovirt(rp *rawProvision, p *Provision) {
	o := rp.OVirt
	p.OVirt = OVirtPlatform(o)
	for _, f := range []struct{ path, val string }{
		{"provision.ovirt.clusterID", o.ClusterID},
		{"provision.ovirt.storageDomainID", o.StorageDomainID},
		{"provision.ovirt.vnicProfileID", o.VNICProfileID},
	} {
		if f.val == "" {
			v.add(f.path, "required: the engine's ID (a UUID) to create the VMs in")
		} else if !isUUID(f.val) {
			v.add(f.path, "%q is not a UUID (want e.g. 3f6a1b2c-0000-4d4e-9a8b-1234567890ab)", f.val)
		}
	}
	switch o.Affinity {
	case "":
		p.OVirt.Affinity = "enforcing"
	case "enforcing", "soft", "none":
	default:
		v.add("provision.ovirt.affinity", "%q is not an affinity mode; want enforcing, soft (when there are fewer hosts than masters) or none", o.Affinity)
	}
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

func (v *validator) kubevirt(rp *rawProvision, p *Provision) {
	k := rp.KubeVirt
	p.KubeVirt = KubeVirtPlatform(k)
	switch {
	case k.Namespace == "":
		v.add("provision.kubevirt.namespace", "required: the namespace the VMs are created in")
	case !isDNSLabel(k.Namespace):
		v.add("provision.kubevirt.namespace", "%q is not a namespace name (%s)", k.Namespace, labelRule)
	}
	if k.Network == "" {
		v.add("provision.kubevirt.network", "required: the Multus NetworkAttachmentDefinition (name or namespace/name) on the machine network")
	} else {
		for _, part := range strings.Split(k.Network, "/") {
			if !isDNSLabel(part) {
				v.add("provision.kubevirt.network", "%q is not name or namespace/name", k.Network)
				break
			}
		}
		if strings.Count(k.Network, "/") > 1 {
			v.add("provision.kubevirt.network", "%q has more than one /", k.Network)
		}
	}
	if p.Image.ContainerDisk == "" && p.Image.URL == "" && p.Image.File != "" {
		v.add("provision.image.file", "KubeVirt imports the image itself; give url (or containerDisk), not a local file")
	}
}
