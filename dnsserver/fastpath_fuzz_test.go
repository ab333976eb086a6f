package dnsserver

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"appliance/internal/cluster"
)

// FuzzFastAnswer feeds the fast path arbitrary packets: it never panics,
// and what it answers is byte for byte the reply the chain's pieces build
// for the unpacked query (bufsize's cap, the cluster lookup, CoreDNS's
// SizeAndDo and Scrub); everything else it leaves to the chain.
func FuzzFastAnswer(f *testing.F) {
	cfg := testConfig()
	z := newZoneData(cfg, DefaultTTL)
	table := newFastTable(&z, cluster.NewState(cfg).Snapshot(), false, nil)
	for _, name := range []string{"api.ocp4.example.com.", "A.b.Apps.ocp4.example.com.", "master-0.", "nope.ocp4.example.com.",
		"10.126.168.192.in-addr.arpa.", "www.example.org.", "ocp4.example.com."} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSOA, dns.TypePTR, dns.TypeANY} {
			m := new(dns.Msg)
			m.SetQuestion(name, qt)
			b, _ := m.Pack()
			f.Add(b)
			m.SetEdns0(4096, true)
			b, _ = m.Pack()
			f.Add(b)
		}
	}
	out := make([]byte, 0, ednsBufSize)
	key := make([]byte, 0, 258)
	f.Fuzz(func(t *testing.T, q []byte) {
		r, _ := table.answer(out, q, key)
		if r == nil {
			return
		}
		req := new(dns.Msg)
		if err := req.Unpack(q); err != nil {
			t.Fatalf("answered a query that does not unpack (%v): %x", err, q)
		}
		if o := req.IsEdns0(); o != nil && o.UDPSize() > ednsBufSize {
			o.SetUDPSize(ednsBufSize)
		}
		res := z.lookup(req.Question[0], cluster.NewState(cfg).Snapshot())
		if res.result == resultFallthrough {
			t.Fatalf("answered a query the chain passes on: %v", req)
		}
		m := reply(req, res)
		st := request.Request{Req: req, W: templateWriter{}}
		st.SizeAndDo(m)
		st.Scrub(m)
		want, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r, want) {
			t.Fatalf("query %x\nfast path %x\nchain     %x\n%v", q, r, want, m)
		}
	})
}

// TestPktinfo: the control messages the fast path writes and reads by hand
// are the kernel's (as x/sys builds them).
func TestPktinfo(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.168.126.10"), netip.MustParseAddr("fd00::10")
	if got := pktinfoDst(unix.PktInfo4(&unix.Inet4Pktinfo{Ifindex: 2, Addr: v4.As4()})); got != v4 {
		t.Errorf("IP_PKTINFO destination: %v", got)
	}
	if got := pktinfoDst(unix.PktInfo6(&unix.Inet6Pktinfo{Addr: v6.As16(), Ifindex: 2})); got != v6 {
		t.Errorf("IPV6_PKTINFO destination: %v", got)
	}
	if got, want := pktinfoSrc(nil, v4), unix.PktInfo4(&unix.Inet4Pktinfo{Spec_dst: v4.As4()}); !bytes.Equal(got, want) {
		t.Errorf("IP_PKTINFO source\n got %x\nwant %x", got, want)
	}
	if got, want := pktinfoSrc(nil, netip.AddrFrom16(v4.As16())), unix.PktInfo4(&unix.Inet4Pktinfo{Spec_dst: v4.As4()}); !bytes.Equal(got, want) {
		t.Errorf("IP_PKTINFO source for a mapped address\n got %x\nwant %x", got, want)
	}
	if got, want := pktinfoSrc(nil, v6), unix.PktInfo6(&unix.Inet6Pktinfo{Addr: v6.As16()}); !bytes.Equal(got, want) {
		t.Errorf("IPV6_PKTINFO source\n got %x\nwant %x", got, want)
	}
	if got := pktinfoSrc(nil, netip.Addr{}); len(got) != 0 {
		t.Errorf("no source, yet %x", got)
	}
}
