package preflight

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"appliance/internal/cluster"
)

const testYAML = `
cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: 192.168.126.0/24
  gateway: 192.168.126.1
  apiVIPs: [192.168.126.5]
  ingressVIPs: [192.168.126.6]
nodes:
  - {name: master-0, role: master, mac: "52:54:00:7e:00:10", ips: [192.168.126.10]}
  - {name: worker-0, role: worker, mac: "52:54:00:7e:00:20", ips: [192.168.126.20]}
vrrp: {apiVRID: 10, ingressVRID: 11}
`

func testConfig(t *testing.T, extra string) *cluster.Config {
	t.Helper()
	cfg, err := cluster.Parse([]byte(testYAML + extra))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var (
	a = netip.MustParseAddr
	// stranger is a MAC no node has.
	stranger = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}
	master0  = net.HardwareAddr{0x52, 0x54, 0x00, 0x7e, 0x00, 0x10}
)

// expect checks a result's ID and status, and that its message names every
// word in want.
func expect(t *testing.T, r Result, id string, st Status, want ...string) {
	t.Helper()
	if r.ID != id || r.Status != st {
		t.Errorf("got %s %s (%s), want %s %s", r.ID, r.Status, r.Message, id, st)
	}
	for _, w := range want {
		if !strings.Contains(r.Message, w) {
			t.Errorf("%s: message %q does not name %q", r.ID, r.Message, w)
		}
	}
}

func TestDecideConfig(t *testing.T) {
	cfg := testConfig(t, "")
	expect(t, DecideConfig("a.yaml", cfg, nil), IDConfig, StatusPass, "ocp4.example.com", "2 nodes")

	_, err := cluster.Parse([]byte("cluster: {name: X, baseDomain: example.com}\n"))
	r := DecideConfig("a.yaml", nil, fmt.Errorf("cluster: load a.yaml:\n%w", err))
	expect(t, r, IDConfig, StatusFail, "cluster.name", "network.apiVIPs")
	if ps, ok := r.Details.([]problem); !ok || len(ps) < 2 || ps[0].Field != "cluster.name" {
		t.Errorf("details %#v, want the problems by field", r.Details)
	}

	expect(t, DecideConfig("a.yaml", nil, errors.New("open a.yaml: no such file")), IDConfig, StatusFail, "no such file")
}

func TestDecidePlacement(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra string
		st    Status
		want  []string
	}{
		{"no pool", "", StatusPass, []string{"192.168.126.0/24", "no DHCP pool"}},
		{"pool clear", "dhcp: {pool: {start: 192.168.126.100, end: 192.168.126.199}}\n", StatusPass, []string{"none inside dhcp.pool"}},
		{"VIP in pool", "dhcp: {pool: {start: 192.168.126.2, end: 192.168.126.8}}\n", StatusFail,
			[]string{"network.apiVIPs[0] 192.168.126.5", "network.ingressVIPs[0] 192.168.126.6"}},
		{"node and gateway in pool", "dhcp: {pool: {start: 192.168.126.1, end: 192.168.126.4}}\n", StatusFail,
			[]string{"network.gateway 192.168.126.1"}},
		{"node in pool", "dhcp: {pool: {start: 192.168.126.15, end: 192.168.126.30}}\n", StatusFail,
			[]string{"nodes[1].ips[0] (worker-0) 192.168.126.20", "move dhcp.pool"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, DecidePlacement(testConfig(t, tc.extra)), IDPlacement, tc.st, tc.want...)
		})
	}
}

func TestDecideOnPremStack(t *testing.T) {
	expect(t, DecideOnPremStack(testConfig(t, "")), IDOnPremStack, StatusPass, "no OpenShift on-prem stack")
	ic := func(platform string) *cluster.Config {
		cfg, err := cluster.ParseInstallConfig([]byte("apiVersion: v1\nmetadata: {name: ocp4}\nbaseDomain: example.com\n" +
			"networking: {machineNetwork: [{cidr: 192.168.126.0/24}]}\nplatform:\n  " + platform + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	expect(t, DecideOnPremStack(ic("baremetal: {apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}")), IDOnPremStack, StatusWarn,
		"platform baremetal", "keepalived, haproxy, coredns", "/etc/kubernetes/manifests/keepalived.yaml", "refuses to start", "platform none")
	r := DecideOnPremStack(ic("vsphere: {apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6], loadBalancer: {type: UserManaged}}"))
	expect(t, r, IDOnPremStack, StatusWarn, "its own coredns on every node (/etc/kubernetes/manifests/coredns.yaml)")
	if strings.Contains(r.Message, "keepalived") {
		t.Errorf("a user-managed load balancer gets no keepalived: %s", r.Message)
	}
}

func TestDecideVIP(t *testing.T) {
	cfg := testConfig(t, "")
	api, ing := a("192.168.126.5"), a("192.168.126.6")
	for _, tc := range []struct {
		name string
		o    VIPObservation
		id   string
		st   Status
		want []string
	}{
		{"free", VIPObservation{Kind: cluster.VIPAPI, VIP: api}, "vip-free.api-v4", StatusPass, []string{"192.168.126.5 is free"}},
		{"stranger", VIPObservation{Kind: cluster.VIPIngress, VIP: ing, Answers: []net.HardwareAddr{stranger}},
			"vip-free.ingress-v4", StatusFail, []string{"02:00:00:00:00:99", "network.ingressVIPs", "in use"}},
		{"stranger and ours", VIPObservation{Kind: cluster.VIPAPI, VIP: api, Answers: []net.HardwareAddr{master0, stranger}},
			"vip-free.api-v4", StatusFail, []string{"02:00:00:00:00:99"}},
		{"our node", VIPObservation{Kind: cluster.VIPAPI, VIP: api, Answers: []net.HardwareAddr{master0}},
			"vip-free.api-v4", StatusWarn, []string{"node master-0"}},
		{"this machine", VIPObservation{Kind: cluster.VIPAPI, VIP: api, LocalIface: "eth0"},
			"vip-free.api-v4", StatusWarn, []string{"eth0"}},
		{"cannot probe", VIPObservation{Kind: cluster.VIPAPI, VIP: api, Err: errors.New("permission denied")},
			"vip-free.api-v4", StatusWarn, []string{"permission denied"}},
		{"ipv6", VIPObservation{Kind: cluster.VIPAPI, VIP: a("fd00::5"), Answers: []net.HardwareAddr{stranger}},
			"vip-free.api-v6", StatusFail, []string{"neighbour solicitation", "02:00:00:00:00:99"}},
	} {
		t.Run(tc.name, func(t *testing.T) { expect(t, DecideVIP(cfg, tc.o), tc.id, tc.st, tc.want...) })
	}
}

func TestDecideDHCP(t *testing.T) {
	cfg := testConfig(t, "")
	rogue := DHCPOffer{Server: a("192.168.126.250"), Source: a("192.168.126.250"), Offered: a("192.168.126.77")}
	ours := DHCPOffer{Server: a("192.168.126.10"), Source: a("192.168.126.10"), Offered: a("192.168.126.100")}
	relayed := DHCPOffer{Server: a("10.0.0.1"), Source: a("192.168.126.1"), Offered: a("192.168.126.78")}
	for _, tc := range []struct {
		name   string
		offers []DHCPOffer
		err    error
		st     Status
		want   []string
	}{
		{"silence", nil, nil, StatusPass, []string{"no DHCP server answered"}},
		{"ours only", []DHCPOffer{ours, ours}, nil, StatusPass, []string{"node master-0"}},
		{"rogue", []DHCPOffer{ours, rogue, rogue}, nil, StatusFail, []string{"192.168.126.250 offering 192.168.126.77", "stop it"}},
		{"relayed", []DHCPOffer{relayed}, nil, StatusFail, []string{"10.0.0.1 (from 192.168.126.1)"}},
		{"no socket", nil, errors.New("operation not permitted"), StatusWarn, []string{"operation not permitted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := DecideDHCP(cfg, DHCPObservation{Iface: "eth0", MAC: stranger, Offers: tc.offers, Err: tc.err})
			expect(t, r, IDDHCP, tc.st, tc.want...)
			if n := strings.Count(r.Message, "192.168.126.250"); n > 1 {
				t.Errorf("server named %d times: %s", n, r.Message)
			}
		})
	}
}

func TestDecideVRRP(t *testing.T) {
	ourAPI := Advert{Source: a("192.168.126.10"), VRID: 10, Version: 3, Priority: 40, Addrs: []netip.Addr{a("192.168.126.5")}}
	other := Advert{Source: a("192.168.126.200"), VRID: 11, Version: 2, Priority: 100, Addrs: []netip.Addr{a("192.168.126.222")}}
	elsewhere := Advert{Source: a("192.168.126.201"), VRID: 12, Version: 2, Priority: 100, Addrs: []netip.Addr{a("192.168.126.223")}}
	for _, tc := range []struct {
		name  string
		extra string
		ads   []Advert
		err   error
		st    Status
		want  []string
	}{
		{"silence", "", nil, nil, StatusPass, []string{"no other VRRP router"}},
		{"our own router", "", []Advert{ourAPI}, nil, StatusPass, []string{"VRIDs 10 (api) and 11 (ingress) are free"}},
		{"other VRID", "", []Advert{elsewhere}, nil, StatusPass, []string{"VRIDs 12"}},
		{"clash", "  transport: multicast\n", []Advert{other, other, elsewhere}, nil, StatusFail,
			[]string{"VRID 11 (our ingress VRID) is used by 192.168.126.200", "192.168.126.222", "free here: 13, 14, 15", "vrrp.ingressVRID"}},
		{"clash on API VRID with our VIP plus another", "  transport: multicast\n", []Advert{{Source: a("192.168.126.202"), VRID: 10, Version: 3,
			Addrs: []netip.Addr{a("192.168.126.5"), a("192.168.126.7")}}}, nil, StatusFail, []string{"VRID 10 (our api VRID)"}},
		{"clash, unicast (the default) only warns", "", []Advert{other}, nil, StatusWarn,
			[]string{"VRID 11 (our ingress VRID) is used by 192.168.126.200", "unicast among the cluster's nodes and drop these adverts"}},
		{"our VIP from no node of ours", "", []Advert{{Source: a("192.168.126.250"), VRID: 10, Version: 2, Priority: 255,
			Addrs: []netip.Addr{a("192.168.126.5")}}}, nil, StatusFail, []string{"our own VIPs, from 192.168.126.250, which is no configured node"}},
		{"our VIP from a configured extra peer", "  unicastPeers: [192.168.126.250]\n", []Advert{{Source: a("192.168.126.250"), VRID: 10, Version: 2,
			Addrs: []netip.Addr{a("192.168.126.5")}}}, nil, StatusPass, []string{"are free"}},
		{"same VRID, other family", "", []Advert{{Source: a("fe80::1"), VRID: 11, Version: 3, Addrs: []netip.Addr{a("fd00::222")}}}, nil,
			StatusPass, []string{"VRIDs 11, none clashing"}},
		{"unicast with extra peers only warns", "  unicastPeers: [192.168.126.30]\n", []Advert{other}, nil, StatusWarn, []string{"unicast"}},
		{"no socket", "", nil, errors.New("operation not permitted"), StatusWarn, []string{"operation not permitted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "")
			if tc.extra != "" {
				var err error
				cfg, err = cluster.Parse([]byte(strings.Replace(testYAML, "vrrp: {apiVRID: 10, ingressVRID: 11}\n",
					"vrrp:\n  apiVRID: 10\n  ingressVRID: 11\n"+tc.extra, 1)))
				if err != nil {
					t.Fatal(err)
				}
			}
			r := DecideVRRP(cfg, VRRPObservation{Iface: "eth0", Window: 3e9, Adverts: tc.ads, Err: tc.err})
			expect(t, r, IDVRRP, tc.st, tc.want...)
			if n := strings.Count(r.Message, "192.168.126.200"); n > 1 {
				t.Errorf("source named %d times: %s", n, r.Message)
			}
		})
	}
}

func TestDecideVRRPCompatSuggestsRename(t *testing.T) {
	cfg, err := cluster.Parse([]byte(strings.Replace(testYAML, "vrrp: {apiVRID: 10, ingressVRID: 11}", "vrrp: {mode: keepalived-openshift}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	ad := Advert{Source: a("192.168.126.200"), VRID: cfg.VRRP.APIVRID, Version: 2, Addrs: []netip.Addr{a("192.168.126.222")}}
	expect(t, DecideVRRP(cfg, VRRPObservation{Iface: "eth0", Adverts: []Advert{ad}}), IDVRRP, StatusWarn, "rename the cluster")
}

func TestFreeVRIDs(t *testing.T) {
	ours := map[uint8]cluster.VIPKind{254: cluster.VIPAPI, 255: cluster.VIPIngress}
	got := FreeVRIDs(map[uint8]bool{1: true, 3: true}, ours, 3)
	if fmt.Sprint(got) != "[2 4 5]" {
		t.Errorf("FreeVRIDs wrapped to %v, want [2 4 5]", got)
	}
	all := map[uint8]bool{}
	for v := 1; v <= 255; v++ {
		all[uint8(v)] = true
	}
	if got := FreeVRIDs(all, ours, 3); len(got) != 0 {
		t.Errorf("FreeVRIDs on a full segment = %v", got)
	}
}

func TestDecideName(t *testing.T) {
	want := []netip.Addr{a("192.168.126.5")}
	dual := []netip.Addr{a("192.168.126.5"), a("fd00::5")}
	for _, tc := range []struct {
		name string
		o    NameObservation
		want []netip.Addr
		st   Status
		msg  []string
	}{
		{"right", NameObservation{A: DNSAnswer{Rcode: "NOERROR", Addrs: want}}, want, StatusPass, []string{"resolves to 192.168.126.5"}},
		{"dual right", NameObservation{A: DNSAnswer{Addrs: want[:1]}, AAAA: DNSAnswer{Addrs: []netip.Addr{a("fd00::5")}}}, dual, StatusPass, nil},
		{"missing", NameObservation{A: DNSAnswer{Rcode: "NXDOMAIN"}}, want, StatusFail, []string{"does not resolve", "NXDOMAIN", "network.apiVIPs"}},
		{"wrong", NameObservation{A: DNSAnswer{Addrs: []netip.Addr{a("192.168.126.9")}}}, want, StatusFail, []string{"resolves to 192.168.126.9", "want 192.168.126.5"}},
		{"extra family", NameObservation{A: DNSAnswer{Addrs: want}, AAAA: DNSAnswer{Addrs: []netip.Addr{a("fd00::9")}}}, want, StatusFail, []string{"fd00::9"}},
		{"missing family", NameObservation{A: DNSAnswer{Addrs: want}}, dual, StatusFail, []string{"want 192.168.126.5, fd00::5"}},
		{"no answer", NameObservation{A: DNSAnswer{Err: errors.New("i/o timeout")}}, want, StatusFail, []string{"did not answer", "i/o timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Resolver, tc.o.Name = "192.168.126.1:53", "api.ocp4.example.com"
			expect(t, DecideName("dns.api", tc.o, tc.want, "network.apiVIPs"), "dns.api", tc.st, tc.msg...)
		})
	}
}

func TestDecidePTR(t *testing.T) {
	for _, tc := range []struct {
		name string
		ans  DNSAnswer
		st   Status
		msg  []string
	}{
		{"right", DNSAnswer{Names: []string{"master-0.ocp4.example.com"}}, StatusPass, nil},
		{"right, other case and dot", DNSAnswer{Names: []string{"Master-0.OCP4.example.com."}}, StatusPass, nil},
		{"missing", DNSAnswer{Rcode: "NXDOMAIN"}, StatusFail, []string{"no PTR", "master-0.ocp4.example.com"}},
		{"wrong", DNSAnswer{Names: []string{"host-10.example.net"}}, StatusFail, []string{"host-10.example.net", "want master-0"}},
		{"no answer", DNSAnswer{Err: errors.New("refused")}, StatusFail, []string{"refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := PTRObservation{Resolver: "192.168.126.1:53", Addr: a("192.168.126.10"), Answer: tc.ans}
			expect(t, DecidePTR("dns.ptr.master-0", o, "master-0.ocp4.example.com"), "dns.ptr.master-0", tc.st, tc.msg...)
		})
	}
}

func TestDecideWildcard(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    NameObservation
		st   Status
		msg  []string
	}{
		{"nxdomain", NameObservation{A: DNSAnswer{Rcode: "NXDOMAIN"}, AAAA: DNSAnswer{Rcode: "NXDOMAIN"}}, StatusPass, []string{"no wildcard"}},
		{"nodata", NameObservation{A: DNSAnswer{Rcode: "NOERROR"}}, StatusPass, nil},
		{"wildcard", NameObservation{A: DNSAnswer{Rcode: "NOERROR", Addrs: []netip.Addr{a("192.168.126.6")}}}, StatusFail,
			[]string{"resolves to 192.168.126.6", "wildcard", "only *.apps.ocp4.example.com"}},
		{"no answer", NameObservation{AAAA: DNSAnswer{Err: errors.New("timeout")}}, StatusFail, []string{"timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Resolver, tc.o.Name = "192.168.126.1:53", "preflight-x.ocp4.example.com"
			expect(t, DecideWildcard("dns.wildcard", "ocp4.example.com", tc.o), "dns.wildcard", tc.st, tc.msg...)
		})
	}
}

func TestNodePorts(t *testing.T) {
	l := Listens{DNS: ":53", DHCP: ":67", APILB: ":9445", MCSLB: ":9446", Admin: "127.0.0.1:9447"}
	ids := func(ps []PortSpec) string {
		var s []string
		for _, p := range ps {
			s = append(s, p.ID())
		}
		return strings.Join(s, " ")
	}
	for _, tc := range []struct {
		role cluster.Role
		l    Listens
		want string
	}{
		{cluster.RoleMaster, l, "port.53-udp port.53-tcp port.67-udp port.9445-tcp port.9446-tcp port.9447-tcp"},
		{cluster.RoleBootstrap, l, "port.53-udp port.53-tcp port.67-udp port.9445-tcp port.9446-tcp port.9447-tcp"},
		{cluster.RoleWorker, l, "port.53-udp port.53-tcp port.9447-tcp"},
		{cluster.RoleMaster, Listens{DNS: ":53", DHCP: ":67", APILB: ":9445", MCSLB: ":9446", NoMCS: true},
			"port.53-udp port.53-tcp port.67-udp port.9445-tcp"},
	} {
		if got := ids(NodePorts(tc.role, tc.l)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.role, got, tc.want)
		}
	}
}

func TestDecidePort(t *testing.T) {
	spec := PortSpec{"udp", ":53", "cluster DNS"}
	inUse := fmt.Errorf("listen udp :53: bind: %w", syscall.EADDRINUSE)
	for _, tc := range []struct {
		name string
		o    PortObservation
		st   Status
		msg  []string
	}{
		{"free", PortObservation{Spec: spec}, StatusPass, []string{":53/udp is free"}},
		{"taken, holder known", PortObservation{Spec: spec, Err: inUse, Holder: "dnsmasq (pid 812)"}, StatusFail,
			[]string{"dnsmasq (pid 812)", "cluster DNS"}},
		{"taken", PortObservation{Spec: spec, Err: inUse}, StatusFail, []string{"another program"}},
		{"taken by the appliance", PortObservation{Spec: spec, Err: inUse, Holder: "appliance (pid 9)"}, StatusWarn, []string{"already runs"}},
		{"not root", PortObservation{Spec: spec, Err: fmt.Errorf("bind: %w", syscall.EACCES)}, StatusSkipped, []string{"root"}},
		{"bad address", PortObservation{Spec: spec, Err: fmt.Errorf("bind: %w", syscall.EADDRNOTAVAIL)}, StatusFail, []string{"not on this machine"}},
		{"other", PortObservation{Spec: spec, Err: errors.New("odd")}, StatusWarn, []string{"odd"}},
	} {
		t.Run(tc.name, func(t *testing.T) { expect(t, DecidePort(tc.o), "port.53-udp", tc.st, tc.msg...) })
	}
}

func TestDecideMTU(t *testing.T) {
	gw := a("192.168.126.1")
	for _, tc := range []struct {
		name     string
		mtu      int
		answered map[int]bool
		err      error
		st       Status
		msg      []string
	}{
		{"full size passes", 1500, map[int]bool{1500: true, 1492: true}, nil, StatusPass, []string{"1500-byte"}},
		{"jumbo interface, Ethernet path", 9000, map[int]bool{9000: false, 1500: true, 1492: true, 1280: true}, nil, StatusFail,
			[]string{"MTU 9000", "only 1500-byte", "set the interface MTU to 1500"}},
		{"nothing answers", 1500, map[int]bool{1500: false, 1280: false}, nil, StatusWarn, []string{"none of the echo requests", "1280, 1500"}},
		{"cannot probe", 1500, nil, errors.New("operation not permitted"), StatusWarn, []string{"operation not permitted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := DecideMTU(MTUObservation{Iface: "eth0", MTU: tc.mtu, Gateway: gw, Answered: tc.answered, Err: tc.err})
			expect(t, r, IDMTU, tc.st, tc.msg...)
		})
	}
}

func TestProbeSizes(t *testing.T) {
	if got := fmt.Sprint(ProbeSizes(1500)); got != "[1500 1492 1450 1400 1280]" {
		t.Errorf("ProbeSizes(1500) = %s", got)
	}
	if got := fmt.Sprint(ProbeSizes(9000)); got != "[9000 1500 1492 1450 1400 1280]" {
		t.Errorf("ProbeSizes(9000) = %s", got)
	}
}

func TestDecideResolver(t *testing.T) {
	down := NameObservation{Resolver: "192.168.126.1:53", Name: "api.ocp4.example.com",
		A: DNSAnswer{Err: errors.New("i/o timeout")}, AAAA: DNSAnswer{Err: errors.New("i/o timeout")}}
	expect(t, DecideResolver("dhcp.dns", down), "dns.resolver", StatusFail, "192.168.126.1:53", "dhcp.dns", "i/o timeout")
	half := down
	half.AAAA = DNSAnswer{Rcode: "NOERROR"}
	expect(t, DecideResolver("dhcp.dns", half), "dns.resolver", StatusPass, "answers")
	up := NameObservation{Resolver: "192.168.126.1:53", A: DNSAnswer{Rcode: "NXDOMAIN"}, AAAA: DNSAnswer{Rcode: "NXDOMAIN"}}
	expect(t, DecideResolver("--resolver", up), "dns.resolver", StatusPass, "--resolver")
}
