package dhcp

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The pool's size leaves out excluded, reserved, network and broadcast
// addresses; free leaves out what live entries hold, offers included.
func TestPoolSizeAndFree(t *testing.T) {
	o := testOptions() // pool .100-.103, .101 excluded
	o.Reservations = append(o.Reservations, Reservation{MAC: macNew2, IP: netip.MustParseAddr("192.168.126.103")})
	p, err := NewPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.PoolSize(); got != 2 {
		t.Fatalf("pool size %d, want 2 (.100 and .102)", got)
	}
	o.Pool.Start, o.Pool.End = netip.MustParseAddr("192.168.126.250"), netip.MustParseAddr("192.168.126.255")
	if p2, err := NewPolicy(o); err != nil || p2.PoolSize() != 5 {
		t.Fatalf("a pool up to the broadcast address: size %d (%v), want 5", p2.PoolSize(), err)
	}
	ip := netip.MustParseAddr
	held := []Lease{
		{IP: ip("192.168.126.100"), Expiry: t0.Add(time.Hour)},
		{IP: ip("192.168.126.102"), Expiry: t0.Add(-time.Second)}, // expired
		{IP: ip("192.168.126.101"), Expiry: t0.Add(time.Hour)},    // excluded: not the pool's
	}
	if got := p.PoolFree(held, t0); got != 1 {
		t.Errorf("free %d, want 1", got)
	}
	held[1].Expiry, held[1].Offered = t0.Add(30*time.Second), true
	if got := p.PoolFree(held, t0); got != 0 {
		t.Errorf("free with .102 offered: %d, want 0", got)
	}
}

// The pool metrics read the server's policy, store and ServePool; a
// client turned away for want of an address is counted from 0.
func TestPoolMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	p, err := NewPolicy(testOptions())
	if err != nil {
		t.Fatal(err)
	}
	st, err := OpenStore("")
	if err != nil {
		t.Fatal(err)
	}
	serving := true
	m.policy, m.store, m.serve = p, st, func() bool { return serving }
	want := func(free, serve int) string {
		return strings.NewReplacer("FREE", strconv.Itoa(free), "SERVE", strconv.Itoa(serve)).Replace(`
# HELP appliance_dhcp_pool_addresses Addresses the dynamic pool may hand out (its range less excluded and reserved addresses); 0 without a pool.
# TYPE appliance_dhcp_pool_addresses gauge
appliance_dhcp_pool_addresses 3
# HELP appliance_dhcp_pool_free Pool addresses that no live lease, offer or decline holds in this node's lease store.
# TYPE appliance_dhcp_pool_free gauge
appliance_dhcp_pool_free FREE
# HELP appliance_dhcp_pool_serving 1 while this node hands out pool addresses (with several servers: the API VIP's holder), else 0.
# TYPE appliance_dhcp_pool_serving gauge
appliance_dhcp_pool_serving SERVE
`)
	}
	names := []string{"appliance_dhcp_pool_addresses", "appliance_dhcp_pool_free", "appliance_dhcp_pool_serving"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(3, 1)), names...); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(m.drops.WithLabelValues(string(DropPoolExhausted))); got != 0 {
		t.Errorf("pool-exhausted drops before any: %v", got)
	}
	now := time.Now()
	for i, a := range []string{"192.168.126.100", "192.168.126.102", "192.168.126.103"} {
		mac := net.HardwareAddr{0x52, 0x54, 0x00, 0xbb, 0x00, byte(i)}
		st.Apply(Change{Kind: ChangeBind, IP: netip.MustParseAddr(a), MAC: mac, Expiry: now.Add(time.Hour)})
	}
	serving = false
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(0, 0)), names...); err != nil {
		t.Error(err)
	}
	// The full pool is what Decide finds too.
	d := p.Decide(Input{Request: msg(dhcpv4.MessageTypeDiscover, macNew), Leases: st, ServePool: true, Now: now})
	if d.Drop != DropPoolExhausted {
		t.Errorf("DISCOVER with the pool full: %+v, want drop %s", d, DropPoolExhausted)
	}
}
