package cluster

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"
)

func testConfig(t *testing.T) *Config {
	t.Helper()
	c, err := Parse(render(t, baseDoc()))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func names(s *Snapshot) []string {
	var out []string
	for _, m := range s.Members {
		out = append(out, m.Name)
	}
	return out
}

func TestStateSeedAndLookup(t *testing.T) {
	s := NewState(testConfig(t))
	snap := s.Snapshot()
	if snap.Version != 1 || !reflect.DeepEqual(names(snap), []string{"bootstrap", "master-0", "worker-0"}) {
		t.Fatalf("seed = v%d %v", snap.Version, names(snap))
	}
	m, ok := snap.Member("master-0")
	if !ok || m.Source != SourceConfig || !m.Healthy || m.Role != RoleMaster || len(m.IPs) != 2 || m.MAC.String() != "52:54:00:7e:00:10" {
		t.Errorf("master-0 = %+v", m)
	}
	if _, ok := snap.Member("nope"); ok {
		t.Error("found unknown member")
	}
	if e := NewState(nil).Snapshot(); e.Version != 1 || len(e.Members) != 0 {
		t.Errorf("empty state = %+v", e)
	}
}

func TestStateUpsertRemove(t *testing.T) {
	s := NewState(testConfig(t))
	now := time.Unix(1700000000, 0)
	ip := netip.MustParseAddr

	// A discovered member is added in name order.
	s.UpsertMember(Member{Name: "worker-1", Role: RoleWorker, IPs: []netip.Addr{ip("192.168.126.21")}, Source: SourceMDNS, Healthy: true, LastSeen: now})
	if got := names(s.Snapshot()); !reflect.DeepEqual(got, []string{"bootstrap", "master-0", "worker-0", "worker-1"}) {
		t.Errorf("names = %v", got)
	}
	// Kubernetes takes a discovered entry over.
	s.UpsertMember(Member{Name: "worker-1", Role: RoleWorker, Source: SourceKubernetes, Healthy: true, LastSeen: now})
	if m, _ := s.Snapshot().Member("worker-1"); m.Source != SourceKubernetes || len(m.IPs) != 0 {
		t.Errorf("worker-1 = %+v", m)
	}
	// ... and then mDNS cannot remove it.
	if s.RemoveMember("worker-1", SourceMDNS) {
		t.Error("mDNS removed a Kubernetes member")
	}
	if !s.RemoveMember("worker-1", SourceKubernetes) {
		t.Error("Kubernetes could not remove its member")
	}
	if s.RemoveMember("worker-1", SourceKubernetes) {
		t.Error("removed twice")
	}

	// A discovered entry for a configured member merges: config identity
	// stays, health and addresses from discovery come in.
	mac, _ := net.ParseMAC("52:54:00:ff:ff:ff")
	s.UpsertMember(Member{Name: "master-0", Role: RoleWorker, MAC: mac, Source: SourceMDNS, Healthy: false, LastSeen: now,
		IPs: []netip.Addr{ip("192.168.126.10"), ip("192.168.126.110")}})
	m, _ := s.Snapshot().Member("master-0")
	wantIPs := []netip.Addr{ip("192.168.126.10"), ip("fd00:126::10"), ip("192.168.126.110")}
	if m.Source != SourceConfig || m.Role != RoleMaster || m.MAC.String() != "52:54:00:7e:00:10" || m.Healthy || !m.LastSeen.Equal(now) || !slices.Equal(m.IPs, wantIPs) {
		t.Errorf("merged master-0 = %+v", m)
	}
	// The next discovery replaces the discovered addresses, not the configured ones.
	s.UpsertMember(Member{Name: "master-0", Source: SourceMDNS, Healthy: true, LastSeen: now, IPs: []netip.Addr{ip("192.168.126.111")}})
	m, _ = s.Snapshot().Member("master-0")
	if want := []netip.Addr{ip("192.168.126.10"), ip("fd00:126::10"), ip("192.168.126.111")}; !slices.Equal(m.IPs, want) {
		t.Errorf("IPs = %v, want %v", m.IPs, want)
	}
	if s.RemoveMember("master-0", SourceMDNS) {
		t.Error("discovery removed a configured member")
	}
	if !s.RemoveMember("master-0", SourceConfig) {
		t.Error("config could not remove its member")
	}
	s.UpsertMember(Member{}) // ignored
	if _, ok := s.Snapshot().Member(""); ok {
		t.Error("empty name stored")
	}
}

func TestStateNoOpAndImmutability(t *testing.T) {
	s := NewState(nil)
	ips := []netip.Addr{netip.MustParseAddr("10.0.0.1")}
	m := Member{Name: "a", IPs: ips, Source: SourceMDNS, Healthy: true}
	s.UpsertMember(m)
	v := s.Snapshot().Version
	s.UpsertMember(m)
	if got := s.Snapshot().Version; got != v {
		t.Errorf("no-op upsert bumped version %d -> %d", v, got)
	}
	old := s.Snapshot()
	ips[0] = netip.MustParseAddr("10.0.0.99") // the caller's slice is not shared
	s.UpsertMember(Member{Name: "b", Source: SourceMDNS})
	if a, _ := old.Member("a"); a.IPs[0] != netip.MustParseAddr("10.0.0.1") || len(old.Members) != 1 {
		t.Errorf("old snapshot changed: %+v", old)
	}
	if s.Snapshot().Version != old.Version+1 {
		t.Error("version not bumped by one")
	}
}

func TestStateVIPs(t *testing.T) {
	s := NewState(nil)
	since := time.Unix(1700000000, 0)
	api := VIPStatus{Name: "api-v4", VIP: netip.MustParseAddr("10.0.0.5"), VRID: 222, Kind: VIPAPI, LocalState: VIPStateBackup, Priority: 40, Since: since}
	s.SetVIP(api)
	s.SetVIP(VIPStatus{Name: "api-v6", Kind: VIPAPI})
	s.SetVIP(VIPStatus{Name: "api-v5", Kind: VIPAPI})
	s.SetVIP(VIPStatus{}) // ignored
	snap := s.Snapshot()
	if len(snap.VIPs) != 3 || snap.VIPs[0].Name != "api-v4" || snap.VIPs[1].Name != "api-v5" || snap.VIPs[2].Name != "api-v6" {
		t.Fatalf("VIPs = %+v", snap.VIPs)
	}
	v := snap.Version
	same := api
	same.Since = since.In(time.FixedZone("x", 3600)) // same instant
	s.SetVIP(same)
	if s.Snapshot().Version != v {
		t.Error("no-op SetVIP bumped version")
	}
	api.LocalState, api.Master = VIPStateMaster, netip.MustParseAddr("10.0.0.10")
	s.SetVIP(api)
	if got, _ := s.Snapshot().VIP("api-v4"); got.LocalState != VIPStateMaster || got.Master != api.Master {
		t.Errorf("api-v4 = %+v", got)
	}
	if !s.RemoveVIP("api-v5") || s.RemoveVIP("api-v5") {
		t.Error("RemoveVIP")
	}
	if _, ok := s.Snapshot().VIP("api-v5"); ok {
		t.Error("api-v5 still there")
	}
}

func TestSubscribeFirstValueAndCoalescing(t *testing.T) {
	s := NewState(nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch := s.Subscribe(ctx)
	if first := <-ch; first != s.Snapshot() {
		t.Fatalf("first value is not the current snapshot")
	}
	for i := range 100 {
		s.UpsertMember(Member{Name: fmt.Sprintf("n%03d", i), Source: SourceMDNS})
	}
	got := <-ch
	if got.Version != 101 || len(got.Members) != 100 {
		t.Errorf("coalesced value: version %d, %d members; want the latest (101, 100)", got.Version, len(got.Members))
	}
	select {
	case extra := <-ch:
		t.Errorf("unexpected extra value v%d", extra.Version)
	default:
	}
}

func TestSubscribeSlowReaderNeverBlocksWriters(t *testing.T) {
	s := NewState(nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for range 5 {
		_ = s.Subscribe(ctx) // never read
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 10000 {
			s.SetVIP(VIPStatus{Name: "api-v4", VRID: uint8(i), Priority: uint8(i >> 8)})
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second): // loose: the loop takes milliseconds
		t.Fatal("writers blocked behind unread subscribers")
	}
}

func TestSubscribeClosesOnCancel(t *testing.T) {
	s := NewState(nil)
	ctx, cancel := context.WithCancel(t.Context())
	ch := s.Subscribe(ctx)
	cancel()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				// Writers after close must not panic on the closed channel.
				s.UpsertMember(Member{Name: "after", Source: SourceMDNS})
				return
			}
		case <-deadline:
			t.Fatal("channel not closed after cancel")
		}
	}
}

func TestSubscribeAlreadyCancelled(t *testing.T) {
	s := NewState(nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	ch := s.Subscribe(ctx)
	n := 0
	for range ch {
		n++
	}
	if n > 1 {
		t.Errorf("got %d values from a cancelled subscription", n)
	}
}

// TestStateConcurrent runs writers, lock-free readers and subscribers at once;
// run it with -race. Subscribers must see strictly increasing versions and
// sorted snapshots.
func TestStateConcurrent(t *testing.T) {
	s := NewState(testConfig(t))
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	const writers, perWriter = 4, 500
	errs := make(chan error, 64)

	for i := range 4 {
		ch := s.Subscribe(ctx)
		wg.Go(func() {
			last := uint64(0)
			for snap := range ch {
				if snap.Version <= last {
					errs <- fmt.Errorf("subscriber %d: version %d after %d", i, snap.Version, last)
					return
				}
				last = snap.Version
				if !slices.IsSortedFunc(snap.Members, func(a, b Member) int { return cmp.Compare(a.Name, b.Name) }) ||
					!slices.IsSortedFunc(snap.VIPs, func(a, b VIPStatus) int { return cmp.Compare(a.Name, b.Name) }) {
					errs <- fmt.Errorf("subscriber %d: unsorted snapshot v%d", i, snap.Version)
					return
				}
			}
		})
	}
	wg.Go(func() { // lock-free readers
		for ctx.Err() == nil {
			snap := s.Snapshot()
			for _, m := range snap.Members {
				_ = len(m.IPs)
			}
		}
	})

	var writersWG sync.WaitGroup
	for w := range writers {
		writersWG.Go(func() {
			for i := range perWriter {
				name := fmt.Sprintf("w%d-%d", w, i%20)
				switch i % 4 {
				case 0:
					s.UpsertMember(Member{Name: name, Source: SourceMDNS, Healthy: i%3 == 0, IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, byte(w), 0, byte(i)})}})
				case 1:
					s.RemoveMember(name, SourceMDNS)
				case 2:
					s.SetVIP(VIPStatus{Name: fmt.Sprintf("vip-%d", w), VRID: uint8(i), LocalState: VIPStateBackup})
				case 3:
					s.UpsertMember(Member{Name: "master-0", Source: SourceKubernetes, Healthy: i%2 == 0})
				}
			}
		})
	}
	writersWG.Wait()
	final := s.Snapshot().Version
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if final < 100 {
		t.Errorf("only %d versions published", final)
	}
	if m, _ := s.Snapshot().Member("master-0"); m.Source != SourceConfig {
		t.Errorf("configured member lost its source: %+v", m)
	}
}

// TestVIPEqualComparesEveryField: SetVIP skips a status equal to the one
// it holds, so vipEqual must tell apart two statuses differing in any one
// field; a field added to VIPStatus without a comparison fails here.
func TestVIPEqualComparesEveryField(t *testing.T) {
	base := VIPStatus{Name: "api-v4", VIP: netip.MustParseAddr("192.0.2.5"), VRID: 1, Kind: VIPAPI,
		LocalState: VIPStateBackup, Master: netip.MustParseAddr("192.0.2.10"), Predecessor: netip.MustParseAddr("192.0.2.11"),
		Priority: 40, Since: time.Unix(100, 0), Collision: "x",
		Holders: []VIPHolder{{Addr: netip.MustParseAddr("192.0.2.12"), Last: time.Unix(90, 0), Alive: true}}}
	if !vipEqual(base, base) {
		t.Fatal("a status differs from itself")
	}
	// The same instant in another location is the same time.
	loc := base
	loc.Since = base.Since.In(time.FixedZone("x", 3600))
	if !vipEqual(base, loc) {
		t.Error("the same Since in another zone compares unequal")
	}
	rt := reflect.TypeOf(base)
	for i := range rt.NumField() {
		f := rt.Field(i)
		other := base
		v := reflect.ValueOf(&other).Elem().Field(i)
		switch f.Name {
		case "Name", "Collision":
			v.SetString("y")
		case "VRID", "Priority":
			v.SetUint(2)
		case "Kind":
			v.Set(reflect.ValueOf(VIPIngress))
		case "LocalState":
			v.Set(reflect.ValueOf(VIPStateMaster))
		case "VIP", "Master", "Predecessor":
			v.Set(reflect.ValueOf(netip.MustParseAddr("192.0.2.99")))
		case "Since":
			v.Set(reflect.ValueOf(time.Unix(101, 0)))
		case "Holders":
			for _, hs := range [][]VIPHolder{nil, {{Addr: netip.MustParseAddr("192.0.2.12"), Last: time.Unix(90, 0)}},
				{{Addr: netip.MustParseAddr("192.0.2.12"), Last: time.Unix(91, 0), Alive: true}}} {
				other.Holders = hs
				if vipEqual(base, other) {
					t.Errorf("statuses differing in Holders (%v) compare equal", hs)
				}
			}
			continue
		default:
			t.Fatalf("VIPStatus.%s: no changed value in this test; add one, and compare it in vipEqual", f.Name)
		}
		if vipEqual(base, other) {
			t.Errorf("statuses differing in %s compare equal", f.Name)
		}
	}
}
