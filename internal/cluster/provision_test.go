package cluster

import (
	"errors"
	"net"
	"strings"
	"testing"
)

func provisionDoc(platform string, section map[string]any) map[string]any {
	doc := baseDoc()
	p := map[string]any{"platform": platform}
	if section != nil {
		p[platform] = section
	}
	doc["provision"] = p
	return doc
}

const testUUID = "3f6a1b2c-0000-4d4e-9a8b-1234567890ab"

func TestProvisionBad(t *testing.T) {
	ovirtOK := map[string]any{"clusterID": testUUID, "storageDomainID": testUUID, "vnicProfileID": testUUID}
	kvOK := map[string]any{"namespace": "ocp", "network": "default/machine-net"}
	cases := []struct {
		name              string
		platform          string
		section           map[string]any
		muts              []mut
		wantPath, wantMsg string
	}{
		{name: "platform missing", platform: "", wantPath: "provision.platform", wantMsg: "required"},
		{name: "platform unknown", platform: "vsphere", wantPath: "provision.platform", wantMsg: `"vsphere" is not a platform`},
		{name: "platform case hint", platform: "Libvirt", wantPath: "provision.platform", wantMsg: "did you mean libvirt?"},
		{name: "unknown field", platform: "libvirt", muts: []mut{{"provision.libvirt.netwrok", "x"}}, wantPath: "provision.libvirt.netwrok", wantMsg: "did you mean network?"},
		{name: "infraID not label", platform: "libvirt", muts: []mut{{"provision.infraID", "Ocp_4"}}, wantPath: "provision.infraID", wantMsg: "not a lowercase DNS label"},
		{name: "parallel range", platform: "libvirt", muts: []mut{{"provision.parallel", 500}}, wantPath: "provision.parallel", wantMsg: "1..64"},
		{name: "size role", platform: "libvirt", muts: []mut{{"provision.sizes.infra", map[string]any{"cpus": 2}}}, wantPath: "provision.sizes.infra", wantMsg: "not a role"},
		{name: "size cpus", platform: "libvirt", muts: []mut{{"provision.sizes.master", map[string]any{"cpus": -1}}}, wantPath: "provision.sizes.master.cpus", wantMsg: "out of range"},
		{name: "size memory", platform: "libvirt", muts: []mut{{"provision.sizes.worker", map[string]any{"memoryMiB": 16}}}, wantPath: "provision.sizes.worker.memoryMiB", wantMsg: "512.."},
		{name: "size disk", platform: "libvirt", muts: []mut{{"provision.sizes.worker", map[string]any{"diskGiB": 100000}}}, wantPath: "provision.sizes.worker.diskGiB", wantMsg: "1..65536"},
		{name: "image two sources", platform: "libvirt", muts: []mut{{"provision.image", map[string]any{"url": "https://x/y", "file": "/a", "sha256": strings.Repeat("a", 64)}}}, wantPath: "provision.image", wantMsg: "at most one"},
		{name: "image url no sha", platform: "libvirt", muts: []mut{{"provision.image", map[string]any{"url": "https://x/y.qcow2.gz"}}}, wantPath: "provision.image.sha256", wantMsg: "required with url"},
		{name: "image url scheme", platform: "libvirt", muts: []mut{{"provision.image", map[string]any{"url": "ftp://x/y", "sha256": strings.Repeat("a", 64)}}}, wantPath: "provision.image.url", wantMsg: "not an http(s) URL"},
		{name: "image url password", platform: "libvirt", muts: []mut{{"provision.image", map[string]any{"url": "https://u:hunter2@x/y", "sha256": strings.Repeat("a", 64)}}}, wantPath: "provision.image.url", wantMsg: "no credentials"},
		{name: "image sha not hex", platform: "libvirt", muts: []mut{{"provision.image", map[string]any{"file": "/a", "sha256": "xyz"}}}, wantPath: "provision.image.sha256", wantMsg: "not a sha256"},
		{name: "image stream and url", platform: "libvirt", muts: []mut{{"provision.image", map[string]any{"stream": "https://s/rhcos.json", "url": "https://x/y", "sha256": strings.Repeat("a", 64)}}}, wantPath: "provision.image.stream", wantMsg: "only read when none"},
		{name: "image flavor", platform: "libvirt", muts: []mut{{"provision.image", map[string]any{"file": "/a", "flavor": "vmware"}}}, wantPath: "provision.image.flavor", wantMsg: "qemu (Ignition over fw_cfg)"},
		{name: "image flavor with stream", platform: "libvirt", muts: []mut{{"provision.image", map[string]any{"flavor": "qemu"}}}, wantPath: "provision.image.flavor", wantMsg: "set without url or file"},
		{name: "image arch", platform: "libvirt", muts: []mut{{"provision.image", map[string]any{"arch": "amd64"}}}, wantPath: "provision.image.arch", wantMsg: "want x86_64"},
		{name: "containerDisk not kubevirt", platform: "libvirt", muts: []mut{{"provision.image", map[string]any{"containerDisk": "quay.io/x/rhcos:1"}}}, wantPath: "provision.image.containerDisk", wantMsg: "only KubeVirt"},
		{name: "libvirt uri", platform: "libvirt", section: map[string]any{"uri": "not a uri"}, wantPath: "provision.libvirt.uri", wantMsg: "not a libvirt URI"},
		{name: "libvirt uri password", platform: "libvirt", section: map[string]any{"uri": "qemu+tcp://root:pw@host/system"}, wantPath: "provision.libvirt.uri", wantMsg: "no credentials"},
		{name: "libvirt network and bridge", platform: "libvirt", section: map[string]any{"network": "default", "bridge": "br0"}, wantPath: "provision.libvirt.bridge", wantMsg: "remove one"},
		{name: "libvirt bridge name", platform: "libvirt", section: map[string]any{"bridge": "this-name-is-far-too-long"}, wantPath: "provision.libvirt.bridge", wantMsg: "this-name-is-far-too-long"},
		{name: "libvirt domain type", platform: "libvirt", section: map[string]any{"domainType": "xen"}, wantPath: "provision.libvirt.domainType", wantMsg: "kvm or qemu"},
		{name: "other platform's section", platform: "libvirt", muts: []mut{{"provision.ovirt", ovirtOK}}, wantPath: "provision.ovirt", wantMsg: "provision.platform is libvirt"},
		{name: "ovirt cluster missing", platform: "ovirt", section: map[string]any{"storageDomainID": testUUID}, wantPath: "provision.ovirt.clusterID", wantMsg: "required"},
		{name: "ovirt storage not uuid", platform: "ovirt", section: map[string]any{"clusterID": testUUID, "storageDomainID": "data"}, wantPath: "provision.ovirt.storageDomainID", wantMsg: "not a UUID"},
		{name: "ovirt vnic not uuid", platform: "ovirt", section: map[string]any{"clusterID": testUUID, "storageDomainID": testUUID, "vnicProfileID": "ovirtmgmt"}, wantPath: "provision.ovirt.vnicProfileID", wantMsg: "not a UUID"},
		{name: "ovirt vnic missing", platform: "ovirt", section: map[string]any{"clusterID": testUUID, "storageDomainID": testUUID}, wantPath: "provision.ovirt.vnicProfileID", wantMsg: "required"},
		{name: "ovirt affinity", platform: "ovirt", section: map[string]any{"clusterID": testUUID, "storageDomainID": testUUID, "vnicProfileID": testUUID, "affinity": "hard"}, wantPath: "provision.ovirt.affinity", wantMsg: "want enforcing, soft"},
		{name: "libvirt socket relative", platform: "libvirt", section: map[string]any{"socket": "libvirt-sock"}, wantPath: "provision.libvirt.socket", wantMsg: "absolute path"},
		{name: "libvirt firmware", platform: "libvirt", section: map[string]any{"firmware": "uefi"}, wantPath: "provision.libvirt.firmware", wantMsg: "bios or efi"},
		{name: "ovirt password field", platform: "ovirt", section: map[string]any{"clusterID": testUUID, "storageDomainID": testUUID, "vnicProfileID": testUUID, "password": "x"}, wantPath: "provision.ovirt.password", wantMsg: "unknown field"},
		{name: "kubevirt namespace", platform: "kubevirt", section: map[string]any{"network": "n"}, wantPath: "provision.kubevirt.namespace", wantMsg: "required"},
		{name: "kubevirt namespace bad", platform: "kubevirt", section: map[string]any{"namespace": "Bad_NS", "network": "n"}, wantPath: "provision.kubevirt.namespace", wantMsg: "not a namespace name"},
		{name: "kubevirt network", platform: "kubevirt", section: map[string]any{"namespace": "ocp"}, wantPath: "provision.kubevirt.network", wantMsg: "required"},
		{name: "kubevirt network shape", platform: "kubevirt", section: map[string]any{"namespace": "ocp", "network": "a/b/c"}, wantPath: "provision.kubevirt.network", wantMsg: "more than one /"},
		{name: "kubevirt local file", platform: "kubevirt", section: kvOK, muts: []mut{{"provision.image", map[string]any{"file": "/tmp/rhcos.qcow2"}}}, wantPath: "provision.image.file", wantMsg: "not a local file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := provisionDoc(tc.platform, tc.section)
			for _, m := range tc.muts {
				set(t, doc, m.path, m.val)
			}
			data := render(t, doc)
			_, err := Parse(data)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want a *ValidationError, got %v\n%s", err, data)
			}
			for _, p := range ve.Problems {
				if p.Path == tc.wantPath && strings.Contains(p.Message, tc.wantMsg) {
					if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), ":pw@") {
						t.Errorf("a credential leaked into the error: %v", err)
					}
					return
				}
			}
			t.Errorf("no problem at %q containing %q; got:\n%v", tc.wantPath, tc.wantMsg, err)
		})
	}
}

func TestProvisionGood(t *testing.T) {
	t.Run("absent", func(t *testing.T) {
		c, err := Parse(render(t, baseDoc()))
		if err != nil {
			t.Fatal(err)
		}
		if c.Provision != nil {
			t.Fatalf("Provision = %+v, want nil without a section", c.Provision)
		}
	})
	t.Run("libvirt defaults", func(t *testing.T) {
		c, err := Parse(render(t, provisionDoc("libvirt", nil)))
		if err != nil {
			t.Fatal(err)
		}
		p := c.Provision
		want := LibvirtPlatform{URI: DefaultLibvirtURI, Pool: DefaultLibvirtPool, Network: DefaultLibvirtNetwork, DomainType: "kvm"}
		if p.Libvirt != want || p.Parallel != DefaultProvisionParallel {
			t.Errorf("libvirt = %+v parallel %d; want %+v, %d", p.Libvirt, p.Parallel, want, DefaultProvisionParallel)
		}
		if p.Sizes[RoleMaster] != DefaultSizes[RoleMaster] || p.Sizes[RoleWorker] != DefaultSizes[RoleWorker] {
			t.Errorf("sizes = %+v", p.Sizes)
		}
	})
	t.Run("size override keeps other fields", func(t *testing.T) {
		doc := provisionDoc("libvirt", map[string]any{"bridge": "br0", "domainType": "qemu"})
		set(t, doc, "provision.sizes", map[string]any{"worker": map[string]any{"cpus": 8}})
		c, err := Parse(render(t, doc))
		if err != nil {
			t.Fatal(err)
		}
		got := c.Provision.Sizes[RoleWorker]
		if got != (Size{CPUs: 8, MemoryMiB: 8192, DiskGiB: 120}) {
			t.Errorf("worker size = %+v", got)
		}
		if c.Provision.Libvirt.Network != "" || c.Provision.Libvirt.Bridge != "br0" {
			t.Errorf("libvirt = %+v; a bridge must not get the default network too", c.Provision.Libvirt)
		}
		if DefaultSizes[RoleWorker].CPUs != 2 {
			t.Fatal("an override changed DefaultSizes")
		}
	})
	t.Run("derived MACs fill only missing ones", func(t *testing.T) {
		doc := provisionDoc("ovirt", map[string]any{"clusterID": testUUID, "storageDomainID": testUUID, "vnicProfileID": testUUID})
		set(t, doc, "nodes[1].mac", nil)
		set(t, doc, "nodes[2].mac", nil)
		c, err := Parse(render(t, doc))
		if err != nil {
			t.Fatal(err)
		}
		if c.Nodes[0].MAC.String() != "52:54:00:7e:00:09" {
			t.Errorf("configured MAC replaced: %s", c.Nodes[0].MAC)
		}
		for _, i := range []int{1, 2} {
			n := c.Nodes[i]
			if want := DeriveMAC(c.Cluster, n.Name); n.MAC.String() != want.String() {
				t.Errorf("%s: MAC %s, want derived %s", n.Name, n.MAC, want)
			}
		}
	})
	t.Run("no derived MACs without provision", func(t *testing.T) {
		doc := baseDoc()
		set(t, doc, "nodes[1].mac", nil)
		c, err := Parse(render(t, doc))
		if err != nil {
			t.Fatal(err)
		}
		if c.Nodes[1].MAC != nil {
			t.Errorf("MAC %s derived without a provision section; bare-metal nodes keep their real NICs", c.Nodes[1].MAC)
		}
	})
	t.Run("kubevirt", func(t *testing.T) {
		doc := provisionDoc("kubevirt", map[string]any{"namespace": "ocp", "network": "default/machine-net"})
		set(t, doc, "provision.image", map[string]any{"containerDisk": "quay.io/x/rhcos:4.19"})
		c, err := Parse(render(t, doc))
		if err != nil {
			t.Fatal(err)
		}
		if c.Provision.KubeVirt.Network != "default/machine-net" || c.Provision.Image.ContainerDisk == "" {
			t.Errorf("kubevirt = %+v image %+v", c.Provision.KubeVirt, c.Provision.Image)
		}
	})
}

func TestDeriveMAC(t *testing.T) {
	c := Cluster{Name: "ocp4", BaseDomain: "example.com"}
	a, b := DeriveMAC(c, "master-0"), DeriveMAC(c, "master-0")
	if a.String() != b.String() {
		t.Fatalf("not deterministic: %s vs %s", a, b)
	}
	if a[0]&0x02 == 0 || a[0]&0x01 != 0 {
		t.Errorf("%s is not a locally administered unicast address", a)
	}
	seen := map[string]string{}
	for _, cl := range []Cluster{c, {Name: "ocp5", BaseDomain: "example.com"}, {Name: "ocp4", BaseDomain: "example.org"}} {
		for _, n := range []string{"bootstrap", "master-0", "master-1", "master-2", "worker-0", "worker-1"} {
			m := DeriveMAC(cl, n)
			if len(m) != 6 {
				t.Fatalf("len %d", len(m))
			}
			key := m.String()
			if prev, dup := seen[key]; dup {
				t.Errorf("%s/%s and %s share %s", cl.Domain(), n, prev, key)
			}
			seen[key] = cl.Domain() + "/" + n
		}
	}
	// Pinned: a change here moves every provisioned cluster's addresses.
	if got, want := DeriveMAC(c, "master-0"), mustMAC(t, "02:98:4a:ff:1a:9b"); got.String() != want.String() {
		t.Errorf("DeriveMAC(ocp4.example.com, master-0) = %s; the derivation changed (want %s)", got, want)
	}
}

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	m, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
