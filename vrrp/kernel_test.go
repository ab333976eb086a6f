package vrrp

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestPickSource(t *testing.T) {
	vips := []netip.Prefix{netip.MustParsePrefix("192.168.126.5/24")}
	vips6 := []netip.Prefix{netip.MustParsePrefix("fd00::5/64")}
	p := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	a := netip.MustParseAddr
	cases := []struct {
		name    string
		addrs   []netip.Prefix
		vips    []netip.Prefix
		v6      bool
		unicast bool
		current netip.Addr
		want    string // "" means none
	}{
		{"in the VIP's subnet first", p("10.0.0.1/8", "192.168.126.10/24"), vips, false, false, netip.Addr{}, "192.168.126.10"},
		{"a VIP is never the source", p("192.168.126.5/24"), vips, false, false, netip.Addr{}, ""},
		{"the current one while it stays", p("192.168.126.10/24", "192.168.126.11/24"), vips, false, false, a("192.168.126.11"), "192.168.126.11"},
		{"another one when the current one went", p("192.168.126.12/24"), vips, false, false, a("192.168.126.11"), "192.168.126.12"},
		{"any IPv4 as a fallback", p("10.0.0.1/8"), vips, false, false, netip.Addr{}, "10.0.0.1"},
		{"none", p("fe80::1/64"), vips, false, false, netip.Addr{}, ""},
		{"IPv6 sends from link-local", p("fd00::10/64", "fe80::1/64"), vips6, true, false, netip.Addr{}, "fe80::1"},
		{"IPv6 without link-local has none", p("fd00::10/64"), vips6, true, false, netip.Addr{}, ""},
		{"IPv6 unicast sends from the global address", p("fe80::1/64", "fd00::5/64", "fd00::10/64"), vips6, true, true, netip.Addr{}, "fd00::10"},
		{"IPv6 unicast keeps the current one", p("fd00::10/64", "fd00::11/64"), vips6, true, true, a("fd00::11"), "fd00::11"},
		{"IPv6 unicast without a global address has none", p("fe80::1/64", "192.168.126.10/24"), vips6, true, true, netip.Addr{}, ""},
		{"IPv4 unicast as multicast", p("fd00::10/64", "192.168.126.10/24"), vips, false, true, netip.Addr{}, "192.168.126.10"},
	}
	for _, c := range cases {
		got, ok := pickSource(c.addrs, c.vips, c.v6, c.unicast, c.current)
		if (c.want == "") == ok || (ok && got.String() != c.want) {
			t.Errorf("%s: got %v %v, want %q", c.name, got, ok, c.want)
		}
	}
	if m := missingVIPs(p("192.168.126.5/32"), vips); len(m) != 1 {
		t.Errorf("a VIP with another prefix length is not ours: missing %v", m)
	}
}

// A VIP deleted from under a master is put back and announced at once.
func TestMasterRestoresADeletedVIP(t *testing.T) {
	vips := &fakeVIPs{held: map[netip.Prefix]bool{}, own: []netip.Prefix{netip.MustParsePrefix("192.168.126.10/24")}}
	r, _, an := newTestRunner(t, vips)
	now := becomeMaster(r, time.Unix(1000, 0))
	rounds := an.rounds
	delete(vips.held, testVIP) // `ip addr del` by someone else
	r.checkAddrs(now)
	if !vips.held[testVIP] {
		t.Fatal("the deleted VIP was not put back")
	}
	if an.rounds != rounds+1 {
		t.Errorf("want an announcement right after the repair, got %d more rounds", an.rounds-rounds)
	}
	if got := testutil.ToFloat64(r.metrics.repairs.WithLabelValues("api-v4", repairVIP)); got != 1 {
		t.Errorf("repairs{vip_restored} = %v, want 1", got)
	}
	// A backup never adds a VIP.
	r2, _, _ := newTestRunner(t, &fakeVIPs{held: map[netip.Prefix]bool{}, own: vips.own})
	r2.apply(now, r2.m.Start(now))
	r2.checkAddrs(now)
	if r2.vipMgr.(*fakeVIPs).held[testVIP] {
		t.Error("a backup installed the VIP")
	}
}

// The address adverts go out from disappears: FAULT (a master says goodbye
// and releases), and back to BACKUP once an address is there again.
func TestLosingTheSourceAddressIsAFault(t *testing.T) {
	vips := &fakeVIPs{held: map[netip.Prefix]bool{}, own: []netip.Prefix{netip.MustParsePrefix("192.168.126.10/24")}}
	r, conn, _ := newTestRunner(t, vips)
	now := becomeMaster(r, time.Unix(1000, 0))
	vips.own = nil
	delete(vips.held, testVIP) // the kernel drops the secondary VIP with the primary
	r.checkAddrs(now)
	st := r.Status()
	if st.State != "FAULT" || !strings.Contains(st.Fault, "lost 192.168.126.10") {
		t.Fatalf("state %s fault %q; want FAULT naming the lost address", st.State, st.Fault)
	}
	if last := conn.sent[len(conn.sent)-1]; last.Priority != 0 {
		t.Errorf("last advert priority %d, want 0 when a master goes to FAULT", last.Priority)
	}
	if vips.held[testVIP] {
		t.Error("the VIP was put back on an interface without its own address")
	}
	vips.own = []netip.Prefix{netip.MustParsePrefix("192.168.126.33/24")}
	r.checkAddrs(now.Add(time.Second))
	if st := r.Status(); st.State != "BACKUP" || st.Fault != "" {
		t.Fatalf("after an address came back: state %s fault %q; want BACKUP", st.State, st.Fault)
	}
	if r.src != netip.MustParseAddr("192.168.126.33") || r.m.Config().Self != r.src {
		t.Errorf("source %v (machine's %v), want the new address", r.src, r.m.Config().Self)
	}
}

// A receiver whose socket fails must put the instance in FAULT: a deaf
// backup would see the master as down and become a second master.
func TestDeafReceiverNeverBecomesMaster(t *testing.T) {
	vips := &fakeVIPs{held: map[netip.Prefix]bool{}}
	r, _, _ := newTestRunner(t, vips)
	t0 := time.Unix(1000, 0)
	r.apply(t0, r.m.Start(t0))
	r.want = "appliance-test-no-such-if" // re-opening keeps failing
	r.receiverFailed(t0, errors.New("recvmsg: bad file descriptor"))
	for now := t0; now.Before(t0.Add(10 * time.Second)); now = now.Add(50 * time.Millisecond) {
		r.tick(now)
		if st := r.Status(); st.State == "MASTER" {
			t.Fatalf("became MASTER %s after its receiver died", now.Sub(t0))
		}
	}
	st := r.Status()
	if st.State != "FAULT" || st.Fault == "" {
		t.Fatalf("state %s fault %q, want FAULT with a reason", st.State, st.Fault)
	}
	if r.reattachDelay != maxReattachDelay {
		t.Errorf("re-open backoff %v, want it to have grown to %v", r.reattachDelay, maxReattachDelay)
	}
	if got := testutil.ToFloat64(r.metrics.repairs.WithLabelValues("api-v4", repairReceiver)); got != 1 {
		t.Errorf("repairs{receiver_failed} = %v, want 1", got)
	}
}

// A node that joins later becomes a unicast peer without a restart: adverts
// go to the new set, and the receive filter accepts it.
func TestSetUnicastPeers(t *testing.T) {
	vips := &fakeVIPs{held: map[netip.Prefix]bool{}}
	r, conn, _ := newTestRunner(t, vips)
	a := netip.MustParseAddr
	r.cfg.Unicast = true
	r.cfg.UnicastPeers = []netip.Addr{a("192.168.126.11")}
	r.peers = r.cfg.UnicastPeers
	r.filt.Store(r.filter())
	r.setPeers([]netip.Addr{a("192.168.126.12"), a("192.168.126.10"), a("fd00::12"), a("192.168.126.11"), a("192.168.126.12")})
	if got := fmt.Sprint(r.peers); got != "[192.168.126.11 192.168.126.12]" {
		t.Fatalf("peers %s: want the new set without ourselves, the other family or repeats", got)
	}
	if f := r.filt.Load(); !f.peers[a("192.168.126.12")] || f.peers[a("192.168.126.10")] {
		t.Errorf("filter peers %v", f.peers)
	}
	if st := r.Status(); fmt.Sprint(st.Peers) != "[192.168.126.11 192.168.126.12]" {
		t.Errorf("status peers %v", st.Peers)
	}
	r.sendAdvert(100)
	if got := fmt.Sprint(conn.dsts); got != "[192.168.126.11 192.168.126.12]" {
		t.Errorf("advert sent to %s", got)
	}
	// A multicast instance keeps multicast.
	m, _, _ := newTestRunner(t, vips)
	m.setPeers([]netip.Addr{a("192.168.126.12")})
	if len(m.peers) != 0 {
		t.Errorf("a multicast instance took unicast peers %v", m.peers)
	}
}

// A unicast instance with no peer yet (a lone first node) becomes master
// and sends nothing until SetUnicastPeers gives it someone to tell.
func TestUnicastWithoutPeers(t *testing.T) {
	vips := &fakeVIPs{held: map[netip.Prefix]bool{}}
	r, conn, _ := newTestRunner(t, vips)
	in, err := New(Config{Name: "api-v4", Interface: "eth0", VRID: 51, Version: 3, Priority: 100,
		Interval: 100 * time.Millisecond, Preempt: true, VIPs: []netip.Prefix{testVIP}, Unicast: true},
		NewMetrics(nil), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Instance = in
	r.filt.Store(r.filter())
	becomeMaster(r, time.Unix(1000, 0))
	if r.m.State() != StateMaster || !vips.held[testVIP] {
		t.Fatalf("state %s, VIP held %v: a lone unicast router should hold its VIP", r.m.State(), vips.held[testVIP])
	}
	if len(conn.dsts) != 0 {
		t.Errorf("adverts sent to %v with no peer: none should go anywhere, least of all the multicast group", conn.dsts)
	}
	if f := r.filt.Load(); !f.unicast {
		t.Error("the filter accepts anyone: with no peer yet every advert is a stranger's")
	}
	r.setPeers([]netip.Addr{netip.MustParseAddr("192.168.126.11")})
	r.sendAdvert(100)
	if got := fmt.Sprint(conn.dsts); got != "[192.168.126.11]" {
		t.Errorf("advert sent to %s after the peer came", got)
	}
	if st := r.Status(); st.Transport != TransportUnicast || fmt.Sprint(st.Peers) != "[192.168.126.11]" {
		t.Errorf("status transport %q peers %v", st.Transport, st.Peers)
	}
}

// Strangers are kept per source with a count, logged once a minute, and
// the oldest leaves when too many are kept.
func TestStrangers(t *testing.T) {
	r, _, _ := newTestRunner(t, &fakeVIPs{held: map[netip.Prefix]bool{}})
	t0 := time.Unix(1000, 0)
	rogue := netip.MustParseAddr("192.168.126.66")
	var logs []bool
	for i := range 3 {
		logs = append(logs, r.stranger(rogue, 255, t0.Add(time.Duration(i)*time.Second)))
	}
	logs = append(logs, r.stranger(rogue, 254, t0.Add(time.Minute+time.Second)))
	if fmt.Sprint(logs) != "[true false false true]" {
		t.Errorf("logged %v: want the first advert and then one a minute", logs)
	}
	st := r.Status().Strangers
	if len(st) != 1 || st[0].Addr != rogue || st[0].Count != 4 || st[0].Priority != 254 || !st[0].First.Equal(t0) {
		t.Fatalf("strangers %+v", st)
	}
	for i := range maxStrangers {
		r.stranger(netip.AddrFrom4([4]byte{192, 168, 126, byte(100 + i)}), 100, t0.Add(2*time.Minute+time.Duration(i)*time.Second))
	}
	st = r.Status().Strangers
	if len(st) != maxStrangers || slices.ContainsFunc(st, func(s Stranger) bool { return s.Addr == rogue }) {
		t.Errorf("strangers %d, rogue kept %v: the oldest should leave", len(st), st)
	}
}
