package libvirt

import (
	"net"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
)

func TestAddrsFor(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:00:00:01")
	ifs := []golibvirt.DomainInterface{
		{Name: "lo", Hwaddr: golibvirt.OptString{"00:00:00:00:00:00"}, Addrs: []golibvirt.DomainIPAddr{{Addr: "127.0.0.1"}}},
		{Name: "eth0", Hwaddr: golibvirt.OptString{"52:54:00:00:00:01"}, Addrs: []golibvirt.DomainIPAddr{{Addr: "192.168.126.10"}, {Addr: "fe80::1"}, {Addr: "fd00::10"}}},
		{Name: "eth1", Hwaddr: golibvirt.OptString{"52:54:00:00:00:02"}, Addrs: []golibvirt.DomainIPAddr{{Addr: "10.0.0.1"}}},
	}
	got := addrsFor(ifs, mac)
	if len(got) != 2 || got[0].String() != "192.168.126.10" || got[1].String() != "fd00::10" {
		t.Errorf("got %v", got)
	}
}
