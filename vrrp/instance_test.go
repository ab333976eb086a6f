package vrrp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The runner is driven here with fake sockets and a fake VIP owner, with
// explicit time, so its reactions to failures are tested without root.

type fakeConn struct {
	mu   sync.Mutex
	sent []Packet
	dsts []netip.Addr
}

func (c *fakeConn) read([]byte) ([]byte, rxMeta, error) { select {} }
func (c *fakeConn) write(b []byte, src, dst netip.Addr) error {
	p, err := Parse(b, src, dst)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.sent = append(c.sent, p)
	c.dsts = append(c.dsts, dst)
	c.mu.Unlock()
	return nil
}
func (c *fakeConn) Close() error  { return nil }
func (c *fakeConn) pending() bool { return false }

type fakeVIPs struct {
	own   []netip.Prefix // the interface's own addresses, as List reports them
	fail  error
	held  map[netip.Prefix]bool
	calls []string
}

func (f *fakeVIPs) Add(p netip.Prefix) error {
	f.calls = append(f.calls, "add "+p.String())
	if f.fail != nil {
		return f.fail
	}
	f.held[p] = true
	return nil
}
func (f *fakeVIPs) Remove(p netip.Prefix) error {
	f.calls = append(f.calls, "remove "+p.String())
	delete(f.held, p)
	return nil
}
func (f *fakeVIPs) RemoveStale([]netip.Prefix) ([]netip.Prefix, error) { return nil, nil }
func (f *fakeVIPs) List() ([]netip.Prefix, error) {
	out := slices.Clone(f.own)
	for p := range f.held {
		out = append(out, p)
	}
	return out, nil
}

type fakeAnnouncer struct{ rounds int }

func (a *fakeAnnouncer) Announce([]netip.Addr) error { a.rounds++; return nil }
func (a *fakeAnnouncer) Close() error                { return nil }

var testVIP = netip.MustParsePrefix("192.168.126.5/24")

func newTestRunner(t *testing.T, vips *fakeVIPs) (*runner, *fakeConn, *fakeAnnouncer) {
	t.Helper()
	in, err := New(Config{Name: "api-v4", Interface: "eth0", VRID: 51, Version: 3, Priority: 100,
		Interval: 100 * time.Millisecond, Preempt: true, VIPs: []netip.Prefix{testVIP}},
		NewMetrics(nil), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := NewTrackSet(nil)
	if err != nil {
		t.Fatal(err)
	}
	c, an := &fakeConn{}, &fakeAnnouncer{}
	self := netip.MustParseAddr("192.168.126.10")
	r := &runner{Instance: in, conn: c, vipMgr: vips, announce: an, tracks: ts,
		ifi: &net.Interface{Index: 2, Name: "eth0"}, src: self, dst: MulticastGroupV4, want: "eth0",
		rxCtx: context.Background()}
	r.m = NewMachine(MachineConfig{Version: 3, Priority: 100, Interval: 100 * time.Millisecond, Preempt: true, Self: self})
	return r, c, an
}

// becomeMaster starts the runner, lets Master_Down expire with no peer and
// the first announcement go out.
func becomeMaster(r *runner, t0 time.Time) time.Time {
	r.apply(t0, r.m.Start(t0))
	now := r.m.Deadline()
	r.tick(now)
	now = now.Add(announceSettle)
	r.tick(now)
	return now
}

func TestRunnerGoesToFaultWhenVIPCannotBeInstalled(t *testing.T) {
	vips := &fakeVIPs{fail: errors.New("operation not permitted"), held: map[netip.Prefix]bool{}}
	r, conn, _ := newTestRunner(t, vips)
	now := becomeMaster(r, time.Unix(1000, 0))

	if st := r.Status(); st.State != "FAULT" || !strings.Contains(st.Fault, "could not install") {
		t.Fatalf("after a failed VIP install: state %s fault %q, want FAULT naming the cause", st.State, st.Fault)
	}
	// The master it briefly was must have said goodbye with priority 0.
	last := conn.sent[len(conn.sent)-1]
	if last.Priority != 0 {
		t.Errorf("last advert priority %d, want 0 on leaving MASTER", last.Priority)
	}
	if got := testutil.ToFloat64(r.metrics.vipErrors.WithLabelValues("api-v4")); got != 1 {
		t.Errorf("vip errors metric = %v, want 1", got)
	}
	// While the cause persists, each retry fails again.
	r.tick(now.Add(r.cfg.FaultRetry))
	r.tick(r.m.Deadline())
	if st := r.Status(); st.State != "FAULT" {
		t.Fatalf("retry with the cause still present: state %s, want FAULT", st.State)
	}
	// Once installing works, the retry brings it back and it takes over.
	vips.fail = nil
	retry := r.faultRetry
	r.tick(retry)
	if st := r.Status(); st.State != "BACKUP" {
		t.Fatalf("after the fault retry: state %s, want BACKUP", st.State)
	}
	r.tick(r.m.Deadline())
	if st := r.Status(); st.State != "MASTER" || !vips.held[testVIP] {
		t.Fatalf("state %s, VIP held %v; want MASTER holding the VIP", st.State, vips.held[testVIP])
	}
}

func TestRunnerReportsVRIDCollision(t *testing.T) {
	vips := &fakeVIPs{held: map[netip.Prefix]bool{}}
	r, _, _ := newTestRunner(t, vips)
	now := becomeMaster(r, time.Unix(1000, 0))
	peer := netip.MustParseAddr("192.168.126.99")
	other := Packet{Version: 3, VRID: 51, Priority: 200, Interval: 100 * time.Millisecond,
		Addrs: []netip.Addr{netip.MustParseAddr("192.168.126.77")}}
	b, _ := other.Marshal(peer, MulticastGroupV4)
	v := r.filter().check(rxMeta{Src: peer, Dst: MulticastGroupV4, TTL: 255, IfIndex: 2}, b)
	r.handle(now, received{v: v, meta: rxMeta{Src: peer}})

	st := r.Status()
	if !strings.Contains(st.Collision, "VRID 51") || !strings.Contains(st.Collision, "192.168.126.99") {
		t.Errorf("status collision %q should name the VRID and the peer", st.Collision)
	}
	if st.State != "MASTER" {
		t.Errorf("a colliding advert (other VIPs) must not move our VIP; state %s", st.State)
	}
	if got := testutil.ToFloat64(r.metrics.collisions.WithLabelValues("api-v4")); got != 1 {
		t.Errorf("collision metric = %v, want 1", got)
	}
	// The report clears once the other router has been silent long enough.
	r.tick(now.Add(5 * time.Second))
	if st := r.Status(); st.Collision != "" {
		t.Errorf("collision should clear after silence, still %q", st.Collision)
	}
}

func TestRunnerShutdownAsMaster(t *testing.T) {
	vips := &fakeVIPs{held: map[netip.Prefix]bool{}}
	r, conn, an := newTestRunner(t, vips)
	becomeMaster(r, time.Unix(1000, 0))
	if an.rounds == 0 {
		t.Error("becoming master sent no gratuitous ARP")
	}
	rx := make(chan received, 1)
	r.shutdown(rx) // nobody takes over: it waits handoverWait, then releases
	last := conn.sent[len(conn.sent)-1]
	if last.Priority != 0 {
		t.Errorf("shutdown advert priority %d, want 0", last.Priority)
	}
	if vips.held[testVIP] {
		t.Error("VIP still held after shutdown")
	}
}

func TestRunnerAnnounceSchedule(t *testing.T) {
	vips := &fakeVIPs{held: map[netip.Prefix]bool{}}
	r, _, an := newTestRunner(t, vips)
	now := becomeMaster(r, time.Unix(1000, 0))
	for _, d := range []time.Duration{500 * time.Millisecond, 2 * time.Second, 62 * time.Second} {
		r.tick(now.Add(d))
	}
	if an.rounds != 4 {
		t.Errorf("announce rounds = %d, want 4 (at once, +0.5 s, +2 s, then the 60 s refresh)", an.rounds)
	}
}

func TestBecomeMasterInstallsVIPsBeforeAdvertising(t *testing.T) {
	vips := &fakeVIPs{held: map[netip.Prefix]bool{}}
	r, conn, _ := newTestRunner(t, vips)
	order := func() string {
		return strings.Join(vips.calls, ",") + fmt.Sprintf(" adverts=%d", len(conn.sent))
	}
	r.apply(time.Unix(1000, 0), r.m.Start(time.Unix(1000, 0)))
	sentBefore := len(conn.sent)
	// Wrap Add to record how many adverts had gone out when it ran.
	var advertsAtAdd int
	rec := &recordingVIPs{fakeVIPs: vips, onAdd: func() { advertsAtAdd = len(conn.sent) }}
	r.vipMgr = rec
	r.tick(r.m.Deadline())
	if r.m.State() != StateMaster {
		t.Fatalf("state %s", r.m.State())
	}
	if advertsAtAdd != sentBefore {
		t.Errorf("the VIP was installed after %d advert(s) of the new master; want it before the first (%s)",
			advertsAtAdd-sentBefore, order())
	}
}

type recordingVIPs struct {
	*fakeVIPs
	onAdd func()
}

func (r *recordingVIPs) Add(p netip.Prefix) error { r.onAdd(); return r.fakeVIPs.Add(p) }

func TestShutdownHoldsVIPsUntilSuccessorAdvertises(t *testing.T) {
	vips := &fakeVIPs{held: map[netip.Prefix]bool{}}
	r, _, _ := newTestRunner(t, vips)
	becomeMaster(r, time.Unix(1000, 0))
	rx := make(chan received, 1)
	timeout := make(chan time.Time)
	done := make(chan struct{})
	go func() {
		r.m.Stop(time.Unix(1001, 0))
		r.awaitSuccessor(rx, timeout)
		close(done)
	}()
	// An advert that failed the checks does not count as a successor.
	rx <- received{v: verdict{Reason: ReasonAuth, Packet: Packet{Priority: 90}}}
	select {
	case <-done:
		t.Fatal("a dropped advert ended the handover wait")
	case <-time.After(50 * time.Millisecond):
	}
	rx <- received{v: verdict{Packet: Packet{Priority: 90}}, meta: rxMeta{Src: netip.MustParseAddr("192.168.126.11")}}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the successor's advert did not end the handover wait")
	}
	if !vips.held[testVIP] {
		t.Error("the VIP must still be held while waiting for the successor")
	}
}

// A backup starved of CPU wakes with its Master_Down timer and the master's
// queued adverts ready at once; the adverts that arrived in time must win.
func TestQueuedAdvertsBeatAnExpiredTimer(t *testing.T) {
	vips := &fakeVIPs{held: map[netip.Prefix]bool{}}
	r, _, _ := newTestRunner(t, vips)
	t0 := time.Unix(1000, 0)
	r.apply(t0, r.m.Start(t0))
	deadline := r.m.Deadline()
	master := netip.MustParseAddr("192.168.126.11")
	late := deadline.Add(2 * time.Second) // the process ran again only now
	rx := make(chan received, 4)
	for range 3 {
		rx <- received{
			v:    verdict{Packet: Packet{Version: 3, VRID: 51, Priority: 200, Interval: 100 * time.Millisecond, Addrs: []netip.Addr{testVIP.Addr()}}},
			meta: rxMeta{Src: master},
			at:   late, // read off the socket once the process ran again
		}
	}
	r.catchUp(rx)
	r.tick(late)
	if st := r.Status(); st.State != "BACKUP" {
		t.Fatalf("state %s after a starved wake-up with the master's adverts queued; want BACKUP", st.State)
	}
}

func TestMasterReassertsAgainstALowerPriorityClaim(t *testing.T) {
	vips := &fakeVIPs{held: map[netip.Prefix]bool{}}
	r, conn, an := newTestRunner(t, vips)
	now := becomeMaster(r, time.Unix(1000, 0))
	sent, rounds := len(conn.sent), an.rounds
	claim := received{
		v:    verdict{Packet: Packet{Version: 3, VRID: 51, Priority: 90, Interval: 100 * time.Millisecond, Addrs: []netip.Addr{testVIP.Addr()}}},
		meta: rxMeta{Src: netip.MustParseAddr("192.168.126.11")},
		at:   now.Add(time.Millisecond),
	}
	r.handle(claim.at, claim)
	if r.m.State() != StateMaster {
		t.Fatalf("state %s; a lower-priority advert must not demote us", r.m.State())
	}
	if len(conn.sent) != sent+1 || conn.sent[len(conn.sent)-1].Priority != 100 {
		t.Errorf("want one immediate advert at priority 100, sent %d more", len(conn.sent)-sent)
	}
	if an.rounds != rounds+1 {
		t.Errorf("want a fresh gratuitous ARP round, got %d more", an.rounds-rounds)
	}
}

// Two routers of equal priority time out together; the one with the lower
// address steps back at once and must not have announced itself.
func TestTieBreakLoserNeverAnnounces(t *testing.T) {
	vips := &fakeVIPs{held: map[netip.Prefix]bool{}}
	r, _, an := newTestRunner(t, vips) // we are 192.168.126.10
	t0 := time.Unix(1000, 0)
	r.apply(t0, r.m.Start(t0))
	now := r.m.Deadline()
	r.tick(now)
	if r.m.State() != StateMaster {
		t.Fatalf("state %s", r.m.State())
	}
	peer := received{
		v:    verdict{Packet: Packet{Version: 3, VRID: 51, Priority: 100, Interval: 100 * time.Millisecond, Addrs: []netip.Addr{testVIP.Addr()}}},
		meta: rxMeta{Src: netip.MustParseAddr("192.168.126.11")},
		at:   now.Add(2 * time.Millisecond),
	}
	r.handle(peer.at, peer)
	r.tick(now.Add(announceSettle))
	if r.m.State() != StateBackup {
		t.Fatalf("state %s; the lower address loses the tie", r.m.State())
	}
	if an.rounds != 0 {
		t.Errorf("the tie-break loser sent %d gratuitous ARP round(s); neighbours would keep its MAC", an.rounds)
	}
}

// A backup's Status follows the master it learns from adverts (not only
// its own state changes), keeps none while a leaving master is replaced,
// and a takeover after a priority-0 release names the leaving master as
// the predecessor, which the LB passes connections back to.
func TestStatusMasterAndPredecessor(t *testing.T) {
	vips := &fakeVIPs{held: map[netip.Prefix]bool{}}
	r, _, _ := newTestRunner(t, vips)
	t0 := time.Unix(1000, 0)
	r.apply(t0, r.m.Start(t0))
	if st := r.Status(); st.State != "BACKUP" || st.Master.IsValid() {
		t.Fatalf("after start: %s, master %v; want BACKUP and no master yet", st.State, st.Master)
	}
	master := netip.MustParseAddr("192.168.126.11")
	advert := func(at time.Time, prio uint8) {
		r.handle(at, received{
			v:    verdict{Packet: Packet{Version: 3, VRID: 51, Priority: prio, Interval: 100 * time.Millisecond, Addrs: []netip.Addr{testVIP.Addr()}}},
			meta: rxMeta{Src: master},
			at:   at,
		})
	}
	advert(t0.Add(50*time.Millisecond), 150)
	if st := r.Status(); st.Master != master {
		t.Fatalf("a backup that hears %v reports master %v", master, st.Master)
	}
	advert(t0.Add(100*time.Millisecond), 0) // it leaves
	if st := r.Status(); st.Master.IsValid() {
		t.Errorf("after the master's priority-0 release the status still names %v", st.Master)
	}
	r.tick(r.m.Deadline())
	st := r.Status()
	if st.State != "MASTER" || st.Predecessor != master {
		t.Fatalf("after the release: %s, predecessor %v; want MASTER, predecessor %v", st.State, st.Predecessor, master)
	}
}

// appliance_vrrp_vip_held follows the VIP in the kernel: 1 from the
// takeover, 0 once a higher-priority router takes it and after a shutdown;
// every series an alert counts exists at 0 before the first event.
func TestMetricsHeldAndSeriesFromTheStart(t *testing.T) {
	vips := &fakeVIPs{held: map[netip.Prefix]bool{}}
	r, _, _ := newTestRunner(t, vips)
	held := r.metrics.held.WithLabelValues("api-v4", testVIP.Addr().String())
	series := testutil.CollectAndCount(r.metrics.transitions) + testutil.CollectAndCount(r.metrics.repairs) +
		testutil.CollectAndCount(r.metrics.collisions) + testutil.CollectAndCount(r.metrics.held)
	// 3 states entered, 5 repair kinds, 1 collision counter, 1 VIP.
	if series != 3+5+1+1 {
		t.Errorf("before any event: %d series of transitions, repairs, collisions and held; want 10", series)
	}
	if got := testutil.ToFloat64(held); got != 0 {
		t.Fatalf("held before the takeover = %v", got)
	}
	now := becomeMaster(r, time.Unix(1000, 0))
	if got := testutil.ToFloat64(held); got != 1 || !vips.held[testVIP] {
		t.Fatalf("held as master = %v (VIP installed %v), want 1", got, vips.held[testVIP])
	}
	higher := received{
		v:    verdict{Packet: Packet{Version: 3, VRID: 51, Priority: 200, Interval: 100 * time.Millisecond, Addrs: []netip.Addr{testVIP.Addr()}}},
		meta: rxMeta{Src: netip.MustParseAddr("192.168.126.11")},
		at:   now.Add(time.Millisecond),
	}
	r.handle(higher.at, higher)
	if got := testutil.ToFloat64(held); r.m.State() != StateBackup || got != 0 {
		t.Fatalf("state %s, held %v: want BACKUP and 0 after a higher priority took over", r.m.State(), got)
	}
	now = becomeMaster(r, now.Add(time.Minute))
	if got := testutil.ToFloat64(held); got != 1 {
		t.Fatalf("held as master again = %v", got)
	}
	r.shutdown(make(chan received, 1))
	if got := testutil.ToFloat64(held); got != 0 {
		t.Errorf("held after shutdown = %v, want 0", got)
	}
	if got := testutil.ToFloat64(r.metrics.transitions.WithLabelValues("api-v4", "MASTER")); got != 2 {
		t.Errorf("transitions{to=MASTER} = %v, want 2", got)
	}
}
