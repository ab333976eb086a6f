package cluster

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

const dualStack = `
cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDRs: [192.168.126.0/24, "fd00:126::/64"]
  apiVIPs: [192.168.126.5, "fd00:126::5"]
  ingressVIPs: [192.168.126.6]
nodes:
  - {name: bootstrap, role: bootstrap, ips: [192.168.126.9]}
  - {name: master-0, role: master, ips: [192.168.126.10, "fd00:126::10"]}
  - {name: worker-0, role: worker, ips: [192.168.126.20]}
vrrp:
  unicastPeers: [192.168.126.9, 192.168.126.10, "fd00:126::10", 192.168.126.20]
`

func mustParseVIPs(t *testing.T, doc string) *Config {
	t.Helper()
	cfg, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestVIPInstances(t *testing.T) {
	cfg := mustParseVIPs(t, dualStack)
	api, ingress := DeriveVRIDs("ocp4")
	names := func(ins []VIPInstance) string {
		var s []string
		for _, in := range ins {
			s = append(s, in.Name+"="+in.VIP.String())
		}
		return strings.Join(s, " ")
	}
	cases := []struct {
		node string
		want string
	}{
		{"bootstrap", "api-v4=192.168.126.5/32 api-v6=fd00:126::5/128"},
		{"master-0", "api-v4=192.168.126.5/32 api-v6=fd00:126::5/128 ingress-v4=192.168.126.6/32"},
		{"worker-0", "ingress-v4=192.168.126.6/32"},
	}
	for _, c := range cases {
		self, _ := cfg.NodeByName(c.node)
		ins := cfg.VIPInstances(self)
		if got := names(ins); got != c.want {
			t.Errorf("%s: instances %q, want %q", c.node, got, c.want)
		}
		for _, in := range ins {
			wantVRID := api
			if in.Kind == VIPIngress {
				wantVRID = ingress
			}
			if in.VRID != wantVRID || in.Version != 3 || in.Interval != DefaultAdvertInterval || !in.Preempt {
				t.Errorf("%s %s: %+v", c.node, in.Name, in)
			}
			if in.Priority != DefaultPriority(self.Role, in.Kind) {
				t.Errorf("%s %s: priority %d", c.node, in.Name, in.Priority)
			}
			for _, p := range in.UnicastPeers {
				if p.Is4() != in.VIP.Addr().Is4() {
					t.Errorf("%s %s: peer %s of the other family", c.node, in.Name, p)
				}
				for _, own := range self.IPs {
					if p == own {
						t.Errorf("%s %s: its own address %s is listed as a peer", c.node, in.Name, p)
					}
				}
			}
		}
	}
}

// Unicast is the default: each router's peers are the configured nodes whose
// role takes part in it, of its family, without the node itself, plus the
// extra vrrp.unicastPeers; multicast has none.
func TestVIPInstancesUnicastPeers(t *testing.T) {
	const doc = `
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDRs: [192.168.126.0/24, "fd00:126::/64"], apiVIPs: [192.168.126.5, "fd00:126::5"], ingressVIPs: [192.168.126.6]}
nodes:
  - {name: bootstrap, role: bootstrap, ips: [192.168.126.9]}
  - {name: master-0, role: master, ips: [192.168.126.10, "fd00:126::10"]}
  - {name: master-1, role: master, ips: [192.168.126.11, "fd00:126::11"]}
  - {name: worker-0, role: worker, ips: [192.168.126.20]}
`
	cfg := mustParseVIPs(t, doc)
	if cfg.VRRP.Transport != VRRPTransportUnicast || !cfg.Unicast() {
		t.Fatalf("transport %q: unicast is the default", cfg.VRRP.Transport)
	}
	peers := func(cfg *Config, node string) string {
		self, _ := cfg.NodeByName(node)
		var out []string
		for _, in := range cfg.VIPInstances(self) {
			if !in.Unicast {
				out = append(out, in.Name+"=multicast")
				continue
			}
			var ps []string
			for _, p := range in.UnicastPeers {
				ps = append(ps, p.String())
			}
			out = append(out, in.Name+"=["+strings.Join(ps, " ")+"]")
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct{ node, want string }{
		{"bootstrap", "api-v4=[192.168.126.10 192.168.126.11] api-v6=[fd00:126::10 fd00:126::11]"},
		{"master-0", "api-v4=[192.168.126.9 192.168.126.11] api-v6=[fd00:126::11] ingress-v4=[192.168.126.11 192.168.126.20]"},
		{"worker-0", "ingress-v4=[192.168.126.10 192.168.126.11]"},
	} {
		if got := peers(cfg, c.node); got != c.want {
			t.Errorf("%s: %s\n want %s", c.node, got, c.want)
		}
	}
	extra := mustParseVIPs(t, doc+"vrrp: {unicastPeers: [192.168.126.50]}\n")
	if got, want := peers(extra, "worker-0"), "ingress-v4=[192.168.126.10 192.168.126.11 192.168.126.50]"; got != want {
		t.Errorf("with an extra peer: %s, want %s", got, want)
	}
	multi := mustParseVIPs(t, doc+"vrrp: {transport: multicast}\n")
	if got, want := peers(multi, "master-1"), "api-v4=multicast api-v6=multicast ingress-v4=multicast"; got != want {
		t.Errorf("multicast: %s, want %s", got, want)
	}
}

// keepalived-openshift mode starts from the priorities of OpenShift's
// keepalived templates (the tracks' weights are app/node's); an
// explicit vrrp.priority still wins, and a role outside a router stays out.
func TestPriorityForModes(t *testing.T) {
	native := mustParseVIPs(t, dualStack)
	compat := mustParseVIPs(t, dualStack+"  mode: keepalived-openshift\n")
	override := mustParseVIPs(t, dualStack+"  mode: keepalived-openshift\n  priority: 99\n")
	for _, c := range []struct {
		role                  Role
		kind                  VIPKind
		native, compat, overr uint8
	}{
		{RoleBootstrap, VIPAPI, 50, 70, 99},
		{RoleMaster, VIPAPI, 40, 40, 99},
		{RoleWorker, VIPAPI, 0, 0, 0},
		{RoleBootstrap, VIPIngress, 0, 0, 0},
		{RoleMaster, VIPIngress, 20, 20, 99},
		{RoleWorker, VIPIngress, 40, 20, 99},
	} {
		if n, k, o := native.PriorityFor(c.role, c.kind), compat.PriorityFor(c.role, c.kind), override.PriorityFor(c.role, c.kind); n != c.native || k != c.compat || o != c.overr {
			t.Errorf("%s %s: native %d compat %d override %d; want %d %d %d", c.role, c.kind, n, k, o, c.native, c.compat, c.overr)
		}
	}
}

func TestVIPInstancesCompatMode(t *testing.T) {
	cfg := mustParseVIPs(t, `
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}
nodes: [{name: master-0, role: master, ips: [192.168.126.10]}]
vrrp: {mode: keepalived-openshift}
`)
	self, _ := cfg.NodeByName("master-0")
	ins := cfg.VIPInstances(self)
	if len(ins) != 2 {
		t.Fatalf("want api and ingress, got %+v", ins)
	}
	want := map[string]string{"api-v4": "ocp4_api", "ingress-v4": "ocp4_ing"}
	for _, in := range ins {
		if in.Version != 2 || in.Interval != CompatAdvertInterval || in.AuthPass != want[in.Name] {
			t.Errorf("%s: version %d interval %s pass %q; want v2, 1s, %q", in.Name, in.Version, in.Interval, in.AuthPass, want[in.Name])
		}
	}
}

// VRRPv2 is IPv4 only: the IPv6 VIP of a dual-stack cluster in
// keepalived-openshift mode gets a VRRPv3 router, which vrrp can run.
func TestVIPInstancesCompatModeIPv6(t *testing.T) {
	cfg := mustParseVIPs(t, dualStack+"  mode: keepalived-openshift\n")
	self, _ := cfg.NodeByName("master-0")
	for _, in := range cfg.VIPInstances(self) {
		want := 2
		if in.VIP.Addr().Is6() {
			want = 3
		}
		if in.Version != want || (want == 3) != (in.AuthPass == "") || in.Interval != CompatAdvertInterval {
			t.Errorf("%s: version %d pass %q interval %s; want v%d, auth only on v2, 1s", in.Name, in.Version, in.AuthPass, in.Interval, want)
		}
	}
}

func TestParseDHCPSection(t *testing.T) {
	cfg := mustParseVIPs(t, `
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5]}
dhcp:
  leaseTime: 30m
  leaseFile: /var/lib/appliance/leases.json
  pool: {start: 192.168.126.100, end: 192.168.126.199}
  dns: [192.168.126.10, 192.168.126.11]
  ntp: [192.168.126.1]
  searchDomains: [ocp4.example.com, example.com]
`)
	d := cfg.DHCP
	if d.LeaseTime != 30*time.Minute || d.LeaseFile != "/var/lib/appliance/leases.json" ||
		d.Pool.Start != netip.MustParseAddr("192.168.126.100") || d.Pool.End != netip.MustParseAddr("192.168.126.199") ||
		len(d.DNS) != 2 || len(d.NTP) != 1 || len(d.SearchDomains) != 2 {
		t.Errorf("dhcp section = %+v", d)
	}
	if def := mustParseVIPs(t, dualStack).DHCP; !def.Pool.IsZero() || def.LeaseTime != DefaultDHCPLeaseTime {
		t.Errorf("defaults = %+v; want no pool and the default lease time", def)
	}
}

func TestParseLBAndDNSSections(t *testing.T) {
	cfg := mustParseVIPs(t, `
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5]}
lb: {balance: leastconn, mcs: false, redirect: false}
dns: {mdns: true}
`)
	if cfg.LB != (LB{Enabled: true, Balance: LBLeastConn}) || !cfg.DNS.MDNS || !cfg.DNS.Enabled {
		t.Errorf("lb %+v dns %+v", cfg.LB, cfg.DNS)
	}
	def := mustParseVIPs(t, dualStack)
	if def.LB != (LB{Enabled: true, Balance: LBRoundRobin, MCS: true, Redirect: true}) || def.DNS.MDNS || def.DHCP.Enabled || !def.VRRP.Enabled {
		t.Errorf("defaults: lb %+v dns %+v", def.LB, def.DNS)
	}
}
