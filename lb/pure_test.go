package lb

import (
	"net/netip"
	"testing"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/health"
)

// The counting itself is tested in internal/health; here, that a backend's
// hysteresis starts Unknown and takes Fall and Rise from the options.
func TestHysteresis(t *testing.T) {
	tests := []struct {
		name    string
		results string // o ok, x fail
		want    string // state after each result: u up, d down
	}{
		{"first ok decides up", "o", "u"},
		{"first fail decides down", "x", "d"},
		{"fall needs three in a row", "oxxoxxx", "uuuuuud"},
		{"rise needs three in a row", "xoooo", "ddduu"},
		{"flap never re-added", "oxxxoxoxoxoo", "uuuddddddddd"},
		{"recovers after rise", "oxxxooo", "uuudddu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := DefaultHealthOptions().newHysteresis() // Fall 3, Rise 3
			for i, r := range tt.results {
				h.Observe(r == 'o')
				got := map[HealthState]byte{HealthUp: 'u', HealthDown: 'd', HealthUnknown: '?'}[h.State()]
				if got != tt.want[i] {
					t.Fatalf("after %q: state %c, want %c", tt.results[:i+1], got, tt.want[i])
				}
			}
		})
	}
}

func TestHysteresisInterval(t *testing.T) {
	o := DefaultHealthOptions()
	h := o.newHysteresis()
	if o.next(&h) != o.FastInterval {
		t.Error("unknown state must probe fast")
	}
	h.Observe(true)
	if o.next(&h) != o.Interval {
		t.Error("settled up must probe at Interval")
	}
	h.Observe(false)
	if o.next(&h) != o.FastInterval {
		t.Error("a change in progress must probe fast")
	}
}

func TestRemovalBoundDefault(t *testing.T) {
	if b := DefaultHealthOptions().RemovalBound(); b > 5*time.Second {
		t.Fatalf("default removal bound %v exceeds the 5 s goal", b)
	}
}

func TestSlowStartWeight(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		el   time.Duration
		ramp time.Duration
		want int
	}{
		{0, 10 * time.Second, 1},
		{5 * time.Second, 10 * time.Second, 50},
		{10 * time.Second, 10 * time.Second, 100},
		{time.Hour, 10 * time.Second, 100},
		{0, 0, 100},
	}
	for _, tt := range tests {
		if got := slowStartWeight(100, t0, t0.Add(tt.el), tt.ramp); got != tt.want {
			t.Errorf("el %v ramp %v: weight %d, want %d", tt.el, tt.ramp, got, tt.want)
		}
	}
	if got := slowStartWeight(100, time.Time{}, t0, time.Second); got != 100 {
		t.Errorf("no upSince: weight %d, want full", got)
	}
}

func mkBackends(names ...string) []*backend {
	var out []*backend
	for _, n := range names {
		out = append(out, &backend{BackendTarget: BackendTarget{Name: n}})
	}
	return out
}

func TestSmoothWRR(t *testing.T) {
	now := time.Unix(1000, 0)
	bs := mkBackends("a", "b", "c")
	var seq string
	for range 6 {
		seq += pickSmoothWRR(bs, now, 0).Name
	}
	if seq != "abcabc" {
		t.Fatalf("equal weights: %s, want abcabc", seq)
	}
	// c came back 1 s into a 10 s slow start: weight 10 against 100.
	bs = mkBackends("a", "b", "c")
	bs[2].upSince = now.Add(-time.Second)
	count := map[string]int{}
	for range 210 {
		count[pickSmoothWRR(bs, now, 10*time.Second).Name]++
	}
	if count["c"] != 10 || count["a"] != 100 {
		t.Fatalf("slow start shares %v, want a,b 100 and c 10", count)
	}
}

func TestLeastConn(t *testing.T) {
	now := time.Unix(1000, 0)
	bs := mkBackends("a", "b", "c")
	bs[0].active, bs[1].active, bs[2].active = 5, 2, 7
	if got := pickLeastConn(bs, 0, now, 0).Name; got != "b" {
		t.Fatalf("picked %s, want b", got)
	}
	bs[1].active = 5
	seen := map[string]bool{}
	for off := range 3 {
		seen[pickLeastConn(bs, off, now, 0).Name] = true
	}
	if !seen["a"] || !seen["b"] || seen["c"] {
		t.Fatalf("ties must rotate among the least loaded: %v", seen)
	}
}

func TestTargetsFor(t *testing.T) {
	ms := []cluster.Member{
		{Name: "bootstrap", Role: cluster.RoleBootstrap, IPs: []netip.Addr{netip.MustParseAddr("10.0.0.9")}},
		{Name: "master-0", Role: cluster.RoleMaster, IPs: []netip.Addr{netip.MustParseAddr("10.0.0.10"), netip.MustParseAddr("fd00::10")}},
		{Name: "master-1", Role: cluster.RoleMaster},
		{Name: "worker-0", Role: cluster.RoleWorker, IPs: []netip.Addr{netip.MustParseAddr("10.0.0.20")}},
		{Name: "master-6", Role: cluster.RoleMaster, IPs: []netip.Addr{netip.MustParseAddr("fd00::16")}},
	}
	got := targetsFor(ms, 6443, false)
	want := []BackendTarget{
		{Name: "bootstrap", Addr: "10.0.0.9:6443", Backup: true},
		{Name: "master-0", Addr: "10.0.0.10:6443"},
		{Name: "master-6", Addr: "[fd00::16]:6443"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestPickBackupOnlyWithoutPrimaries(t *testing.T) {
	p := newPool("api", RoundRobin, HealthOptions{}, nil, nil, testLogger(t), nil)
	for _, tg := range []BackendTarget{{Name: "m0"}, {Name: "m1"}, {Name: "boot", Backup: true}} {
		p.backends[tg.Name] = &backend{BackendTarget: tg, h: health.NewHysteresis(3, 3, HealthUp)}
	}
	p.reorder()
	for range 10 {
		if b := p.pick(nil, FamilyAny); b.Backup {
			t.Fatal("backup picked while primaries are up")
		}
	}
	if b := p.pick([]*backend{p.backends["m0"], p.backends["m1"]}, FamilyAny); b == nil || !b.Backup {
		t.Fatal("backup not used when every primary failed to dial")
	}
	p.backends["m0"].h, p.backends["m1"].h = health.NewHysteresis(3, 3, HealthDown), health.NewHysteresis(3, 3, HealthDown)
	if b := p.pick(nil, FamilyAny); b == nil || b.Name != "boot" {
		t.Fatalf("picked %v, want the backup", b)
	}
	p.backends["boot"].h = health.NewHysteresis(3, 3, HealthDown)
	if b := p.pick(nil, FamilyAny); b != nil {
		t.Fatalf("picked %v with nothing up", b.Name)
	}
}

func TestRedirectExprsV6(t *testing.T) {
	// Guard the address length/offset choice that picks ip vs ip6 daddr.
	for _, tt := range []struct {
		vip    string
		nelems int
	}{{"192.168.126.5", 11}, {"fd00::5", 11}} {
		e := redirectExprs(Redirect{VIP: netip.MustParseAddr(tt.vip), Port: 6443, ToPort: 9445}, false)
		if len(e) != tt.nelems {
			t.Errorf("%s: %d expressions, want %d", tt.vip, len(e), tt.nelems)
		}
		if len(redirectExprs(Redirect{VIP: netip.MustParseAddr(tt.vip)}, true)) != tt.nelems+2 {
			t.Errorf("%s: output rule must add the oifname lo match", tt.vip)
		}
	}
}

func TestExpired(t *testing.T) {
	o := ProxyOptions{ConnectTimeout: 10 * time.Second, IdleTimeout: time.Hour, FinTimeout: 30 * time.Second}
	short := o
	short.IdleTimeout = 5 * time.Second // shorter than FinTimeout
	s := int64(time.Second)
	tests := []struct {
		name                   string
		connecting, halfClosed bool
		last, connectBy, now   int64
		o                      ProxyOptions
		want                   bool
	}{
		{"connecting, before its deadline", true, false, 0, 10 * s, 9 * s, o, false},
		{"connecting, at its deadline", true, false, 0, 10 * s, 10 * s, o, true},
		{"connecting ignores idleness", true, false, 0, 7200 * s, 7000 * s, o, false},
		{"busy session", false, false, 100 * s, 0, 101 * s, o, false},
		{"idle just short of the limit", false, false, 0, 0, 3599 * s, o, false},
		{"idle for the limit", false, false, 0, 0, 3600 * s, o, true},
		{"half-closed, quiet for less than FinTimeout", false, true, 0, 0, 29 * s, o, false},
		{"half-closed, quiet for FinTimeout", false, true, 0, 0, 30 * s, o, true},
		{"half-closed but moving", false, true, 100 * s, 0, 110 * s, o, false},
		{"half-closed: idle limit when shorter", false, true, 0, 0, 5 * s, short, true},
		{"open: FinTimeout does not apply", false, false, 0, 0, 31 * s, o, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := expired(tt.connecting, tt.halfClosed, tt.last, tt.connectBy, tt.now, tt.o); got != tt.want {
				t.Fatalf("expired = %v, want %v", got, tt.want)
			}
		})
	}
}
