package libvirt

import (
	"net"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"appliance/internal/cluster"
	"appliance/platform"
)

func testSpec(flavor platform.Flavor) *platform.Spec {
	return &platform.Spec{InfraID: "ocp4-x7k2p", ClusterName: "ocp4", BaseDomain: "example.com",
		Image: platform.Image{Path: "/img/rhcos.qcow2", Format: "qcow2", SHA256: strings.Repeat("ab", 32), Size: 1 << 20, Flavor: flavor}}
}

func testMachine() platform.Machine {
	mac, _ := net.ParseMAC("52:54:00:7e:00:10")
	return platform.Machine{Name: "ocp4-x7k2p-master-0", Node: "master-0", Role: cluster.Role("master"),
		CPUs: 4, MemoryMiB: 16384, DiskGiB: 120, MAC: mac, Ignition: []byte(`{"ignition":{"version":"3.2.0"}}`)}
}

var interTag = regexp.MustCompile(`>\s+<`)

// compactXML drops the indentation between tags, for substring checks.
func compactXML(s string) string { return interTag.ReplaceAllString(s, "><") }

func TestBuildNodeDomain(t *testing.T) {
	pool := poolInfo{Name: "images", Path: "/var/lib/libvirt/images"}
	for _, tc := range []struct {
		name     string
		flavor   platform.Flavor
		hs       hostSettings
		uuid     string
		complete bool
		check    func(t *testing.T, d *libvirtxml.Domain, doc string)
	}{
		{"qemu flavour on a network", platform.FlavorQEMU, hostSettings{DomainType: "kvm", Network: "ocp"}, "", false,
			func(t *testing.T, d *libvirtxml.Domain, doc string) {
				if d.Type != "kvm" || d.CPU.Mode != "host-passthrough" {
					t.Errorf("type %s cpu %s", d.Type, d.CPU.Mode)
				}
				if len(d.SysInfo) != 1 || d.SysInfo[0].FWCfg == nil || d.SysInfo[0].FWCfg.Entry[0].Name != IgnitionFWCfgKey ||
					d.SysInfo[0].FWCfg.Entry[0].File != "/var/lib/libvirt/images/ocp4-x7k2p-master-0.ign" {
					t.Errorf("fw_cfg: %s", doc)
				}
				if len(d.Devices.Disks) != 1 {
					t.Errorf("want one disk, got %d", len(d.Devices.Disks))
				}
				if s := d.Devices.Interfaces[0].Source; s.Network == nil || s.Network.Network != "ocp" {
					t.Errorf("nic source: %s", doc)
				}
				for _, want := range []string{
					`<sysinfo type="fwcfg"><entry name="opt/com.coreos/config" file="/var/lib/libvirt/images/ocp4-x7k2p-master-0.ign"></entry></sysinfo>`,
					`<memory unit="MiB">16384</memory>`, `<vcpu>4</vcpu>`,
					`<disk type="volume" device="disk"><driver name="qemu" type="qcow2"></driver><source pool="images" volume="ocp4-x7k2p-master-0.qcow2"></source><target dev="vda" bus="virtio"></target></disk>`,
					`<interface type="network"><mac address="52:54:00:7e:00:10"></mac><source network="ocp"></source><model type="virtio"></model></interface>`,
					`<serial type="pty"><target port="0"></target></serial>`,
					`<console type="pty"><target type="serial" port="0"></target></console>`,
					`name="org.qemu.guest_agent.0"`,
					`<uuid>`, // absent: checked below
				} {
					if want == `<uuid>` {
						if strings.Contains(doc, want) {
							t.Errorf("first definition carries a uuid")
						}
						continue
					}
					if !strings.Contains(doc, want) {
						t.Errorf("XML lacks %s\n%s", want, doc)
					}
				}
			}},
		{"openstack flavour on a bridge, TCG, redefinition", platform.FlavorOpenStack, hostSettings{DomainType: "qemu", Bridge: "br0", Machine: "q35", Firmware: "efi"},
			"4e4b1f4f-a7ad-4d0f-bb13-5b9a6fc539e0", true,
			func(t *testing.T, d *libvirtxml.Domain, doc string) {
				if d.CPU.Mode != "maximum" || d.OS.Type.Machine != "q35" || d.OS.Firmware != "efi" {
					t.Errorf("cpu %s machine %s firmware %s", d.CPU.Mode, d.OS.Type.Machine, d.OS.Firmware)
				}
				if len(d.SysInfo) != 0 {
					t.Errorf("openstack flavour has fw_cfg")
				}
				if len(d.Devices.Disks) != 2 || d.Devices.Disks[1].Device != "cdrom" || d.Devices.Disks[1].Source.Volume.Volume != "ocp4-x7k2p-master-0-config.iso" || d.Devices.Disks[1].ReadOnly == nil {
					t.Errorf("config drive: %s", doc)
				}
				if !strings.Contains(doc, `<interface type="bridge"><mac address="52:54:00:7e:00:10"></mac><source bridge="br0"></source>`) {
					t.Errorf("bridge nic: %s", doc)
				}
				if !strings.Contains(doc, `<uuid>4e4b1f4f-a7ad-4d0f-bb13-5b9a6fc539e0</uuid>`) {
					t.Errorf("uuid missing: %s", doc)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := testSpec(tc.flavor)
			m := testMachine()
			d, err := buildNodeDomain(spec, m, pool, tc.hs, tc.uuid, tc.complete)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := d.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			doc = compactXML(doc)
			mk, err := markFromDomainXML(doc)
			if err != nil {
				t.Fatalf("mark: %v\n%s", err, doc)
			}
			want := nodeMark(spec, m, pool, tc.complete)
			if !reflect.DeepEqual(mk, want) {
				t.Errorf("mark\n got %+v\nwant %+v", mk, want)
			}
			if d.Name != m.Name || !strings.Contains(d.Description, "master-0") {
				t.Errorf("name %s description %q", d.Name, d.Description)
			}
			tc.check(t, d, doc)
		})
	}
}

func TestBuildNodeDomainRejects(t *testing.T) {
	pool := poolInfo{Name: "p", Path: "/p"}
	ok := hostSettings{DomainType: "kvm", Network: "n"}
	for _, tc := range []struct {
		name string
		mod  func(*platform.Machine, *hostSettings)
		want string
	}{
		{"no cpus", func(m *platform.Machine, _ *hostSettings) { m.CPUs = 0 }, "cpus"},
		{"no memory", func(m *platform.Machine, _ *hostSettings) { m.MemoryMiB = 0 }, "memoryMiB"},
		{"no mac", func(m *platform.Machine, _ *hostSettings) { m.MAC = nil }, "mac"},
		{"no ignition", func(m *platform.Machine, _ *hostSettings) { m.Ignition = nil }, "ignition"},
		{"slash in name", func(m *platform.Machine, _ *hostSettings) { m.Name = "a/b" }, "name"},
		{"network and bridge", func(_ *platform.Machine, h *hostSettings) { h.Bridge = "br0" }, "exactly one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, hs := testMachine(), ok
			tc.mod(&m, &hs)
			_, err := buildNodeDomain(testSpec(platform.FlavorQEMU), m, pool, hs, "", false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestVolumeXML(t *testing.T) {
	doc, err := overlayVolumeXML("n.qcow2", 1, "/p/base.qcow2", "qcow2", 16<<30)
	if err != nil {
		t.Fatal(err)
	}
	doc = compactXML(doc)
	for _, want := range []string{`<capacity unit="bytes">17179869184</capacity>`, `<backingStore><path>/p/base.qcow2</path><format type="qcow2"></format></backingStore>`, `<format type="qcow2">`} {
		if !strings.Contains(doc, want) {
			t.Errorf("overlay XML lacks %s: %s", want, doc)
		}
	}
	if doc, _ = overlayVolumeXML("n.qcow2", 120, "/p/b", "qcow2", 16<<30); !strings.Contains(doc, `<capacity unit="bytes">128849018880</capacity>`) {
		t.Errorf("overlay not grown to DiskGiB: %s", doc)
	}
	if doc, _ = rawVolumeXML("n.ign", 33); !strings.Contains(doc, `<capacity unit="bytes">33</capacity>`) || !strings.Contains(doc, `<format type="raw">`) {
		t.Errorf("raw XML: %s", doc)
	}
	if got := baseVolumeName(platform.Image{Format: "qcow2", SHA256: strings.Repeat("0123456789", 7)}, "c1"); got != "c1-base-0123456789012345.qcow2" {
		t.Errorf("base name %s", got)
	}
}
