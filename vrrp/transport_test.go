package vrrp

import (
	"net/netip"
	"testing"
	"time"
)

func TestRxFilter(t *testing.T) {
	src := netip.MustParseAddr("192.168.126.11")
	self := netip.MustParseAddr("192.168.126.10")
	vip := netip.MustParseAddr("192.168.126.5")
	other := netip.MustParseAddr("192.168.126.99")
	mkFromTo := func(from, dst netip.Addr, mut func(*Packet)) []byte {
		p := Packet{Version: 3, VRID: 51, Priority: 100, Interval: 100 * time.Millisecond, Addrs: []netip.Addr{vip}}
		if mut != nil {
			mut(&p)
		}
		b, err := p.Marshal(from, dst)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	mkTo := func(dst netip.Addr, mut func(*Packet)) []byte { return mkFromTo(src, dst, mut) }
	mk := func(mut func(*Packet)) []byte { return mkTo(MulticastGroupV4, mut) }
	// A stranger's advert: its checksum covers its own source.
	mkOther := func(mut func(*Packet)) []byte { return mkFromTo(other, MulticastGroupV4, mut) }
	v3 := func() *rxFilter {
		return &rxFilter{version: 3, vrid: 51, ifIndex: 2, group: MulticastGroupV4,
			interval: 100 * time.Millisecond, vips: []netip.Addr{vip}}
	}
	v2 := func() *rxFilter {
		f := v3()
		f.version, f.interval, f.authType, f.authData = 2, time.Second, AuthTypePass, PassAuth("ocp4_api")
		return f
	}
	v2pkt := func(pass string, interval time.Duration) []byte {
		return mk(func(p *Packet) {
			p.Version, p.Interval, p.AuthType, p.AuthData = 2, interval, AuthTypePass, PassAuth(pass)
		})
	}
	meta := rxMeta{Src: src, Dst: MulticastGroupV4, TTL: 255, IfIndex: 2}
	with := func(mut func(*rxMeta)) rxMeta { m := meta; mut(&m); return m }
	unicast := func() *rxFilter {
		f := v3()
		f.unicast, f.peers = true, map[netip.Addr]bool{src: true}
		return f
	}
	lonely := func() *rxFilter { // unicast before any peer is known
		f := v3()
		f.unicast, f.peers = true, map[netip.Addr]bool{}
		return f
	}
	corrupt := mk(nil)
	corrupt[len(corrupt)-1] ^= 0xff

	cases := []struct {
		name      string
		f         *rxFilter
		meta      rxMeta
		payload   []byte
		reason    DropReason
		collision bool
	}{
		{"accepted", v3(), meta, mk(nil), "", false},
		{"ttl 64 is not link-local", v3(), with(func(m *rxMeta) { m.TTL = 64 }), mk(nil), ReasonTTL, false},
		{"other interface", v3(), with(func(m *rxMeta) { m.IfIndex = 3 }), mk(nil), ReasonInterface, false},
		{"unknown ifindex is fine", v3(), with(func(m *rxMeta) { m.IfIndex = 0 }), mk(nil), "", false},
		{"v6 source on a v4 router", v3(), with(func(m *rxMeta) { m.Src = netip.MustParseAddr("fe80::1") }), mk(nil), ReasonFamily, false},
		{"unicast from a known peer", unicast(), with(func(m *rxMeta) { m.Dst = self }), mkTo(self, nil), "", false},
		{"unicast from an unknown peer", unicast(), with(func(m *rxMeta) { m.Src = other }), mkOther(nil), ReasonUnknownPeer, false},
		{"unicast with no peer yet", lonely(), meta, mk(nil), ReasonUnknownPeer, false},
		{"unicast peer a router away (ttl 63)", unicast(), with(func(m *rxMeta) { m.Dst = self; m.TTL = 63 }), mkTo(self, nil), "", false},
		{"stranger a router away is off-link", unicast(), with(func(m *rxMeta) { m.Src = other; m.TTL = 63 }), mkOther(nil), ReasonTTL, false},
		{"a stranger on another VRID is just another router", unicast(), with(func(m *rxMeta) { m.Src = other }), mkOther(func(p *Packet) { p.VRID = 52 }), ReasonVRID, false},
		{"a stranger listing other VIPs is still a stranger", unicast(), with(func(m *rxMeta) { m.Src = other }), mkOther(func(p *Packet) { p.Addrs = []netip.Addr{other} }), ReasonUnknownPeer, false},
		{"bad checksum", v3(), meta, corrupt, ReasonChecksum, false},
		{"truncated", v3(), meta, mk(nil)[:6], ReasonShort, false},
		{"other VRID", v3(), meta, mk(func(p *Packet) { p.VRID = 52 }), ReasonVRID, false},
		{"v2 advert at a v3 router", v3(), meta, v2pkt("ocp4_api", time.Second), ReasonVersion, false},
		{"v2 right password", v2(), meta, v2pkt("ocp4_api", time.Second), "", false},
		{"v2 wrong password", v2(), meta, v2pkt("ocp4_ing", time.Second), ReasonAuth, false},
		{"v2 other interval", v2(), meta, v2pkt("ocp4_api", 2*time.Second), ReasonInterval, false},
		{"v3 other interval is adopted, not dropped", v3(), meta, mk(func(p *Packet) { p.Interval = time.Second }), "", false},
		{"collision: same VRID, other VIPs", v3(), meta, mk(func(p *Packet) { p.Addrs = []netip.Addr{other} }), ReasonAddrList, true},
		{"collision from an owner is processed", v3(), meta, mk(func(p *Packet) { p.Addrs = []netip.Addr{other}; p.Priority = 255 }), "", true},
		{"extra VIP is a collision", v3(), meta, mk(func(p *Packet) { p.Addrs = []netip.Addr{vip, other} }), ReasonAddrList, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := c.f.check(c.meta, c.payload)
			if v.Reason != c.reason || v.Collision != c.collision {
				t.Errorf("check = reason %q collision %v, want %q %v", v.Reason, v.Collision, c.reason, c.collision)
			}
		})
	}
}

func FuzzRxFilter(f *testing.F) {
	vip := netip.MustParseAddr("192.168.126.5")
	p := Packet{Version: 3, VRID: 51, Priority: 100, Interval: 100 * time.Millisecond, Addrs: []netip.Addr{vip}}
	src := netip.MustParseAddr("192.168.126.11")
	b, _ := p.Marshal(src, MulticastGroupV4)
	f.Add(b, uint8(255))
	f.Add([]byte{0x31, 0x01}, uint8(1))
	filter := &rxFilter{version: 3, vrid: 51, group: MulticastGroupV4, interval: 100 * time.Millisecond, vips: []netip.Addr{vip}}
	f.Fuzz(func(t *testing.T, payload []byte, ttl uint8) {
		v := filter.check(rxMeta{Src: src, Dst: MulticastGroupV4, TTL: int(ttl)}, payload)
		if v.Reason == "" && (v.Packet.VRID != 51 || v.Packet.Version != 3) {
			t.Fatalf("accepted a packet for another router: %+v", v.Packet)
		}
	})
}
