package host

import (
	"net/netip"
	"strings"
	"testing"

	"appliance/internal/cluster"
)

const testConfig = `
cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDRs: [192.168.126.0/24, "fd00:126::/64"]
  apiVIPs: [192.168.126.5, "fd00:126::5"]
  ingressVIPs: [192.168.126.6]
nodes:
  - {name: bootstrap, role: bootstrap, ips: [192.168.126.9]}
  - {name: master-0, role: master, ips: [192.168.126.10, "fd00:126::10"]}
  - {name: worker-0, role: worker, ips: [192.168.126.20]}
`

func parse(t *testing.T, doc string) *cluster.Config {
	t.Helper()
	cfg, err := cluster.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func pfx(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestIdentify(t *testing.T) {
	cfg := parse(t, testConfig)
	pinned := parse(t, strings.Replace(testConfig, "network:\n", "network:\n  interface: eth9\n", 1))
	empty := parse(t, `
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}
`)
	lo := Link{Name: "lo", Index: 1, Up: true, Addrs: pfx("127.0.0.1/8", "::1/128")}
	eth0 := func(addrs ...string) Link {
		return Link{Name: "eth0", Index: 2, Up: true, Addrs: pfx(addrs...)}
	}
	cases := []struct {
		name     string
		cfg      *cluster.Config
		opts     Options
		hostname string
		links    []Link
		prev     string
		// want: "node role iface addrs" or "problem: ..." fragment; err: error fragment
		want, problem, err string
	}{
		{name: "by address, VIPs and link-local left out", cfg: cfg, hostname: "whatever",
			links: []Link{lo, eth0("192.168.126.10/24", "192.168.126.5/24", "fe80::1/64", "fd00:126::5/64", "fd00:126::10/64")},
			want:  "master-0 master eth0 [192.168.126.10/24 fd00:126::10/64]"},
		{name: "by host name when no address matches", cfg: cfg, hostname: "worker-0.ocp4.example.com",
			links: []Link{lo, eth0("192.168.126.77/24")},
			want:  "worker-0 worker eth0 [192.168.126.77/24]"},
		{name: "by --node", cfg: cfg, opts: Options{Node: "bootstrap"}, hostname: "master-0",
			links: []Link{lo, eth0("192.168.126.10/24")},
			want:  "bootstrap bootstrap eth0 [192.168.126.10/24]"},
		{name: "unknown --node lists the known ones", cfg: cfg, opts: Options{Node: "master-9"},
			links: []Link{lo, eth0("192.168.126.10/24")}, err: "known: bootstrap, master-0, worker-0"},
		{name: "a day-2 node not in the config gives its role", cfg: cfg, opts: Options{Node: "worker-9", Role: cluster.RoleWorker},
			links: []Link{lo, eth0("192.168.126.99/24")}, want: "worker-9 worker eth0 [192.168.126.99/24]"},
		{name: "no match names the addresses tried", cfg: cfg, hostname: "laptop",
			links: []Link{lo, eth0("10.0.0.3/24")}, err: `host name "laptop", local addresses 10.0.0.3`},
		{name: "a VIP alone does not identify a node", cfg: cfg, hostname: "laptop",
			links: []Link{eth0("192.168.126.5/24")}, err: "matches no configured node"},
		{name: "discovered cluster takes the host name", cfg: empty, opts: Options{Role: cluster.RoleWorker}, hostname: "w7.lab",
			links: []Link{lo, eth0("192.168.126.70/24")},
			want:  "w7 worker eth0 [192.168.126.70/24]"},
		{name: "an address only on a VIP is no node address", cfg: cfg, opts: Options{Node: "master-0"},
			links:   []Link{lo, eth0("192.168.126.5/24")},
			problem: "no interface has an address in network.machineCIDRs"},
		{name: "excluded addresses are not the node's", cfg: cfg, opts: Options{Node: "master-0", Exclude: func(a netip.Addr) bool {
			return a == netip.MustParseAddr("192.168.126.99")
		}}, links: []Link{lo, eth0("192.168.126.99/24", "192.168.126.10/24")},
			want: "master-0 master eth0 [192.168.126.10/24]"},
		{name: "two holders is ambiguous at start", cfg: cfg, opts: Options{Node: "master-0"},
			links:   []Link{lo, eth0("192.168.126.10/24"), {Name: "br-ex", Index: 3, Up: true, Addrs: pfx("192.168.126.10/24")}},
			problem: "interfaces eth0, br-ex all have addresses"},
		{name: "two holders keep the previous one", cfg: cfg, opts: Options{Node: "master-0"}, prev: "eth0",
			links: []Link{lo, eth0("192.168.126.10/24"), {Name: "br-ex", Index: 3, Up: true, Addrs: pfx("192.168.126.10/24")}},
			want:  "master-0 master eth0 [192.168.126.10/24]"},
		{name: "the address moved to br-ex", cfg: cfg, opts: Options{Node: "master-0"}, prev: "eth0",
			links: []Link{lo, eth0(), {Name: "br-ex", Index: 3, Up: true, Addrs: pfx("192.168.126.10/24")}},
			want:  "master-0 master br-ex [192.168.126.10/24]"},
		{name: "pinned interface missing", cfg: pinned, opts: Options{Node: "master-0"},
			links: []Link{lo, eth0("192.168.126.10/24")}, problem: "interface eth9 (pinned by network.interface) does not exist"},
		{name: "pinned interface without address", cfg: cfg, opts: Options{Node: "master-0", Interface: "eth0"},
			links: []Link{lo, eth0("10.1.1.1/24")}, problem: "interface eth0 has no address in network.machineCIDRs"},
		{name: "interface down", cfg: cfg, opts: Options{Node: "master-0"},
			links: []Link{lo, {Name: "eth0", Index: 2, Addrs: pfx("192.168.126.10/24")}}, problem: "interface eth0 is down"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := Identify(c.cfg, c.opts, c.hostname, c.links, c.prev)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.problem != "" {
				if !strings.Contains(v.Problem, c.problem) || v.Usable() {
					t.Fatalf("problem %q, want one containing %q", v.Problem, c.problem)
				}
				return
			}
			got := strings.Join([]string{v.Name, string(v.Role), v.Interface, joinPrefixes(v.Prefixes)}, " ")
			if got != c.want || !v.Usable() {
				t.Fatalf("view %q (problem %q), want %q", got, v.Problem, c.want)
			}
		})
	}
}

func TestViewAddr(t *testing.T) {
	v := &View{Prefixes: pfx("192.168.126.10/24", "fd00:126::10/64")}
	if a, ok := v.Addr(true); !ok || a != netip.MustParseAddr("fd00:126::10") {
		t.Errorf("Addr(v6) = %v %v", a, ok)
	}
	if got := v.Addrs(); len(got) != 2 || got[0] != netip.MustParseAddr("192.168.126.10") {
		t.Errorf("Addrs = %v", got)
	}
}
