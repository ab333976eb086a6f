package node

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"appliance/internal/cluster"
	"appliance/vrrp"
)

const planConfig = `
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

func TestPlanFor(t *testing.T) {
	cfg := parse(t, planConfig)
	off := parse(t, planConfig+"lb: {enabled: false}\ndns: {enabled: false}\ndhcp: {enabled: true}\n")
	noVRRP := parse(t, planConfig+"vrrp: {enabled: false}\ndns: {mdns: true}\n")
	cases := []struct {
		cfg  *cluster.Config
		role cluster.Role
		want string
	}{
		{cfg, cluster.RoleBootstrap, "api-vip, lb, dns"},
		{cfg, cluster.RoleMaster, "api-vip, ingress-vip, lb, dns"},
		{cfg, cluster.RoleWorker, "ingress-vip, dns"},
		{off, cluster.RoleMaster, "api-vip, ingress-vip, dhcp"},
		{off, cluster.RoleWorker, "ingress-vip"},
		{noVRRP, cluster.RoleMaster, "lb, dns, mdns"},
		{noVRRP, cluster.RoleWorker, "dns, mdns"},
	}
	for _, c := range cases {
		if got := PlanFor(c.cfg, c.role).String(); got != c.want {
			t.Errorf("%s: plan %q, want %q", c.role, got, c.want)
		}
	}
	if got := (Plan{}).String(); got != "nothing" {
		t.Errorf("empty plan %q", got)
	}
}

func TestVRRPConfigsTieTheServices(t *testing.T) {
	cfg := parse(t, planConfig)
	probe := vrrp.FuncProbe(func(context.Context) error { return nil })
	var lbFor []netip.Addr
	p := Probes{
		LB: func(vip netip.Addr) vrrp.Probe {
			lbFor = append(lbFor, vip)
			return probe
		},
		APIServer: probe, IngressPort: probe,
	}
	describe := func(cs []vrrp.Config) string {
		var out []string
		for _, c := range cs {
			s := c.Name + "@" + c.Interface
			for _, tr := range c.Tracks {
				s += " " + tr.Name + ":" + strconv.Itoa(tr.Weight)
			}
			out = append(out, s+" prio "+strconv.Itoa(int(c.Priority)))
		}
		return strings.Join(out, "; ")
	}
	cases := []struct {
		node string
		want string
	}{
		{"bootstrap", "api-v4@eth0 lb:-30 bootstrap-apiserver:-20 prio 50; api-v6@eth0 lb:-30 bootstrap-apiserver:-20 prio 50"},
		{"master-0", "api-v4@eth0 lb:-30 prio 40; api-v6@eth0 lb:-30 prio 40; ingress-v4@eth0 router:0 prio 20"},
		{"worker-0", "ingress-v4@eth0 router:0 prio 40"},
	}
	for _, c := range cases {
		self, _ := cfg.NodeByName(c.node)
		got := describe(VRRPConfigs(cfg, self, PlanFor(cfg, self.Role), "eth0", p))
		if got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.node, got, c.want)
		}
	}
	// Each API VIP follows the LB's health for its own family.
	if len(lbFor) != 4 || lbFor[0] != netip.MustParseAddr("192.168.126.5") || lbFor[1] != netip.MustParseAddr("fd00:126::5") {
		t.Errorf("LB probes asked for %v", lbFor)
	}
	// The handover arithmetic: an LB that cannot serve puts any node below a
	// serving one, and the bootstrap's own apiserver failing puts it below
	// every master.
	boot, master := cluster.DefaultPriority(cluster.RoleBootstrap, cluster.VIPAPI), cluster.DefaultPriority(cluster.RoleMaster, cluster.VIPAPI)
	b, m := int(boot), int(master)
	for _, c := range []struct {
		what      string
		high, low int
	}{
		{"a serving master over a bootstrap whose apiserver failed", m, b + WeightBootstrapAPIServer},
		{"a serving master over a bootstrap whose LB cannot serve", m, b + WeightLB},
		{"a bootstrap whose LB serves over a master whose LB cannot", b + WeightBootstrapAPIServer, m + WeightLB},
	} {
		if c.high <= c.low {
			t.Errorf("weights %d/%d: want %s (%d > %d)", WeightLB, WeightBootstrapAPIServer, c.what, c.high, c.low)
		}
	}
}

// TestVIPStateMapping holds vipState to every value a vrrp.State can take:
// each state vrrp names maps onto the cluster state of the same name (the
// text /status and the logs show), and an unnamed value onto none. A state
// added to vrrp without a mapping here fails.
func TestVIPStateMapping(t *testing.T) {
	mapped := map[cluster.VIPState]bool{}
	for i := range 256 {
		s := vrrp.State(i)
		named := s.String() != fmt.Sprintf("State(%d)", i)
		got, ok := vipState(s)
		switch {
		case named && (!ok || string(got) != s.String()):
			t.Errorf("vrrp state %s maps onto %q, %v; want cluster state %q", s, got, ok, s.String())
		case !named && ok:
			t.Errorf("unnamed vrrp state %d maps onto %q; want none", i, got)
		case ok:
			mapped[got] = true
			// Through vrrp.Status, as the instances report it.
			st := vipStatus(cluster.VIPAPI, 51, vrrp.Status{Name: "api-v4", State: s.String()})
			if st.LocalState != got {
				t.Errorf("vipStatus of a %s instance: LocalState %q, want %q", s, st.LocalState, got)
			}
		}
	}
	for _, want := range []cluster.VIPState{cluster.VIPStateInit, cluster.VIPStateBackup, cluster.VIPStateMaster, cluster.VIPStateFault} {
		if !mapped[want] {
			t.Errorf("no vrrp state maps onto %s", want)
		}
	}
	if st := vipStatus(cluster.VIPAPI, 51, vrrp.Status{Name: "api-v4", State: "STOPPED"}); st.LocalState != "" {
		t.Errorf("an unknown state text gives LocalState %q, want none", st.LocalState)
	}
}

// TestVIPStatusCarriesTheHolders: what lb's handback reads of an
// instance (the master followed, the predecessor, every recent holder)
// reaches the cluster view as the instance reported it.
func TestVIPStatusCarriesTheHolders(t *testing.T) {
	b, c, d := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.12")
	at := time.Unix(1000, 0)
	s := vrrp.Status{Name: "api-v4", State: "MASTER", Master: c, Predecessor: b, Since: at,
		VIPs:    []netip.Prefix{netip.MustParsePrefix("192.168.126.5/32")},
		Holders: []vrrp.Holder{{Addr: d, Last: at.Add(-3 * time.Second)}, {Addr: b, Last: at, Alive: true}}}
	got := vipStatus(cluster.VIPAPI, 51, s)
	want := cluster.VIPStatus{Name: "api-v4", VIP: netip.MustParseAddr("192.168.126.5"), VRID: 51, Kind: cluster.VIPAPI,
		LocalState: cluster.VIPStateMaster, Master: c, Predecessor: b, Since: at,
		Holders: []cluster.VIPHolder{{Addr: d, Last: at.Add(-3 * time.Second)}, {Addr: b, Last: at, Alive: true}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("vipStatus:\n%+v\nwant\n%+v", got, want)
	}
}

func TestHoldsAPIVIP(t *testing.T) {
	snap := &cluster.Snapshot{VIPs: []cluster.VIPStatus{
		{Name: "api-v4", Kind: cluster.VIPAPI, LocalState: cluster.VIPStateBackup},
		{Name: "ingress-v4", Kind: cluster.VIPIngress, LocalState: cluster.VIPStateMaster},
	}}
	if holdsAPIVIP(snap) {
		t.Error("an ingress VIP does not serve the DHCP pool")
	}
	snap.VIPs[0].LocalState = cluster.VIPStateMaster
	if !holdsAPIVIP(snap) {
		t.Error("the API VIP's master serves the pool")
	}
	if k, err := kindOf("ingress-v6"); err != nil || k != cluster.VIPIngress {
		t.Errorf("kindOf = %v %v", k, err)
	}
	if _, err := kindOf("vrid-51"); err == nil {
		t.Error("kindOf accepted a name of neither kind")
	}
}

func TestUnicastPeers(t *testing.T) {
	cfg := parse(t, planConfig+"vrrp: {unicastPeers: [192.168.126.9, 192.168.126.10, 192.168.126.20]}\n")
	a := netip.MustParseAddr
	snap := &cluster.Snapshot{Members: []cluster.Member{
		{Name: "bootstrap", Role: cluster.RoleBootstrap, IPs: []netip.Addr{a("192.168.126.9")}},
		{Name: "master-0", Role: cluster.RoleMaster, IPs: []netip.Addr{a("192.168.126.10"), a("fd00:126::10")}},
		{Name: "master-3", Role: cluster.RoleMaster, IPs: []netip.Addr{a("192.168.126.13"), a("10.9.9.9")}, Source: cluster.SourceKubernetes},
		{Name: "worker-0", Role: cluster.RoleWorker, IPs: []netip.Addr{a("192.168.126.20")}},
		{Name: "worker-5", Role: cluster.RoleWorker, IPs: []netip.Addr{a("192.168.126.25")}, Source: cluster.SourceMDNS},
	}}
	self := []netip.Addr{a("192.168.126.10"), a("fd00:126::10")}
	cases := []struct {
		kind cluster.VIPKind
		v6   bool
		want string
	}{
		// The configured peers stay (worker-0 is one, though it takes no
		// part in the API VIP); a day-2 master joins; addresses outside the
		// machine networks and our own never count.
		{cluster.VIPAPI, false, "[192.168.126.9 192.168.126.13 192.168.126.20]"},
		{cluster.VIPIngress, false, "[192.168.126.9 192.168.126.13 192.168.126.20 192.168.126.25]"},
		{cluster.VIPAPI, true, "[]"},
	}
	for _, c := range cases {
		if got := fmt.Sprint(unicastPeers(cfg, snap, c.kind, c.v6, self)); got != c.want {
			t.Errorf("%s v6=%v: %s, want %s", c.kind, c.v6, got, c.want)
		}
	}
}

// Every router runs unicast unless the config says multicast, with the
// configured nodes of its roles as its first peers.
func TestVRRPConfigsTransport(t *testing.T) {
	for _, c := range []struct {
		extra   string
		unicast bool
		peers   string
	}{
		{"", true, "[192.168.126.9]"},
		{"vrrp: {transport: multicast}\n", false, "[]"},
	} {
		cfg := parse(t, planConfig+c.extra)
		self, _ := cfg.NodeByName("master-0")
		cs := VRRPConfigs(cfg, self, PlanFor(cfg, self.Role), "eth0", Probes{})
		if cs[0].Name != "api-v4" || cs[0].Unicast != c.unicast || fmt.Sprint(cs[0].UnicastPeers) != c.peers {
			t.Errorf("%q: %s unicast %v peers %v, want %v %s", c.extra, cs[0].Name, cs[0].Unicast, cs[0].UnicastPeers, c.unicast, c.peers)
		}
	}
}

func TestRouterAliveURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:1936/healthz/ready": "http://127.0.0.1:1936/healthz",
		"http://localhost:1936/healthz":       "http://localhost:1936/healthz",
		"http://[::1]:8080/ready":             "http://[::1]:8080",
	} {
		if got := RouterAliveURL(in); got != want {
			t.Errorf("RouterAliveURL(%q) = %q, want %q", in, got, want)
		}
	}
}
