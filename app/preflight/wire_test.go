package preflight

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/mdlayher/arp"

	"appliance/vrrp"
)

func arpFrame(t testing.TB, op arp.Operation, mac net.HardwareAddr, sip netip.Addr, tip netip.Addr) []byte {
	t.Helper()
	p, err := arp.NewPacket(op, mac, sip, zeroMAC, tip)
	if err != nil {
		t.Fatal(err)
	}
	body, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	b := append(append(append([]byte{}, broadcastMAC...), mac...), 0x08, 0x06)
	return append(b, body...)
}

func TestProbeFrame(t *testing.T) {
	self := net.HardwareAddr{0x02, 1, 2, 3, 4, 5}
	f, err := probeFrame(self, a("192.168.126.5"))
	if err != nil {
		t.Fatal(err)
	}
	if len(f) != minFrame || !bytes.Equal(f[:6], broadcastMAC) || binary.BigEndian.Uint16(f[12:14]) != etherTypeARP {
		t.Fatalf("frame % x", f)
	}
	var p arp.Packet
	if err := p.UnmarshalBinary(f[ethHdrLen:]); err != nil {
		t.Fatal(err)
	}
	// RFC 5227 §2.1.1: sender IP all zeroes, target hardware address zero.
	if p.Operation != arp.OperationRequest || !p.SenderIP.IsUnspecified() || p.TargetIP != a("192.168.126.5") ||
		!bytes.Equal(p.TargetHardwareAddr, zeroMAC) || !bytes.Equal(p.SenderHardwareAddr, self) {
		t.Errorf("probe %+v", p)
	}
	// Our own probe is not a claim.
	if _, _, ok := arpClaim(f, self); ok {
		t.Error("own probe taken as a claim")
	}
}

func TestARPClaim(t *testing.T) {
	self := net.HardwareAddr{0x02, 1, 2, 3, 4, 5}
	vip := a("192.168.126.5")
	reply := arpFrame(t, arp.OperationReply, stranger, vip, netip.IPv4Unspecified())
	if mac, ip, ok := arpClaim(reply, self); !ok || ip != vip || !bytes.Equal(mac, stranger) {
		t.Errorf("reply: %v %v %v", mac, ip, ok)
	}
	announce := arpFrame(t, arp.OperationRequest, stranger, vip, vip)
	if _, ip, ok := arpClaim(announce, self); !ok || ip != vip {
		t.Errorf("announcement not a claim")
	}
	otherProbe := arpFrame(t, arp.OperationRequest, stranger, netip.IPv4Unspecified(), vip)
	if _, _, ok := arpClaim(otherProbe, self); ok {
		t.Error("someone else's probe taken as a claim")
	}
	for _, bad := range [][]byte{nil, reply[:20], append(reply[:12:12], 0x08, 0x00)} {
		if _, _, ok := arpClaim(bad, self); ok {
			t.Errorf("malformed % x taken as a claim", bad)
		}
	}
}

func FuzzARPClaim(f *testing.F) {
	f.Add(arpFrame(f, arp.OperationReply, stranger, a("192.168.126.5"), a("0.0.0.0")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) { arpClaim(b, master0) })
}

func TestOfferFrom(t *testing.T) {
	mac := ThrowawayMAC()
	if mac[0]&0x02 == 0 || mac[0]&0x01 != 0 {
		t.Errorf("throwaway MAC %s is not locally administered unicast", mac)
	}
	disc, err := dhcpv4.NewDiscovery(mac)
	if err != nil {
		t.Fatal(err)
	}
	offer, err := dhcpv4.NewReplyFromRequest(disc,
		dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer),
		dhcpv4.WithServerIP(net.ParseIP("192.168.126.250")),
		dhcpv4.WithYourIP(net.ParseIP("192.168.126.77")),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.ParseIP("192.168.126.250"))))
	if err != nil {
		t.Fatal(err)
	}
	src := a("192.168.126.251")
	o, ok := offerFrom(offer.ToBytes(), src, disc.TransactionID)
	if !ok || o.Server != a("192.168.126.250") || o.Source != src || o.Offered != a("192.168.126.77") {
		t.Errorf("offer %+v %v", o, ok)
	}
	if _, ok := offerFrom(offer.ToBytes(), src, dhcpv4.TransactionID{1, 2, 3, 4}); ok {
		t.Error("offer for another transaction accepted")
	}
	if _, ok := offerFrom(disc.ToBytes(), src, disc.TransactionID); ok {
		t.Error("a DISCOVER taken as an offer")
	}
	if _, ok := offerFrom([]byte{1, 2, 3}, src, disc.TransactionID); ok {
		t.Error("garbage taken as an offer")
	}
}

func FuzzOfferFrom(f *testing.F) {
	disc, _ := dhcpv4.NewDiscovery(master0)
	f.Add(disc.ToBytes())
	f.Fuzz(func(t *testing.T, b []byte) { offerFrom(b, a("192.168.126.1"), disc.TransactionID) })
}

func TestDecodeAdvert(t *testing.T) {
	src, dst := a("192.168.126.200"), vrrp.MulticastGroupV4
	p := vrrp.Packet{Version: 2, VRID: 11, Priority: 100, Interval: 1e9, AuthType: vrrp.AuthTypePass,
		AuthData: vrrp.PassAuth("secret"), Addrs: []netip.Addr{a("192.168.126.222")}}
	b, err := p.Marshal(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	ad, ok := decodeAdvert(b, src, dst)
	if !ok || ad.VRID != 11 || ad.Source != src || ad.Version != 2 || len(ad.Addrs) != 1 || ad.Addrs[0] != a("192.168.126.222") {
		t.Errorf("advert %+v %v", ad, ok)
	}
	b[len(b)-1] ^= 0xff // checksum no longer verifies
	if _, ok := decodeAdvert(b, src, dst); ok {
		t.Error("corrupt advert decoded")
	}
}

func TestParseSocketTable(t *testing.T) {
	const table = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0035 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:24F7 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4343 1 0000000000000000 100 0 0 10 0
   2: 0A7EA8C0:0035 0B7EA8C0:C350 01 00000000:00000000 00:00000000 00000000     0        0 4444 1 0000000000000000 100 0 0 10 0
   garbage
`
	got := parseSocketTable(bufio.NewScanner(strings.NewReader(table)), "tcp", 53)
	if strings.Join(got, ",") != "4242" {
		t.Errorf("tcp :53 listeners %v, want [4242] (the established one is not a listener)", got)
	}
	got = parseSocketTable(bufio.NewScanner(strings.NewReader(table)), "udp", 53)
	if strings.Join(got, ",") != "4242,4444" {
		t.Errorf("udp :53 sockets %v", got)
	}
}

func TestWriteJSON(t *testing.T) {
	rs := []Result{
		pass(IDConfig, "loads"),
		fail("vip-free.api-v4", "in use").with(vipDetails{VIP: a("192.168.126.5"), Answers: []string{"02:00:00:00:00:99"}}),
		skipped(IDMTU, "no gateway"),
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rs); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if len(got) != 3 {
		t.Fatalf("%d results", len(got))
	}
	for i, want := range []struct{ id, status string }{{"config", "pass"}, {"vip-free.api-v4", "fail"}, {"mtu", "skipped"}} {
		if got[i]["id"] != want.id || got[i]["status"] != want.status || got[i]["message"] == "" {
			t.Errorf("result %d: %v", i, got[i])
		}
	}
	d, _ := got[1]["details"].(map[string]any)
	if d["vip"] != "192.168.126.5" || d["answeredBy"].([]any)[0] != "02:00:00:00:00:99" {
		t.Errorf("details %v", got[1]["details"])
	}
	if _, ok := got[0]["details"]; ok {
		t.Error("empty details not omitted")
	}
	buf.Reset()
	_ = WriteJSON(&buf, nil)
	if strings.TrimSpace(buf.String()) != "[]" {
		t.Errorf("no results: %q, want []", buf.String())
	}
}

func TestWriteText(t *testing.T) {
	var buf bytes.Buffer
	_ = WriteText(&buf, []Result{pass("config", "loads"), fail("dns.wildcard", "first\nsecond")})
	want := "PASS    config        loads\nFAIL    dns.wildcard  first\n                      second\n2 checks: 1 passed, 1 failed, 0 warnings, 0 skipped\n"
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
}
