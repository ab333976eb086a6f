package libvirt

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kdomanski/iso9660"
	"libvirt.org/go/libvirtxml"

	"appliance/platform"
)

func TestLibvirtConfigDrive(t *testing.T) {
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := d.Conn("qemu:///system")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Disconnect()
	id := uniq()
	d.Pool(t, raw, "aptpool-"+id)
	pl, err := raw.StoragePoolLookupByName("aptpool-" + id)
	if err != nil {
		t.Fatal(err)
	}
	imgPath := filepath.Join(d.Dir, "base.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", imgPath, "64M")
	st, _ := os.Stat(imgPath)
	spec := clusterSpec("apt"+id, platform.Image{Path: imgPath, Format: "qcow2", SHA256: strings.Repeat("c3", 32), Size: st.Size(), Flavor: platform.FlavorOpenStack}, 0)
	spec.Machines = spec.Machines[:1]
	// The domain is not started, so the bridge need not exist.
	p, err := New(ctx, Options{Socket: d.Socket, Pool: pl.Name, Bridge: "br-" + id, DomainType: "qemu"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := applyAll(ctx, p, spec, 1, false); err != nil {
		t.Fatal(err)
	}
	m := spec.Machines[0]
	dom, _ := raw.DomainLookupByName(m.Name)
	doc, _ := raw.DomainGetXMLDesc(dom, 0)
	var dx libvirtxml.Domain
	if err := dx.Unmarshal(doc); err != nil {
		t.Fatal(err)
	}
	if len(dx.SysInfo) != 0 || len(dx.Devices.Disks) != 2 || dx.Devices.Disks[1].Device != "cdrom" || dx.Devices.Interfaces[0].Source.Bridge == nil {
		t.Fatalf("config-drive domain: %s", doc)
	}
	iso := downloadVol(t, d, raw, pl.Name, m.Name+"-config.iso")
	im, err := iso9660.OpenImage(bytes.NewReader(iso))
	if err != nil {
		t.Fatal(err)
	}
	if label, _ := im.Label(); label != "config-2" {
		t.Errorf("label %q", label)
	}
	if got := readISOFile(t, im, "openstack/latest/user_data"); !bytes.Equal(got, m.Ignition) {
		t.Errorf("user_data %q", got)
	}
	if lines, err := p.Destroy(ctx, spec.InfraID); err != nil || len(lines) != 5 {
		t.Fatalf("destroy: %v %v", lines, err)
	}
}

func readISOFile(t *testing.T, im *iso9660.Image, path string) []byte {
	t.Helper()
	f, err := im.RootDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range strings.Split(path, "/") {
		kids, err := f.GetChildren()
		if err != nil {
			t.Fatal(err)
		}
		var next *iso9660.File
		for _, k := range kids {
			if k.Name() == part {
				next = k
			}
		}
		if next == nil {
			t.Fatalf("%s: no %s in ISO", path, part)
		}
		f = next
	}
	b, err := io.ReadAll(f.Reader())
	if err != nil {
		t.Fatal(err)
	}
	return b
}
