package host

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"appliance/internal/cluster"
)

// TestWho is the identity order, case by case: --node, then a local
// address, then the host name, then (with --role) the host name as a node
// that joins on day 2, else an error that says what was tried.
func TestWho(t *testing.T) {
	cfg := parse(t, testConfig)
	empty := parse(t, `
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}
`)
	lo := Link{Name: "lo", Index: 1, Up: true, Addrs: pfx("127.0.0.1/8", "::1/128")}
	eth0 := func(addrs ...string) []Link {
		return []Link{lo, {Name: "eth0", Index: 2, Up: true, Addrs: pfx(addrs...)}}
	}
	const (
		worker = cluster.RoleWorker
		master = cluster.RoleMaster
	)
	type want struct {
		name       string
		role       cluster.Role
		configured bool
		by         string
		warning    string // fragment; "" means none
	}
	cases := []struct {
		name     string
		cfg      *cluster.Config
		opts     Options
		hostname string
		links    []Link
		want     want
		err      []string // fragments, all required
		noNode   bool     // the error wraps ErrNoNode
	}{
		// 1. --node
		{name: "--node names a configured node", cfg: cfg, opts: Options{Node: "worker-0"}, hostname: "whatever",
			links: eth0("192.168.126.77/24"), want: want{"worker-0", worker, true, "--node", ""}},
		{name: "--node beats a local address", cfg: cfg, opts: Options{Node: "bootstrap"}, hostname: "master-0",
			links: eth0("192.168.126.10/24"), want: want{"bootstrap", cluster.RoleBootstrap, true, "--node", ""}},
		{name: "--node unknown without --role is an error naming the known nodes and the fix", cfg: cfg,
			opts: Options{Node: "master-9"}, links: eth0("192.168.126.10/24"),
			err: []string{`--node "master-9" is not in nodes`, "known: bootstrap, master-0, worker-0", "add --role"}},
		{name: "--node unknown with --role is a day-2 node", cfg: cfg, opts: Options{Node: "worker-9", Role: worker},
			hostname: "localhost", links: eth0("192.168.126.99/24"), want: want{"worker-9", worker, false, "--node", ""}},
		{name: "--node and a --role that disagrees: the configured role wins", cfg: cfg, opts: Options{Node: "master-0", Role: worker},
			links: eth0("192.168.126.10/24"), want: want{"master-0", master, true, "--node", "--role worker disagrees with node master-0's role master"}},

		// 2. a local address
		{name: "by address", cfg: cfg, hostname: "localhost", links: eth0("192.168.126.10/24"),
			want: want{"master-0", master, true, "address 192.168.126.10", ""}},
		{name: "by IPv6 address", cfg: cfg, hostname: "localhost", links: eth0("fe80::10/64", "fd00:126::10/64"),
			want: want{"master-0", master, true, "address fd00:126::10", ""}},
		{name: "address beats host name", cfg: cfg, hostname: "worker-0.ocp4.example.com", links: eth0("192.168.126.10/24"),
			want: want{"master-0", master, true, "address 192.168.126.10", ""}},
		{name: "address on a second link", cfg: cfg, hostname: "x",
			links: append(eth0("10.0.0.3/24"), Link{Name: "br-ex", Index: 3, Up: true, Addrs: pfx("192.168.126.20/24")}),
			want:  want{"worker-0", worker, true, "address 192.168.126.20", ""}},
		{name: "address and a --role that disagrees: the configured role wins", cfg: cfg, opts: Options{Role: worker},
			links: eth0("192.168.126.10/24"), want: want{"master-0", master, true, "address 192.168.126.10", "the configured role master wins"}},
		{name: "a --role that agrees warns of nothing", cfg: cfg, opts: Options{Role: master},
			links: eth0("192.168.126.10/24"), want: want{"master-0", master, true, "address 192.168.126.10", ""}},
		{name: "a VIP on the interface never identifies a node", cfg: cfg, hostname: "laptop",
			links: eth0("192.168.126.5/24", "fd00:126::5/64", "192.168.126.6/24"),
			err:   []string{"local addresses none"}, noNode: true},
		{name: "a VIP on the interface of a replacement master", cfg: cfg, opts: Options{Role: master}, hostname: "master-3",
			links: eth0("192.168.126.5/24", "192.168.126.13/24"), want: want{"master-3", master, false, "host name and --role", ""}},
		{name: "an excluded address identifies nothing", cfg: cfg, hostname: "laptop",
			opts:  Options{Exclude: func(a netip.Addr) bool { return a == netip.MustParseAddr("192.168.126.20") }},
			links: eth0("192.168.126.20/24"), err: []string{"local addresses none"}, noNode: true},

		// 3. the host name
		{name: "host name", cfg: cfg, hostname: "worker-0", links: eth0("192.168.126.77/24"),
			want: want{"worker-0", worker, true, "host name", ""}},
		{name: "FQDN host name is cut to the short name", cfg: cfg, hostname: "bootstrap.ocp4.example.com", links: []Link{lo},
			want: want{"bootstrap", cluster.RoleBootstrap, true, "host name", ""}},
		{name: "upper-case host name", cfg: cfg, hostname: "Worker-0.OCP4.example.com", links: []Link{lo},
			want: want{"worker-0", worker, true, "host name", ""}},
		{name: "host name and a --role that disagrees: the configured role wins", cfg: cfg, opts: Options{Role: master},
			hostname: "worker-0", links: []Link{lo}, want: want{"worker-0", worker, true, "host name", "--role master disagrees with node worker-0's role worker"}},

		// 4. --role: a day-2 node by its host name
		{name: "day-2 worker", cfg: cfg, opts: Options{Role: worker}, hostname: "worker-7",
			links: eth0("192.168.126.17/24", "fe80::17/64"), want: want{"worker-7", worker, false, "host name and --role", ""}},
		{name: "replacement master", cfg: cfg, opts: Options{Role: master}, hostname: "master-3",
			links: eth0("192.168.126.13/24"), want: want{"master-3", master, false, "host name and --role", ""}},
		{name: "day-2 worker with an FQDN host name", cfg: cfg, opts: Options{Role: worker}, hostname: "worker-7.ocp4.example.com",
			links: eth0("192.168.126.17/24"), want: want{"worker-7", worker, false, "host name and --role", ""}},
		{name: "day-2 node without a host name", cfg: cfg, opts: Options{Role: worker},
			links: eth0("192.168.126.17/24"), err: []string{"host name is empty", "--node NAME"}, noNode: true},
		{name: "day-2 node whose host name is not set yet", cfg: cfg, opts: Options{Role: worker}, hostname: "localhost.localdomain",
			links: eth0("192.168.126.17/24"), err: []string{`not set yet ("localhost.localdomain")`, "--node NAME"}, noNode: true},
		{name: "discovered: localhost is no name", cfg: empty, hostname: "localhost", links: eth0("192.168.126.70/24"),
			err: []string{`not set yet ("localhost")`}, noNode: true},

		// 5. nothing identifies the machine
		{name: "no match names host name, addresses, nodes and the fix", cfg: cfg, hostname: "laptop.example.com",
			links: append(eth0("10.0.0.3/24", "fe80::3/64"), Link{Name: "wlan0", Up: true, Addrs: pfx("192.168.126.77/24")}),
			err: []string{`host name "laptop.example.com"`, "local addresses 10.0.0.3, 192.168.126.77", "known nodes bootstrap, master-0, worker-0",
				"pass --node NAME", "add the node to nodes", "--role"}, noNode: true},
		{name: "a wrong --role", cfg: cfg, opts: Options{Role: "infra"}, hostname: "worker-0",
			err: []string{`--role "infra" is not bootstrap, master or worker`}},

		// a config without nodes (members are discovered) keeps working
		{name: "discovered: the host name without a role", cfg: empty, hostname: "w7.lab", links: eth0("192.168.126.70/24"),
			want: want{"w7", "", false, "host name", ""}},
		{name: "discovered: the host name with a role", cfg: empty, opts: Options{Role: worker}, hostname: "w7.lab",
			want: want{"w7", worker, false, "host name and --role", ""}},
		{name: "discovered: --node without a role", cfg: empty, opts: Options{Node: "w8"}, hostname: "w7",
			want: want{"w8", "", false, "--node", ""}},
		{name: "discovered: no host name", cfg: empty, err: []string{"host name is empty", "known: none configured"}, noNode: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, err := Who(c.cfg, c.opts, c.hostname, c.links)
			if len(c.err) > 0 {
				if err == nil {
					t.Fatalf("identified %+v, want an error", id)
				}
				for _, frag := range c.err {
					if !strings.Contains(err.Error(), frag) {
						t.Errorf("error %q lacks %q", err, frag)
					}
				}
				if errors.Is(err, ErrNoNode) != c.noNode {
					t.Errorf("errors.Is(err, ErrNoNode) = %v, want %v", !c.noNode, c.noNode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := want{id.Name, id.Role, id.Configured, id.By, id.Warning}
			w := c.want
			if got.name != w.name || got.role != w.role || got.configured != w.configured || got.by != w.by ||
				(w.warning == "") != (got.warning == "") || !strings.Contains(got.warning, w.warning) {
				t.Fatalf("identified %+v, want %+v", got, w)
			}
		})
	}
}

// TestIdentifyAnyMachine: a machine that is no node (a standalone LB or
// DHCP server) is located all the same, but a wrong flag still fails.
func TestIdentifyAnyMachine(t *testing.T) {
	cfg := parse(t, testConfig)
	links := []Link{{Name: "eth0", Index: 2, Up: true, Addrs: pfx("192.168.126.5/24", "192.168.126.99/24")}}
	v, err := Identify(cfg, Options{AnyMachine: true}, "lb-1", links, "")
	if err != nil {
		t.Fatal(err)
	}
	if v.Name != "" || v.Configured || v.Interface != "eth0" || joinPrefixes(v.Prefixes) != "[192.168.126.99/24]" || !v.Usable() {
		t.Fatalf("view %+v", v)
	}
	if a, ok := v.Addr(false); !ok || a != netip.MustParseAddr("192.168.126.99") {
		t.Errorf("own address %v %v, want 192.168.126.99, never the VIP", a, ok)
	}
	if _, err := Identify(cfg, Options{AnyMachine: true, Node: "master-9"}, "lb-1", links, ""); err == nil {
		t.Error("an unknown --node passed")
	}
	if _, err := Identify(cfg, Options{AnyMachine: true, Role: "infra"}, "lb-1", links, ""); err == nil {
		t.Error("a wrong --role passed")
	}
	if _, err := Identify(cfg, Options{}, "lb-1", links, ""); !errors.Is(err, ErrNoNode) {
		t.Errorf("without AnyMachine: %v, want ErrNoNode", err)
	}
}

// TestLocate is where the machine's own addresses are, node or not: the
// interface holding addresses in the machine networks (never one holding
// only a VIP) and the first own address of each family.
func TestLocate(t *testing.T) {
	cfg := parse(t, testConfig)
	link := func(name string, addrs ...string) Link {
		return Link{Name: name, Up: true, Addrs: pfx(addrs...)}
	}
	down := link("eth9", "fd00:126::99/64")
	down.Up = false
	cases := []struct {
		name    string
		links   []Link
		prev    string
		iface   string // "" with problem
		v4, v6  string // own addresses, "" when none
		problem string
	}{
		{name: "one holder", links: []Link{link("lo", "127.0.0.1/8"), link("ens3", "192.168.126.10/24")}, iface: "ens3", v4: "192.168.126.10"},
		{name: "IPv6 only", links: []Link{link("ens4", "fd00:126::10/64")}, iface: "ens4", v6: "fd00:126::10"},
		{name: "a stale VIP does not pick the interface", links: []Link{link("eth1", "192.168.126.5/24"), link("eth0", "192.168.126.10/24")},
			iface: "eth0", v4: "192.168.126.10"},
		{name: "IPv6 while holding the VIP", links: []Link{link("lo", "::1/128"), link("br-ex", "fd00:126::5/64", "fe80::1/64", "fd00:126::10/64")},
			iface: "br-ex", v6: "fd00:126::10"},
		{name: "IPv4 while holding the VIP", links: []Link{link("ens3", "192.168.126.5/24", "192.168.126.10/24", "fd00:126::10/64")},
			iface: "ens3", v4: "192.168.126.10", v6: "fd00:126::10"},
		{name: "outside the machine networks", links: []Link{link("ens3", "10.0.0.2/24", "fd00:999::2/64")},
			problem: "no interface has an address in network.machineCIDRs"},
		{name: "link-local only", links: []Link{link("ens3", "fe80::2/64")}, problem: "no interface has an address"},
		{name: "a down link keeping an address does not count", links: []Link{down, link("ens3", "fd00:126::11/64")},
			iface: "ens3", v6: "fd00:126::11"},
		{name: "two links up is ambiguous", links: []Link{link("eth0", "192.168.126.10/24"), link("eth1", "192.168.126.11/24")},
			problem: "interfaces eth0, eth1 all have addresses in network.machineCIDRs; set network.interface (or --interface)"},
		{name: "two links up keep the previous one", links: []Link{link("eth0", "192.168.126.10/24"), link("eth1", "192.168.126.11/24")},
			prev: "eth1", iface: "eth1", v4: "192.168.126.11"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Locate(cfg, Options{}, c.links, c.prev)
			if c.problem != "" {
				if v.Usable() || !strings.Contains(v.Problem, c.problem) {
					t.Fatalf("view %+v, want problem %q", v, c.problem)
				}
				if _, ok := v.Addr(false); ok {
					t.Errorf("an own address without an interface: %+v", v)
				}
				return
			}
			if v.Interface != c.iface || !v.Usable() {
				t.Fatalf("interface %q (problem %q), want %q", v.Interface, v.Problem, c.iface)
			}
			for _, f := range []struct {
				v6   bool
				want string
			}{{false, c.v4}, {true, c.v6}} {
				a, ok := v.Addr(f.v6)
				if (f.want == "") == ok || (ok && a.String() != f.want) {
					t.Errorf("Addr(v6=%v) = %v %v, want %q", f.v6, a, ok, f.want)
				}
			}
		})
	}
}
