package vrrp

import (
	"errors"
	"fmt"
	"net/netip"
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
		current netip.Addr
		want    string // "" means none
	}{
		{"in the VIP's subnet first", p("10.0.0.1/8", "192.168.126.10/24"), vips, false, netip.Addr{}, "192.168.126.10"},
		{"a VIP is never the source", p("192.168.126.5/24"), vips, false, netip.Addr{}, ""},
		{"the current one while it stays", p("192.168.126.10/24", "192.168.126.11/24"), vips, false, a("192.168.126.11"), "192.168.126.11"},
		{"another one when the current one went", p("192.168.126.12/24"), vips, false, a("192.168.126.11"), "192.168.126.12"},
		{"any IPv4 as a fallback", p("10.0.0.1/8"), vips, false, netip.Addr{}, "10.0.0.1"},
		{"none", p("fe80::1/64"), vips, false, netip.Addr{}, ""},
		{"IPv6 sends from link-local", p("fd00::10/64", "fe80::1/64"), vips6, true, netip.Addr{}, "fe80::1"},
		{"IPv6 without link-local has none", p("fd00::10/64"), vips6, true, netip.Addr{}, ""},
	}
	for _, c := range cases {
		got, ok := pickSource(c.addrs, c.vips, c.v6, c.current)
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
