package node

import (
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
	"appliance/vrrp"
)

// TestNetnsVIPNeverTheNodesSource: NetworkManager re-applies a node's
// address (removes it and adds it again) while the node holds a VIP, and
// the VIP is back first. The
// VIP, as VIPInstances gives it, must not become the subnet's primary
// address (the source of the node's own traffic), and removing it at a
// failover must leave the node its address, whatever promote_secondaries
// says (a new namespace has the kernel's default, off).
func TestNetnsVIPNeverTheNodesSource(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "vipsrc"})
	n0, n1 := lab.Nodes[0], lab.Nodes[1]
	cfg, err := cluster.Parse([]byte(`
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5]}
nodes:
  - {name: master-0, role: master, ips: [` + n0.IPv4.Addr().String() + `]}
`))
	if err != nil {
		t.Fatal(err)
	}
	ins := cfg.VIPInstances(cfg.Nodes[0])
	if len(ins) == 0 {
		t.Fatal("no VIP instance for master-0")
	}
	vip := ins[0].VIP
	var m *vrrp.VIPManager
	if err := n0.Do(func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		t.Cleanup(h.Close)
		m, err = vrrp.NewVIPManager(h, "eth0", "vip")
		if err != nil {
			return err
		}
		return m.Add(vip)
	}); err != nil {
		t.Fatal(err)
	}
	node := n0.IPv4.String()
	netlabtest.Run(t, n0, "ip", "addr", "del", node, "dev", "eth0")
	// The instance puts its VIP back as soon as it sees it gone (or, on a
	// move to br-ex, follows the node there first): before the node's
	// address returns.
	if err := n0.Do(func() error { return m.Add(vip) }); err != nil {
		t.Fatal(err)
	}
	netlabtest.Run(t, n0, "ip", "addr", "add", node, "dev", "eth0")
	if out := netlabtest.Run(t, n0, "ip", "-4", "route", "get", n1.IPv4.Addr().String()); !strings.Contains(out, "src "+n0.IPv4.Addr().String()+" ") {
		t.Errorf("with VIP %s installed before the node's address, the node's traffic leaves from: %s", vip, out)
	}
	if err := n0.Do(func() error { return m.Remove(vip) }); err != nil {
		t.Fatal(err)
	}
	if out := netlabtest.Run(t, n0, "ip", "-4", "addr", "show", "dev", "eth0"); !strings.Contains(out, "inet "+node+" ") {
		t.Errorf("removing VIP %s took the node's address with it:\n%s", vip, out)
	}
}
