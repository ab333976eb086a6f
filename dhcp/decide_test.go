package dhcp

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"appliance/internal/cluster"
)

var (
	testServer = netip.MustParseAddr("192.168.126.10")
	otherSrv   = netip.MustParseAddr("192.168.126.11")
	macM0      = net.HardwareAddr{0x52, 0x54, 0x00, 0x7e, 0x00, 0x20}
	macNew     = net.HardwareAddr{0x52, 0x54, 0x00, 0xaa, 0x00, 0x01}
	macNew2    = net.HardwareAddr{0x52, 0x54, 0x00, 0xaa, 0x00, 0x02}
	ipM0       = netip.MustParseAddr("192.168.126.20")
	t0         = time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
)

func testOptions() Options {
	return Options{
		Interface:     "eth0",
		ServerID:      testServer,
		Network:       netip.MustParsePrefix("192.168.126.0/24"),
		Router:        netip.MustParseAddr("192.168.126.1"),
		DNS:           []netip.Addr{testServer, otherSrv},
		NTP:           []netip.Addr{netip.MustParseAddr("192.168.126.2")},
		Domain:        "ocp4.example.com",
		SearchDomains: []string{"ocp4.example.com", "example.com"},
		LeaseTime:     time.Hour,
		Reservations: []Reservation{
			{MAC: macM0, IP: ipM0, Hostname: "master-0"},
		},
		Pool:     cluster.Range{Start: netip.MustParseAddr("192.168.126.100"), End: netip.MustParseAddr("192.168.126.103")},
		Excluded: []netip.Addr{netip.MustParseAddr("192.168.126.101")},
	}
}

// memLeases is a LeaseView over a slice.
type memLeases []Lease

func (m memLeases) ByMAC(mac net.HardwareAddr) (Lease, bool) {
	for _, l := range m {
		if !l.Declined && macEqual(l.MAC, mac) {
			return l, true
		}
	}
	return Lease{}, false
}

func (m memLeases) ByIP(ip netip.Addr) (Lease, bool) {
	for _, l := range m {
		if l.IP == ip {
			return l, true
		}
	}
	return Lease{}, false
}

type reqOpt func(*dhcpv4.DHCPv4)

func withSID(a netip.Addr) reqOpt {
	return func(d *dhcpv4.DHCPv4) { d.UpdateOption(dhcpv4.OptServerIdentifier(ip4(a))) }
}
func withWant(a netip.Addr) reqOpt {
	return func(d *dhcpv4.DHCPv4) { d.UpdateOption(dhcpv4.OptRequestedIPAddress(ip4(a))) }
}
func withCI(a netip.Addr) reqOpt { return func(d *dhcpv4.DHCPv4) { d.ClientIPAddr = ip4(a) } }
func withGI(a netip.Addr) reqOpt { return func(d *dhcpv4.DHCPv4) { d.GatewayIPAddr = ip4(a) } }
func withBcast() reqOpt          { return func(d *dhcpv4.DHCPv4) { d.SetBroadcast() } }

func msg(t dhcpv4.MessageType, mac net.HardwareAddr, opts ...reqOpt) *dhcpv4.DHCPv4 {
	d, err := dhcpv4.New(dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(t),
		dhcpv4.WithTransactionID(dhcpv4.TransactionID{1, 2, 3, 4}))
	if err != nil {
		panic(err)
	}
	for _, o := range opts {
		o(d)
	}
	return d
}

func TestDecide(t *testing.T) {
	p, err := NewPolicy(testOptions())
	if err != nil {
		t.Fatal(err)
	}
	pool0 := netip.MustParseAddr("192.168.126.100")
	pool2 := netip.MustParseAddr("192.168.126.102")
	leased := memLeases{{IP: pool2, MAC: macNew2, Expiry: t0.Add(time.Minute)}}
	expired := memLeases{{IP: pool2, MAC: macNew2, Expiry: t0.Add(-time.Minute)}}
	declinedAll := memLeases{
		{IP: pool0, Declined: true, Expiry: t0.Add(time.Minute)},
		{IP: pool2, MAC: macNew2, Expiry: t0.Add(time.Minute)},
		{IP: netip.MustParseAddr("192.168.126.103"), Declined: true, Expiry: t0.Add(time.Minute)},
	}
	type want struct {
		typ    dhcpv4.MessageType // MessageTypeNone: no reply
		drop   DropReason
		yiaddr netip.Addr
		change ChangeKind
	}
	cases := []struct {
		name      string
		req       *dhcpv4.DHCPv4
		leases    memLeases
		servePool bool
		want      want
	}{
		{"discover reserved", msg(dhcpv4.MessageTypeDiscover, macM0), nil, false,
			want{typ: dhcpv4.MessageTypeOffer, yiaddr: ipM0}},
		{"discover unknown, pool off here", msg(dhcpv4.MessageTypeDiscover, macNew), nil, false,
			want{drop: DropUnknownClient}},
		{"discover unknown, pool", msg(dhcpv4.MessageTypeDiscover, macNew), nil, true,
			want{typ: dhcpv4.MessageTypeOffer, change: ChangeOffer}},
		{"discover keeps the client's lease", msg(dhcpv4.MessageTypeDiscover, macNew2), leased, true,
			want{typ: dhcpv4.MessageTypeOffer, yiaddr: pool2, change: ChangeOffer}},
		{"discover honours a free requested address", msg(dhcpv4.MessageTypeDiscover, macNew, withWant(pool0)), nil, true,
			want{typ: dhcpv4.MessageTypeOffer, yiaddr: pool0, change: ChangeOffer}},
		{"discover: requested address excluded (VIP)", msg(dhcpv4.MessageTypeDiscover, macNew, withWant(netip.MustParseAddr("192.168.126.101"))), declinedAll, true,
			want{drop: DropPoolExhausted}},
		{"discover: pool exhausted", msg(dhcpv4.MessageTypeDiscover, macNew), declinedAll, true,
			want{drop: DropPoolExhausted}},
		{"selecting reserved", msg(dhcpv4.MessageTypeRequest, macM0, withSID(testServer), withWant(ipM0)), nil, false,
			want{typ: dhcpv4.MessageTypeAck, yiaddr: ipM0}},
		{"selecting another server", msg(dhcpv4.MessageTypeRequest, macM0, withSID(otherSrv), withWant(ipM0)), nil, false,
			want{drop: DropOtherServer}},
		{"selecting another server forgets our offer", msg(dhcpv4.MessageTypeRequest, macNew, withSID(otherSrv), withWant(pool0)),
			memLeases{{IP: pool0, MAC: macNew, Offered: true, Expiry: t0.Add(time.Second)}}, true,
			want{drop: DropOtherServer, change: ChangeRelease}},
		{"selecting without requested address", msg(dhcpv4.MessageTypeRequest, macM0, withSID(testServer)), nil, false,
			want{drop: DropBadRequest}},
		{"selecting pool", msg(dhcpv4.MessageTypeRequest, macNew, withSID(testServer), withWant(pool0)), nil, true,
			want{typ: dhcpv4.MessageTypeAck, yiaddr: pool0, change: ChangeBind}},
		{"selecting pool address leased to another", msg(dhcpv4.MessageTypeRequest, macNew, withSID(testServer), withWant(pool2)), leased, true,
			want{typ: dhcpv4.MessageTypeNak}},
		{"init-reboot reserved, no lease record", msg(dhcpv4.MessageTypeRequest, macM0, withWant(ipM0)), nil, false,
			want{typ: dhcpv4.MessageTypeAck, yiaddr: ipM0}},
		{"init-reboot contradicts reservation", msg(dhcpv4.MessageTypeRequest, macM0, withWant(pool0)), nil, true,
			want{typ: dhcpv4.MessageTypeNak}},
		{"init-reboot for another host's reserved address", msg(dhcpv4.MessageTypeRequest, macNew, withWant(ipM0)), nil, true,
			want{typ: dhcpv4.MessageTypeNak}},
		{"init-reboot wrong network", msg(dhcpv4.MessageTypeRequest, macNew, withWant(netip.MustParseAddr("10.0.0.5"))), nil, false,
			want{typ: dhcpv4.MessageTypeNak}},
		{"init-reboot pool, not ours to serve", msg(dhcpv4.MessageTypeRequest, macNew, withWant(pool0)), nil, false,
			want{drop: DropUnknownClient}},
		{"init-reboot pool after lost lease file", msg(dhcpv4.MessageTypeRequest, macNew, withWant(pool0)), nil, true,
			want{typ: dhcpv4.MessageTypeAck, yiaddr: pool0, change: ChangeBind}},
		{"init-reboot pool, expired lease of another", msg(dhcpv4.MessageTypeRequest, macNew, withWant(pool2)), expired, true,
			want{typ: dhcpv4.MessageTypeAck, yiaddr: pool2, change: ChangeBind}},
		{"init-reboot outside pool", msg(dhcpv4.MessageTypeRequest, macNew, withWant(netip.MustParseAddr("192.168.126.50"))), nil, true,
			want{typ: dhcpv4.MessageTypeNak}},
		{"init-reboot with ciaddr", msg(dhcpv4.MessageTypeRequest, macM0, withWant(ipM0), withCI(ipM0)), nil, false,
			want{drop: DropBadRequest}},
		{"renewing reserved", msg(dhcpv4.MessageTypeRequest, macM0, withCI(ipM0)), nil, false,
			want{typ: dhcpv4.MessageTypeAck, yiaddr: ipM0}},
		{"rebinding reserved", msg(dhcpv4.MessageTypeRequest, macM0, withCI(ipM0), withBcast()), nil, false,
			want{typ: dhcpv4.MessageTypeAck, yiaddr: ipM0}},
		{"renewing wrong address for reserved host", msg(dhcpv4.MessageTypeRequest, macM0, withCI(pool0)), nil, false,
			want{typ: dhcpv4.MessageTypeNak}},
		{"renewing pool lease", msg(dhcpv4.MessageTypeRequest, macNew2, withCI(pool2)), leased, true,
			want{typ: dhcpv4.MessageTypeAck, yiaddr: pool2, change: ChangeBind}},
		{"renewing someone else's pool lease", msg(dhcpv4.MessageTypeRequest, macNew, withCI(pool2)), leased, true,
			want{typ: dhcpv4.MessageTypeNak}},
		{"request with nothing", msg(dhcpv4.MessageTypeRequest, macM0), nil, false,
			want{drop: DropBadRequest}},
		{"inform", msg(dhcpv4.MessageTypeInform, macNew, withCI(netip.MustParseAddr("192.168.126.50"))), nil, false,
			want{typ: dhcpv4.MessageTypeAck}},
		{"inform outside network", msg(dhcpv4.MessageTypeInform, macNew, withCI(netip.MustParseAddr("10.1.1.1"))), nil, false,
			want{drop: DropBadRequest}},
		{"release own lease", msg(dhcpv4.MessageTypeRelease, macNew2, withCI(pool2), withSID(testServer)), leased, true,
			want{change: ChangeRelease}},
		{"release someone else's lease", msg(dhcpv4.MessageTypeRelease, macNew, withCI(pool2), withSID(testServer)), leased, true,
			want{}},
		{"decline", msg(dhcpv4.MessageTypeDecline, macNew, withWant(pool0), withSID(testServer)), nil, true,
			want{change: ChangeDecline}},
		{"decline without address", msg(dhcpv4.MessageTypeDecline, macNew, withSID(testServer)), nil, true,
			want{drop: DropBadRequest}},
		{"relayed from our network", msg(dhcpv4.MessageTypeDiscover, macM0, withGI(netip.MustParseAddr("192.168.126.1"))), nil, false,
			want{typ: dhcpv4.MessageTypeOffer, yiaddr: ipM0}},
		{"relayed from elsewhere", msg(dhcpv4.MessageTypeDiscover, macM0, withGI(netip.MustParseAddr("10.0.0.1"))), nil, false,
			want{drop: DropForeignRelay}},
		{"no message type", func() *dhcpv4.DHCPv4 {
			d := msg(dhcpv4.MessageTypeDiscover, macM0)
			d.Options.Del(dhcpv4.OptionDHCPMessageType)
			return d
		}(), nil, false,
			want{drop: DropNoMessageType}},
		{"a reply", func() *dhcpv4.DHCPv4 {
			d := msg(dhcpv4.MessageTypeOffer, macM0)
			d.OpCode = dhcpv4.OpcodeBootReply
			return d
		}(), nil, false,
			want{drop: DropNotRequest}},
		{"server message type", msg(dhcpv4.MessageTypeOffer, macM0), nil, false,
			want{drop: DropUnknownType}},
		{"short chaddr", msg(dhcpv4.MessageTypeDiscover, net.HardwareAddr{1, 2, 3}), nil, false,
			want{drop: DropBadHWAddr}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := p.Decide(Input{Request: c.req, Leases: c.leases, ServePool: c.servePool, Now: t0})
			if d.Drop != c.want.drop {
				t.Fatalf("drop = %q, want %q", d.Drop, c.want.drop)
			}
			if d.Change.Kind != c.want.change {
				t.Errorf("change = %v, want %v", d.Change.Kind, c.want.change)
			}
			if c.want.typ == dhcpv4.MessageTypeNone {
				if d.Reply != nil {
					t.Fatalf("reply %s, want none", d.Reply.MessageType())
				}
				return
			}
			if d.Reply == nil {
				t.Fatalf("no reply, want %s", c.want.typ)
			}
			r := d.Reply
			if r.MessageType() != c.want.typ {
				t.Fatalf("reply %s, want %s", r.MessageType(), c.want.typ)
			}
			checkReplyInvariants(t, c.req, r, testServer)
			if c.want.yiaddr.IsValid() && addr(r.YourIPAddr) != c.want.yiaddr {
				t.Errorf("yiaddr %v, want %v", r.YourIPAddr, c.want.yiaddr)
			}
			if c.want.typ == dhcpv4.MessageTypeOffer && c.want.change == ChangeOffer && !p.inPool(addr(r.YourIPAddr)) {
				t.Errorf("offered %v, not a pool address", r.YourIPAddr)
			}
			if c.want.change == ChangeBind && d.Change.IP != addr(r.YourIPAddr) {
				t.Errorf("bind %v but yiaddr %v", d.Change.IP, r.YourIPAddr)
			}
		})
	}
}

func TestReplyOptions(t *testing.T) {
	p, err := NewPolicy(testOptions())
	if err != nil {
		t.Fatal(err)
	}
	d := p.Decide(Input{Request: msg(dhcpv4.MessageTypeRequest, macM0, withCI(ipM0)), Leases: memLeases{}, Now: t0})
	r := d.Reply
	if r == nil {
		t.Fatal("no reply")
	}
	checks := []struct {
		name      string
		got, want string
	}{
		{"mask", net.IP(r.SubnetMask()).String(), "255.255.255.0"},
		{"router", ips2s(r.Router()), "[192.168.126.1]"},
		{"dns", ips2s(r.DNS()), "[192.168.126.10 192.168.126.11]"},
		{"ntp", ips2s(r.NTPServers()), "[192.168.126.2]"},
		{"hostname", r.HostName(), "master-0"},
		{"domain", r.DomainName(), "ocp4.example.com"},
		{"search", r.DomainSearch().String(), "[ocp4.example.com example.com]"},
		{"lease", r.IPAddressLeaseTime(0).String(), "1h0m0s"},
		{"server id", r.ServerIdentifier().String(), "192.168.126.10"},
		{"ciaddr", r.ClientIPAddr.String(), "192.168.126.20"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %s, want %s", c.name, c.got, c.want)
		}
	}
	// INFORM: no lease time, no yiaddr.
	d = p.Decide(Input{Request: msg(dhcpv4.MessageTypeInform, macM0, withCI(ipM0)), Leases: memLeases{}, Now: t0})
	if d.Reply.Options.Has(dhcpv4.OptionIPAddressLeaseTime) || !addr(d.Reply.YourIPAddr).IsUnspecified() {
		t.Errorf("INFORM ACK carries a lease: %s", d.Reply.Summary())
	}
	// NTP and search list only when configured.
	o := testOptions()
	o.NTP, o.SearchDomains, o.DNS = nil, nil, nil
	p2, err := NewPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	r = p2.Decide(Input{Request: msg(dhcpv4.MessageTypeDiscover, macM0), Leases: memLeases{}, Now: t0}).Reply
	if r.Options.Has(dhcpv4.OptionNTPServers) || r.Options.Has(dhcpv4.OptionDNSDomainSearchList) {
		t.Errorf("unconfigured options sent: %s", r.Summary())
	}
	if got := ips2s(r.DNS()); got != "[192.168.126.10]" {
		t.Errorf("default DNS %s, want the server itself", got)
	}
}

// TestPoolStable: the address offered to a MAC depends on the MAC only, not
// on the server or the order clients came in.
func TestPoolStable(t *testing.T) {
	o := testOptions()
	o.Pool = cluster.Range{Start: netip.MustParseAddr("192.168.126.100"), End: netip.MustParseAddr("192.168.126.199")}
	p, err := NewPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	o.ServerID = otherSrv
	p2, err := NewPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		mac := net.HardwareAddr{2, 0, 0, 0, 0, byte(i)}
		a := p.Decide(Input{Request: msg(dhcpv4.MessageTypeDiscover, mac), Leases: memLeases{}, ServePool: true, Now: t0})
		b := p2.Decide(Input{Request: msg(dhcpv4.MessageTypeDiscover, mac), Leases: memLeases{}, ServePool: true, Now: t0.Add(time.Hour)})
		if a.Reply == nil || b.Reply == nil || !a.Reply.YourIPAddr.Equal(b.Reply.YourIPAddr) {
			t.Fatalf("mac %s: offers differ: %v vs %v", mac, a.Reply, b.Reply)
		}
	}
}

func TestNewPolicyRejects(t *testing.T) {
	bad := map[string]func(*Options){
		"no server id":      func(o *Options) { o.ServerID = netip.Addr{} },
		"ipv6 network":      func(o *Options) { o.Network = netip.MustParsePrefix("fd00::/64") },
		"reservation out":   func(o *Options) { o.Reservations[0].IP = netip.MustParseAddr("10.0.0.1") },
		"duplicate mac":     func(o *Options) { o.Reservations = append(o.Reservations, o.Reservations[0]) },
		"pool outside":      func(o *Options) { o.Pool.End = netip.MustParseAddr("192.168.127.1") },
		"pool reversed":     func(o *Options) { o.Pool.Start, o.Pool.End = o.Pool.End, o.Pool.Start },
		"ipv6 dns":          func(o *Options) { o.DNS = []netip.Addr{netip.MustParseAddr("::1")} },
		"bad search domain": func(o *Options) { o.SearchDomains = []string{""} },
	}
	for name, mod := range bad {
		o := testOptions()
		mod(&o)
		if _, err := NewPolicy(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// checkReplyInvariants holds for every reply Decide makes.
func checkReplyInvariants(t testing.TB, req, r *dhcpv4.DHCPv4, sid netip.Addr) {
	t.Helper()
	if r.OpCode != dhcpv4.OpcodeBootReply {
		t.Errorf("reply op %v", r.OpCode)
	}
	if r.TransactionID != req.TransactionID {
		t.Errorf("xid %v, want %v", r.TransactionID, req.TransactionID)
	}
	if !macEqual(r.ClientHWAddr, req.ClientHWAddr) {
		t.Errorf("chaddr %v, want %v", r.ClientHWAddr, req.ClientHWAddr)
	}
	if addr(r.ServerIdentifier()) != sid {
		t.Errorf("option 54 = %v, want %v", r.ServerIdentifier(), sid)
	}
	if _, err := dhcpv4.FromBytes(r.ToBytes()); err != nil {
		t.Errorf("reply does not re-parse: %v", err)
	}
}

func ips2s(v []net.IP) string {
	s := make([]string, len(v))
	for i, a := range v {
		s[i] = a.String()
	}
	return "[" + join(s) + "]"
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}
