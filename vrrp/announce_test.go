package vrrp

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ndp"
)

var (
	announceTestMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x7e, 0x00, 0x10}
	announceTestV4  = netip.MustParseAddr("192.168.126.5")
	announceTestV6  = netip.MustParseAddr("fd00:126::5")
)

func announceUnhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// icmp6Sum is an independent RFC 4443 §2.3 checksum over the IPv6
// pseudo-header and the ICMPv6 message; it returns 0 for a correct message.
func icmp6Sum(src, dst netip.Addr, msg []byte) uint16 {
	var buf []byte
	buf = append(buf, src.AsSlice()...)
	buf = append(buf, dst.AsSlice()...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(msg)))
	buf = append(buf, 0, 0, 0, 58)
	buf = append(buf, msg...)
	if len(buf)%2 == 1 {
		buf = append(buf, 0)
	}
	var sum uint32
	for i := 0; i < len(buf); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(buf[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// checkGARP decodes an Ethernet+ARP frame and checks the gratuitous fields.
func checkGARP(t *testing.T, frame []byte, op arp.Operation, mac net.HardwareAddr, ip netip.Addr) {
	t.Helper()
	if len(frame) < 42 || !bytes.Equal(frame[0:6], announceBroadcast) || !bytes.Equal(frame[6:12], mac) ||
		binary.BigEndian.Uint16(frame[12:]) != 0x0806 {
		t.Fatalf("bad Ethernet header: %x", frame)
	}
	var p arp.Packet
	if err := p.UnmarshalBinary(frame[14:]); err != nil {
		t.Fatal(err)
	}
	wantTHA := net.HardwareAddr{0, 0, 0, 0, 0, 0}
	if op == arp.OperationReply {
		wantTHA = mac
	}
	if p.Operation != op || p.SenderIP != ip || p.TargetIP != ip ||
		!bytes.Equal(p.SenderHardwareAddr, mac) || !bytes.Equal(p.TargetHardwareAddr, wantTHA) {
		t.Errorf("ARP %+v, want op %v sender=target=%s sha %s tha %s", p, op, ip, mac, wantTHA)
	}
}

// checkNA decodes an Ethernet+IPv6+ICMPv6 frame and checks the unsolicited NA.
func checkNA(t *testing.T, frame []byte, mac net.HardwareAddr, ip netip.Addr) {
	t.Helper()
	allNodes := netip.IPv6LinkLocalAllNodes()
	if len(frame) < 14+40 || !bytes.Equal(frame[0:6], announceAllNodesMAC) || !bytes.Equal(frame[6:12], mac) ||
		binary.BigEndian.Uint16(frame[12:]) != 0x86dd {
		t.Fatalf("bad Ethernet header: %x", frame)
	}
	ip6 := frame[14:54]
	src, _ := netip.AddrFromSlice(ip6[8:24])
	dst, _ := netip.AddrFromSlice(ip6[24:40])
	payload := frame[54:]
	if ip6[0]>>4 != 6 || ip6[6] != 58 || ip6[7] != 255 || int(binary.BigEndian.Uint16(ip6[4:])) != len(payload) ||
		src != ip || dst != allNodes {
		t.Fatalf("bad IPv6 header %x (src %s dst %s)", ip6, src, dst)
	}
	if s := icmp6Sum(src, dst, payload); s != 0 {
		t.Errorf("ICMPv6 checksum does not verify (residue %#04x)", s)
	}
	m, err := ndp.ParseMessage(payload)
	if err != nil {
		t.Fatal(err)
	}
	na, ok := m.(*ndp.NeighborAdvertisement)
	if !ok {
		t.Fatalf("message is %T, want NA", m)
	}
	if !na.Override || na.Solicited || na.Router || na.TargetAddress != ip {
		t.Errorf("NA %+v: want Override, not Solicited, not Router, target %s", na, ip)
	}
	if len(na.Options) != 1 {
		t.Fatalf("NA options %v, want one target link-layer address", na.Options)
	}
	lla, ok := na.Options[0].(*ndp.LinkLayerAddress)
	if !ok || lla.Direction != ndp.Target || !bytes.Equal(lla.Addr, mac) {
		t.Errorf("NA option %+v, want target link-layer address %s", na.Options[0], mac)
	}
}

func TestGARPFrameGolden(t *testing.T) {
	tests := []struct {
		name  string
		build func(net.HardwareAddr, netip.Addr) ([]byte, error)
		op    arp.Operation
		want  string
	}{
		{"request", garpFrame, arp.OperationRequest, `
			ffffffffffff 5254007e0010 0806
			0001 0800 06 04 0001
			5254007e0010 c0a87e05
			000000000000 c0a87e05
			000000000000000000000000000000000000`},
		{"reply", garpReplyFrame, arp.OperationReply, `
			ffffffffffff 5254007e0010 0806
			0001 0800 06 04 0002
			5254007e0010 c0a87e05
			5254007e0010 c0a87e05
			000000000000000000000000000000000000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.build(announceTestMAC, announceTestV4)
			if err != nil {
				t.Fatal(err)
			}
			if want := announceUnhex(t, tt.want); !bytes.Equal(got, want) {
				t.Fatalf("frame:\n got %x\nwant %x", got, want)
			}
			checkGARP(t, got, tt.op, announceTestMAC, announceTestV4)
		})
	}
}

func TestUnsolicitedNAFrameGolden(t *testing.T) {
	got, err := unsolicitedNAFrame(announceTestMAC, announceTestV6)
	if err != nil {
		t.Fatal(err)
	}
	// The checksum (bytes 56-57) was verified independently by checkNA
	// before it was written down here.
	want := announceUnhex(t, `
		333300000001 5254007e0010 86dd
		60000000 0020 3a ff
		fd000126000000000000000000000005
		ff020000000000000000000000000001
		88 00 0766
		20000000
		fd000126000000000000000000000005
		02 01 5254007e0010`)
	checkNA(t, got, announceTestMAC, announceTestV6)
	if !bytes.Equal(got, want) {
		t.Fatalf("frame:\n got %x\nwant %x", got, want)
	}
}

func TestAnnounceFramesErrors(t *testing.T) {
	tests := []struct {
		name string
		mac  net.HardwareAddr
		ip   netip.Addr
		want string
	}{
		{"short MAC", net.HardwareAddr{1, 2, 3}, announceTestV4, "not a 48-bit Ethernet address"},
		{"long MAC", make(net.HardwareAddr, 20), announceTestV6, "not a 48-bit Ethernet address"},
		{"invalid IP", announceTestMAC, netip.Addr{}, "not a unicast IPv6 address"},
		{"multicast v6", announceTestMAC, netip.MustParseAddr("ff02::1"), "not a unicast IPv6 address"},
		{"unspecified v6", announceTestMAC, netip.IPv6Unspecified(), "not a unicast IPv6 address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := announceFrames(tt.mac, tt.ip)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := garpFrame(announceTestMAC, announceTestV6); err == nil {
		t.Error("garpFrame accepted an IPv6 address")
	}
	if _, err := unsolicitedNAFrame(announceTestMAC, announceTestV4); err == nil {
		t.Error("unsolicitedNAFrame accepted an IPv4 address")
	}
	// IPv4-mapped addresses are announced as IPv4.
	frames, err := announceFrames(announceTestMAC, netip.AddrFrom16(announceTestV4.As16()))
	if err != nil || len(frames) != 2 {
		t.Fatalf("mapped address: %d frames, %v", len(frames), err)
	}
	checkGARP(t, frames[0], arp.OperationRequest, announceTestMAC, announceTestV4)
	checkGARP(t, frames[1], arp.OperationReply, announceTestMAC, announceTestV4)
}
