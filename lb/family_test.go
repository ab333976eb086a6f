package lb

import (
	"context"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"appliance/internal/cluster"
	"appliance/internal/health"
)

func TestTargetsForDualStack(t *testing.T) {
	a := netip.MustParseAddr
	tests := []struct {
		name    string
		members []cluster.Member
		dual    bool
		want    []BackendTarget
	}{
		{
			name: "single-stack: first address, every client, names unchanged",
			members: []cluster.Member{
				{Name: "master-0", Role: cluster.RoleMaster, IPs: []netip.Addr{a("fd00::10"), a("10.0.0.10")}},
			},
			want: []BackendTarget{{Name: "master-0", Addr: "[fd00::10]:6443"}},
		},
		{
			name: "dual-stack: a backend per family, in family order whatever the member's order",
			members: []cluster.Member{
				{Name: "master-0", Role: cluster.RoleMaster, IPs: []netip.Addr{a("fd00::10"), a("10.0.0.10")}},
			},
			dual: true,
			want: []BackendTarget{
				{Name: "master-0/v4", Addr: "10.0.0.10:6443", Family: FamilyIPv4},
				{Name: "master-0/v6", Addr: "[fd00::10]:6443", Family: FamilyIPv6},
			},
		},
		{
			name: "dual-stack: the first address of each family",
			members: []cluster.Member{
				{Name: "master-0", Role: cluster.RoleMaster, IPs: []netip.Addr{a("10.0.0.10"), a("10.0.1.10"), a("fd00::10"), a("fd00:1::10")}},
			},
			dual: true,
			want: []BackendTarget{
				{Name: "master-0/v4", Addr: "10.0.0.10:6443", Family: FamilyIPv4},
				{Name: "master-0/v6", Addr: "[fd00::10]:6443", Family: FamilyIPv6},
			},
		},
		{
			name: "dual-stack: a member known by one address takes every client under its own name; the bootstrap stays a backup",
			members: []cluster.Member{
				{Name: "bootstrap", Role: cluster.RoleBootstrap, IPs: []netip.Addr{a("10.0.0.9"), a("fd00::9")}},
				{Name: "master-1", Role: cluster.RoleMaster, IPs: []netip.Addr{a("10.0.0.11")}},
				{Name: "master-2", Role: cluster.RoleMaster, IPs: []netip.Addr{a("fd00::12")}},
				{Name: "master-3", Role: cluster.RoleMaster},
				{Name: "master-4", Role: cluster.RoleMaster, IPs: []netip.Addr{a("10.0.0.14"), a("10.0.1.14")}},
				{Name: "worker-0", Role: cluster.RoleWorker, IPs: []netip.Addr{a("10.0.0.20"), a("fd00::20")}},
			},
			dual: true,
			want: []BackendTarget{
				{Name: "bootstrap/v4", Addr: "10.0.0.9:6443", Backup: true, Family: FamilyIPv4},
				{Name: "bootstrap/v6", Addr: "[fd00::9]:6443", Backup: true, Family: FamilyIPv6},
				{Name: "master-1", Addr: "10.0.0.11:6443"},
				{Name: "master-2", Addr: "[fd00::12]:6443"},
				{Name: "master-4", Addr: "10.0.0.14:6443"},
			},
		},
		{
			name: "dual-stack: an IPv4-mapped address counts as IPv4 and is dialled as one",
			members: []cluster.Member{
				{Name: "master-0", Role: cluster.RoleMaster, IPs: []netip.Addr{a("fd00::10"), a("::ffff:10.0.0.10")}},
			},
			dual: true,
			want: []BackendTarget{
				{Name: "master-0/v4", Addr: "10.0.0.10:6443", Family: FamilyIPv4},
				{Name: "master-0/v6", Addr: "[fd00::10]:6443", Family: FamilyIPv6},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := targetsFor(tt.members, 6443, tt.dual); !slices.Equal(got, tt.want) {
				t.Fatalf("got  %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestDualStack(t *testing.T) {
	a := netip.MustParseAddr
	tests := []struct {
		vips []netip.Addr
		want bool
	}{
		{nil, false},
		{[]netip.Addr{a("192.168.126.5")}, false},
		{[]netip.Addr{a("fd00::5")}, false},
		{[]netip.Addr{a("192.168.126.5"), a("192.168.126.6")}, false},
		{[]netip.Addr{a("192.168.126.5"), a("fd00::5")}, true},
		{[]netip.Addr{a("fd00::5"), a("192.168.126.5")}, true},
		{[]netip.Addr{a("::ffff:192.168.126.5"), a("192.168.126.6")}, false},
	}
	for _, tt := range tests {
		if got := dualStack(tt.vips); got != tt.want {
			t.Errorf("dualStack(%v) = %v, want %v", tt.vips, got, tt.want)
		}
	}
}

// TestCandidates: which backends a connection of a family may go to.
func TestCandidates(t *testing.T) {
	type be struct {
		name   string
		fam    Family
		backup bool
		down   bool
	}
	dual := []be{
		{"bootstrap/v4", FamilyIPv4, true, false},
		{"bootstrap/v6", FamilyIPv6, true, false},
		{"master-0/v4", FamilyIPv4, false, false},
		{"master-0/v6", FamilyIPv6, false, false},
		{"master-1/v4", FamilyIPv4, false, false},
		{"master-1/v6", FamilyIPv6, false, true}, // up over IPv4 only
	}
	with := func(bs []be, f func(*be)) []be {
		out := slices.Clone(bs)
		for i := range out {
			f(&out[i])
		}
		return out
	}
	tests := []struct {
		name  string
		bs    []be
		fam   Family
		tried string // comma-separated names
		want  string
	}{
		{"IPv4 client: IPv4 primaries up", dual, FamilyIPv4, "", "master-0/v4,master-1/v4"},
		{"IPv6 client: IPv6 primaries up, not the one down over IPv6", dual, FamilyIPv6, "", "master-0/v6"},
		{"IPv6 client: its only primary tried, then its backup", dual, FamilyIPv6, "master-0/v6", "bootstrap/v6"},
		{"IPv4 client: no IPv6 backend even when IPv4 ones were all tried", dual, FamilyIPv4, "master-0/v4,master-1/v4", "bootstrap/v4"},
		{"IPv6 client: no master up over IPv6, the backup of that family", with(dual, func(b *be) {
			if b.name == "master-0/v6" {
				b.down = true
			}
		}), FamilyIPv6, "", "bootstrap/v6"},
		{"IPv6 client: nothing up over IPv6, nothing over IPv4 either", with(dual, func(b *be) {
			if b.fam == FamilyIPv6 {
				b.down = true
			}
		}), FamilyIPv6, "", ""},
		{"unknown client family: every family", dual, FamilyAny, "", "master-0/v4,master-0/v6,master-1/v4"},
		{"IPv6 client: a member known by its IPv4 address alone takes it too", append(slices.Clone(dual), be{"master-2", FamilyAny, false, false}), FamilyIPv6, "", "master-0/v6,master-2"},
		{"single-stack: every client everywhere", []be{{"master-0", FamilyAny, false, false}, {"master-1", FamilyAny, false, false}}, FamilyIPv6, "", "master-0,master-1"},
		{"single-stack listener: a client family changes nothing", []be{{"master-0", FamilyAny, false, true}, {"bootstrap", FamilyAny, true, false}}, FamilyIPv4, "", "bootstrap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			byName := map[string]*backend{}
			var order []*backend
			for _, b := range tt.bs {
				st := HealthUp
				if b.down {
					st = HealthDown
				}
				x := &backend{BackendTarget: BackendTarget{Name: b.name, Backup: b.backup, Family: b.fam}, h: health.NewHysteresis(3, 3, st)}
				byName[b.name] = x
				order = append(order, x)
			}
			var tried []*backend
			if tt.tried != "" {
				for _, n := range strings.Split(tt.tried, ",") {
					tried = append(tried, byName[n])
				}
			}
			var names []string
			for _, b := range candidates(nil, order, tried, tt.fam) {
				names = append(names, b.Name)
			}
			if got := strings.Join(names, ","); got != tt.want {
				t.Fatalf("candidates %q, want %q", got, tt.want)
			}
		})
	}
}

// TestPickByFamily: the pool's pick and its counts of healthy backends
// follow the family, and rotation goes on per family.
func TestPickByFamily(t *testing.T) {
	p := newPool("api", RoundRobin, HealthOptions{}, nil, nil, testLogger(t), nil)
	for _, tg := range []BackendTarget{
		{Name: "m0/v4", Family: FamilyIPv4}, {Name: "m0/v6", Family: FamilyIPv6},
		{Name: "m1/v4", Family: FamilyIPv4}, {Name: "m1/v6", Family: FamilyIPv6},
	} {
		st := HealthUp
		if tg.Name == "m1/v6" {
			st = HealthDown
		}
		p.backends[tg.Name] = &backend{BackendTarget: tg, h: health.NewHysteresis(3, 3, st)}
	}
	p.reorder()
	var seq []string
	for _, f := range []Family{FamilyIPv4, FamilyIPv6, FamilyIPv4, FamilyIPv6} {
		seq = append(seq, p.pick(nil, f).Name)
	}
	if got := strings.Join(seq, " "); got != "m0/v4 m0/v6 m1/v4 m0/v6" {
		t.Errorf("picks %s", got)
	}
	for f, want := range map[Family]int{FamilyAny: 3, FamilyIPv4: 2, FamilyIPv6: 1} {
		if got := p.HealthyFor(f); got != want {
			t.Errorf("HealthyFor(%s) = %d, want %d", f, got, want)
		}
	}
}

func TestSockaddrFamily(t *testing.T) {
	v4 := func(a string) *unix.RawSockaddrAny {
		var sa unix.RawSockaddrAny
		in := (*unix.RawSockaddrInet4)(unsafe.Pointer(&sa))
		in.Family, in.Addr = unix.AF_INET, netip.MustParseAddr(a).As4()
		return &sa
	}
	v6 := func(a string) *unix.RawSockaddrAny {
		var sa unix.RawSockaddrAny
		in := (*unix.RawSockaddrInet6)(unsafe.Pointer(&sa))
		in.Family, in.Addr = unix.AF_INET6, netip.MustParseAddr(a).As16()
		return &sa
	}
	tests := []struct {
		name string
		sa   *unix.RawSockaddrAny
		want Family
	}{
		{"IPv4 listener", v4("192.168.126.13"), FamilyIPv4},
		{"IPv4 client of a dual-stack listener", v6("::ffff:192.168.126.13"), FamilyIPv4},
		{"IPv6 client", v6("fd00:126::13"), FamilyIPv6},
		{"IPv6 loopback", v6("::1"), FamilyIPv6},
		{"not an IP socket", &unix.RawSockaddrAny{Addr: unix.RawSockaddr{Family: unix.AF_UNIX}}, FamilyAny},
	}
	for _, tt := range tests {
		if got := sockaddrFamily(tt.sa); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

// TestDualStackLoopback: with API VIPs of both families, master-0 known
// by an IPv4 and an IPv6 address and master-1 by its IPv4 address alone,
// clients of the proxy over IPv6 reach master-0 over IPv6 only (and
// master-1, which takes every client, over IPv4); clients over IPv4 reach
// master-0 over IPv4. master-0 failing its IPv6 checks leaves its IPv4
// backend untouched. /status and the metrics tell its two backends apart.
func TestDualStackLoopback(t *testing.T) {
	var fc *fakeCluster
	var v6 *fakeServer
	for attempt := 0; v6 == nil; attempt++ {
		fc = newFakeCluster(t, 2)
		f, err := startFake(t, fc.ca, "master-0", netip.AddrPortFrom(netip.IPv6Loopback(), fc.port).String(), nil)
		if err != nil {
			if attempt > 10 {
				t.Fatalf("[::1]:%d: %v", fc.port, err)
			}
			continue
		}
		v6 = f
	}
	cfg := fc.cfg
	cfg.Network.APIVIPs = []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")}
	cfg.Nodes[0].IPs = append(cfg.Nodes[0].IPs, netip.IPv6Loopback())
	o := fastOptions(fc.port)
	o.MCS.Disabled = true
	o.API.Listen = ":0" // one dual-stack socket, as ":9445" is
	reg := prometheus.NewRegistry()
	l, err := New(cfg, cluster.NewState(cfg), o, NewMetrics(reg), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	p := l.Pool(PoolAPI)
	waitFor(t, 5*time.Second, func() bool { return p.Healthy() == 4 })

	var names []string
	for _, b := range p.Status() {
		names = append(names, b.Name+"="+b.Family)
	}
	if got := strings.Join(names, " "); got != "bootstrap=ipv4 master-0/v4=ipv4 master-0/v6=ipv6 master-1=ipv4" {
		t.Errorf("backends %s", got)
	}

	port := portOf(l.Addr(PoolAPI))
	// spread sends n clients over via and counts who answered, and from
	// which family the backend saw each come.
	spread := func(via netip.Addr, n int) map[string]int {
		t.Helper()
		seen := map[string]int{}
		c := fc.client(netip.AddrPortFrom(via, port).String())
		for range n {
			resp, err := c.Get("https://api.test/peer")
			if err != nil {
				t.Fatalf("via %s: %v", via, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			name, from, _ := strings.Cut(string(b), " ")
			seen[name+" "+familyOf(netip.MustParseAddrPort(from).Addr()).String()]++
		}
		return seen
	}
	lo4, lo6 := netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()
	if got := spread(lo4, 4); !maps.Equal(got, map[string]int{"master-0 ipv4": 2, "master-1 ipv4": 2}) {
		t.Errorf("IPv4 clients reached %v", got)
	}
	if got := spread(lo6, 4); !maps.Equal(got, map[string]int{"master-0 ipv6": 2, "master-1 ipv4": 2}) {
		t.Errorf("IPv6 clients reached %v", got)
	}

	// master-0 fails /readyz over IPv6 only: IPv6 clients go to master-1
	// alone, never to master-0 over IPv4; IPv4 clients still reach both.
	v6.ready.Store(false)
	waitFor(t, 10*time.Second, func() bool { return p.HealthyFor(FamilyIPv6) == 2 })
	if n := p.HealthyFor(FamilyIPv4); n != 3 {
		t.Errorf("%d backends up for IPv4 clients, want 3", n)
	}
	if got := spread(lo6, 3); !maps.Equal(got, map[string]int{"master-1 ipv4": 3}) {
		t.Errorf("IPv6 clients reached %v with master-0 down over IPv6", got)
	}
	if got := spread(lo4, 4); !maps.Equal(got, map[string]int{"master-0 ipv4": 2, "master-1 ipv4": 2}) {
		t.Errorf("IPv4 clients reached %v with master-0 down over IPv6", got)
	}

	m := gather(t, reg)
	for k, want := range map[string]float64{
		"appliance_lb_backend_state,backend=master-0/v4,pool=api":              float64(HealthUp),
		"appliance_lb_backend_state,backend=master-0/v6,pool=api":              float64(HealthDown),
		"appliance_lb_backend_state,backend=master-1,pool=api":                 float64(HealthUp),
		"appliance_lb_backend_active_connections,backend=master-0/v6,pool=api": 0,
	} {
		if v, ok := m[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
	if m["appliance_lb_backend_bytes_total,backend=master-0/v6,direction=out,pool=api"] == 0 {
		t.Error("no bytes counted on master-0/v6")
	}
}
