package dhcp

import (
	"net/netip"
	"os"
	"slices"
	"testing"

	"appliance/internal/cluster"
)

func TestFromCluster(t *testing.T) {
	data, err := os.ReadFile("../internal/cluster/testdata/appliance.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := cluster.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	o, err := FromCluster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o.Network != netip.MustParsePrefix("192.168.126.0/24") || o.Router != netip.MustParseAddr("192.168.126.1") || o.Domain != "ocp4.example.com" {
		t.Errorf("network %v router %v domain %q", o.Network, o.Router, o.Domain)
	}
	if len(o.Reservations) != 6 {
		t.Fatalf("%d reservations, want 6", len(o.Reservations))
	}
	r := o.Reservations[1]
	if r.MAC.String() != "52:54:00:7e:00:10" || r.IP != netip.MustParseAddr("192.168.126.10") || r.Hostname != "master-0" {
		t.Errorf("reservation %+v", r)
	}
	wantDNS := []netip.Addr{netip.MustParseAddr("192.168.126.10"), netip.MustParseAddr("192.168.126.11"), netip.MustParseAddr("192.168.126.12")}
	if !slices.Equal(o.DNS, wantDNS) {
		t.Errorf("DNS %v, want the masters %v", o.DNS, wantDNS)
	}
	for _, vip := range []string{"192.168.126.5", "192.168.126.6", "192.168.126.1"} {
		if !slices.Contains(o.Excluded, netip.MustParseAddr(vip)) {
			t.Errorf("%s not excluded from the pool", vip)
		}
	}
	o.ServerID = netip.MustParseAddr("192.168.126.10")
	o.Pool = cluster.Range{Start: netip.MustParseAddr("192.168.126.1"), End: netip.MustParseAddr("192.168.126.30")}
	p, err := NewPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range append(o.Excluded, netip.MustParseAddr("192.168.126.0")) {
		if p.inPool(a) {
			t.Errorf("%v is in the pool", a)
		}
	}
	if !p.inPool(netip.MustParseAddr("192.168.126.30")) {
		t.Error("192.168.126.30 not in the pool")
	}
}

// TestFromClusterDerivedMACs: with a provision section, nodes given without
// a MAC still get a reservation, on the MAC provision will give their VMs,
// so they lease their address on first boot.
func TestFromClusterDerivedMACs(t *testing.T) {
	cfg, err := cluster.Parse([]byte(`
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}
nodes:
- {name: master-0, role: master, ips: [192.168.126.10]}
- {name: worker-0, role: worker, ips: [192.168.126.20]}
provision: {platform: libvirt}
`))
	if err != nil {
		t.Fatal(err)
	}
	o, err := FromCluster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Reservations) != 2 {
		t.Fatalf("reservations %+v, want one per node", o.Reservations)
	}
	for _, r := range o.Reservations {
		if want := cluster.DeriveMAC(cfg.Cluster, r.Hostname); r.MAC.String() != want.String() {
			t.Errorf("%s reserved on %s, want the derived %s", r.Hostname, r.MAC, want)
		}
	}
}
