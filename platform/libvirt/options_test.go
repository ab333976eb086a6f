package libvirt

import (
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
)

func TestOptions(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil || o.URI != "qemu:///system" || o.Pool != "default" || o.Network != "default" || o.DomainType != "kvm" {
		t.Fatalf("defaults: %+v %v", o, err)
	}
	for _, bad := range []Options{{Network: "a", Bridge: "b"}, {DomainType: "xen"}, {Firmware: "uboot"}} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if got := uuidString(golibvirt.UUID{0x4e, 0x4b, 0x1f, 0x4f, 0xa7, 0xad, 0x4d, 0x0f, 0xbb, 0x13, 0x5b, 0x9a, 0x6f, 0xc5, 0x39, 0xe0}); got != "4e4b1f4f-a7ad-4d0f-bb13-5b9a6fc539e0" {
		t.Errorf("uuid %s", got)
	}
}
