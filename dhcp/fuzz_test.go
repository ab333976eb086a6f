package dhcp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// FuzzDecide: any datagram either fails to decode or gets a decision without
// a panic; every reply carries option 54 and the request's xid and chaddr.
func FuzzDecide(f *testing.F) {
	for _, m := range []*dhcpv4.DHCPv4{
		msg(dhcpv4.MessageTypeDiscover, macM0),
		msg(dhcpv4.MessageTypeDiscover, macNew),
		msg(dhcpv4.MessageTypeRequest, macM0, withSID(testServer), withWant(ipM0)),
		msg(dhcpv4.MessageTypeRequest, macNew, withWant(netip.MustParseAddr("192.168.126.100"))),
		msg(dhcpv4.MessageTypeRequest, macM0, withCI(ipM0)),
		msg(dhcpv4.MessageTypeInform, macM0, withCI(ipM0)),
		msg(dhcpv4.MessageTypeRelease, macNew, withCI(netip.MustParseAddr("192.168.126.100"))),
		msg(dhcpv4.MessageTypeDecline, macNew, withWant(netip.MustParseAddr("192.168.126.100"))),
	} {
		f.Add(m.ToBytes(), true)
	}
	f.Add([]byte{1, 1, 6, 0}, false)
	p, err := NewPolicy(testOptions())
	if err != nil {
		f.Fatal(err)
	}
	leases := memLeases{
		{IP: netip.MustParseAddr("192.168.126.102"), MAC: macNew2, Expiry: t0.Add(time.Minute)},
		{IP: netip.MustParseAddr("192.168.126.103"), Declined: true, Expiry: t0.Add(time.Minute)},
	}
	f.Fuzz(func(t *testing.T, b []byte, servePool bool) {
		req, err := dhcpv4.FromBytes(b)
		if err != nil {
			return
		}
		d := p.Decide(Input{Request: req, Leases: leases, ServePool: servePool, Now: t0})
		if d.Reply == nil {
			return
		}
		if d.Drop != "" {
			t.Fatalf("reply and drop %q", d.Drop)
		}
		checkReplyInvariants(t, req, d.Reply, testServer)
	})
}
