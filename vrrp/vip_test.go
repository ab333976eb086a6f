package vrrp

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"appliance/internal/netlab/netlabtest"
)

func TestVIPLabel(t *testing.T) {
	tests := []struct{ ifname, suffix, want string }{
		{"eth0", "vip", "eth0:vip"},
		{"ens3", "", ""},
		{"enp1s0", "verylongsuffix", "enp1s0:verylong"},
		{"br-ex", "vip", "br-ex:vip"},
		{"abcdefghijklm", "vip", "abcdefghijklm:v"},
		{"abcdefghijklmn", "vip", ""},  // only "abcdefghijklmn:" would fit
		{"abcdefghijklmno", "vip", ""}, // 15 bytes: the label would be the interface's own
	}
	for _, tt := range tests {
		if got := vipLabel(tt.ifname, tt.suffix); got != tt.want {
			t.Errorf("vipLabel(%q, %q) = %q, want %q", tt.ifname, tt.suffix, got, tt.want)
		}
		if got := vipLabel(tt.ifname, tt.suffix); len(got) > maxLabelLen || (got != "" && !strings.HasPrefix(got, tt.ifname+":")) {
			t.Errorf("vipLabel(%q, %q) = %q: not a valid label", tt.ifname, tt.suffix, got)
		}
	}
}

func TestNormPrefix(t *testing.T) {
	tests := []struct {
		in   netip.Prefix
		want string
	}{
		{netip.MustParsePrefix("192.168.126.5/24"), "192.168.126.5/24"},
		{netip.PrefixFrom(netip.AddrFrom16(netip.MustParseAddr("192.168.126.5").As16()), 120), "192.168.126.5/24"},
		{netip.MustParsePrefix("fd00::5/64"), "fd00::5/64"},
		{netip.Prefix{}, "error"},
	}
	for _, tt := range tests {
		got, err := normPrefix(tt.in)
		s := got.String()
		if err != nil {
			s = "error"
		}
		if s != tt.want {
			t.Errorf("normPrefix(%v) = %s (%v), want %s", tt.in, s, err, tt.want)
		}
	}
}

// vipTestNet is two network namespaces made by the test, joined by a veth
// pair: "vipa0" in A (the node holding VIPs), "vipb0" in B (a neighbour).
// Nothing is created in or changed about the test process's own namespace.
type vipTestNet struct {
	nsA, nsB       string
	hA, hB         netns.NsHandle
	nlA, nlB       *netlink.Handle
	ifA, ifB       string
	macA           net.HardwareAddr
	idxA, idxB     int
	nodeV4, nodeV6 netip.Prefix // the node's own addresses on vipa0
}

func vipIP(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func vipNewTestNet(t *testing.T) *vipTestNet {
	t.Helper()
	netlabtest.RequireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("iproute2 is needed: %v", err)
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	base := fmt.Sprintf("vipt-%d-%s", os.Getpid(), hex.EncodeToString(rnd[:]))
	n := &vipTestNet{nsA: base + "-a", nsB: base + "-b", ifA: "vipa0", ifB: "vipb0"}
	for _, name := range []string{n.nsA, n.nsB} {
		vipIP(t, "netns", "add", name)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v\n%s", name, err, out)
			}
		})
	}
	var err error
	if n.hA, err = netns.GetFromName(n.nsA); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.hA.Close() })
	if n.hB, err = netns.GetFromName(n.nsB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.hB.Close() })
	if n.nlA, err = netlink.NewHandleAt(n.hA); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.nlA.Close)
	if n.nlB, err = netlink.NewHandleAt(n.hB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.nlB.Close)

	// The handle is bound to A, so the veth is created there and its peer
	// moved straight into B: neither end ever exists in our own namespace.
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: n.ifA}, PeerName: n.ifB, PeerNamespace: netlink.NsFd(n.hB)}
	if err := n.nlA.LinkAdd(veth); err != nil {
		t.Fatalf("create veth in %s: %v", n.nsA, err)
	}
	la, err := n.nlA.LinkByName(n.ifA)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := n.nlB.LinkByName(n.ifB)
	if err != nil {
		t.Fatal(err)
	}
	n.macA, n.idxA, n.idxB = la.Attrs().HardwareAddr, la.Attrs().Index, lb.Attrs().Index
	n.nodeV4 = netip.MustParsePrefix("192.168.126.10/24")
	n.nodeV6 = netip.MustParsePrefix("fd00:126::10/64")
	vipAddAddr(t, n.nlA, la, n.nodeV4, "")
	vipAddAddr(t, n.nlA, la, n.nodeV6, "")
	vipAddAddr(t, n.nlB, lb, netip.MustParsePrefix("192.168.126.20/24"), "")
	vipAddAddr(t, n.nlB, lb, netip.MustParsePrefix("fd00:126::20/64"), "")
	for _, x := range []struct {
		h *netlink.Handle
		l netlink.Link
	}{{n.nlA, la}, {n.nlB, lb}} {
		if err := x.h.LinkSetUp(x.l); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// waitMulticastRoute waits until B routes IPv6 multicast to its interface:
// until then (about a second after link up) B's IPv6 stack drops multicast
// such as our NA to ff02::1 as "no route".
func (n *vipTestNet) waitMulticastRoute(t *testing.T) {
	t.Helper()
	_, ff00, _ := net.ParseCIDR("ff00::/8")
	filter := &netlink.Route{Table: unix.RT_TABLE_LOCAL, LinkIndex: n.idxB}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		routes, err := n.nlB.RouteListFiltered(netlink.FAMILY_V6, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range routes {
			if r.Dst != nil && r.Dst.String() == ff00.String() {
				return
			}
		}
	}
	t.Fatalf("%s in %s never got its IPv6 multicast route", n.ifB, n.nsB)
}

// vipAddAddr adds an address the way something other than VIPManager would.
func vipAddAddr(t *testing.T, h *netlink.Handle, l netlink.Link, p netip.Prefix, label string) {
	t.Helper()
	a := nlAddr(p)
	a.Label = label
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := h.AddrAdd(l, a); err != nil {
		t.Fatalf("add %s: %v", p, err)
	}
}

// vipInNS runs fn on a thread switched into ns. The thread stays locked and
// exits with the goroutine, so the switch can never leak to other code.
func vipInNS(t *testing.T, ns netns.NsHandle, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			t.Errorf("enter namespace: %v", err)
			return
		}
		fn()
	}()
	<-done
}

func (n *vipTestNet) addrs(t *testing.T) []netip.Prefix {
	t.Helper()
	l, err := n.nlA.LinkByName(n.ifA)
	if err != nil {
		t.Fatal(err)
	}
	list, err := n.nlA.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Prefix
	for _, a := range list {
		ip, _ := netip.AddrFromSlice(a.IP)
		bits, _ := a.Mask.Size()
		if ip = ip.Unmap(); !ip.IsLinkLocalUnicast() {
			out = append(out, netip.PrefixFrom(ip, bits))
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
	return out
}

func TestVIPManagerAddRemove(t *testing.T) {
	n := vipNewTestNet(t)
	m, err := NewVIPManager(n.nlA, n.ifA, "vip")
	if err != nil {
		t.Fatal(err)
	}
	if m.Label() != "vipa0:vip" {
		t.Errorf("Label() = %q", m.Label())
	}
	v4 := netip.MustParsePrefix("192.168.126.5/24")
	v6 := netip.MustParsePrefix("fd00:126::5/64")

	for _, p := range []netip.Prefix{v4, v6} {
		for range 2 { // the second Add must be a no-op
			if err := m.Add(p); err != nil {
				t.Fatalf("Add(%s): %v", p, err)
			}
		}
		if ok, err := m.Has(p); err != nil || !ok {
			t.Fatalf("Has(%s) = %v, %v after Add", p, ok, err)
		}
		// Same address, other prefix length: not the VIP we installed.
		other := netip.PrefixFrom(p.Addr(), p.Addr().BitLen())
		if ok, err := m.Has(other); err != nil || ok {
			t.Errorf("Has(%s) = %v, %v", other, ok, err)
		}
	}

	out4 := vipIP(t, "-n", n.nsA, "-4", "addr", "show", "dev", n.ifA)
	if !vipLineHas(out4, "inet 192.168.126.5/24", "vipa0:vip") {
		t.Errorf("ip -4 addr does not show the labelled VIP:\n%s", out4)
	}
	if !vipLineHas(out4, "inet 192.168.126.10/24", "vipa0") || vipLineHas(out4, "inet 192.168.126.10/24", "vipa0:vip") {
		t.Errorf("node address lost its label:\n%s", out4)
	}
	out6 := vipIP(t, "-n", n.nsA, "-6", "addr", "show", "dev", n.ifA)
	if !vipLineHas(out6, "inet6 fd00:126::5/64", "nodad") || !vipLineHas(out6, "inet6 fd00:126::5/64", "deprecated") {
		t.Errorf("ip -6 addr does not show the VIP as nodad and deprecated:\n%s", out6)
	}
	if strings.Count(out4, "192.168.126.5/") != 1 || strings.Count(out6, "fd00:126::5/") != 1 {
		t.Errorf("VIP installed more than once:\n%s%s", out4, out6)
	}

	for _, p := range []netip.Prefix{v4, v6} {
		for range 2 { // removing an absent VIP is fine
			if err := m.Remove(p); err != nil {
				t.Fatalf("Remove(%s): %v", p, err)
			}
		}
		if ok, err := m.Has(p); err != nil || ok {
			t.Fatalf("Has(%s) = %v, %v after Remove", p, ok, err)
		}
	}
	if got, want := n.addrs(t), []netip.Prefix{n.nodeV4, n.nodeV6}; !slices.Equal(got, want) {
		t.Errorf("addresses after Remove = %v, want the node's own %v", got, want)
	}
}

// vipLineHas reports whether one line of out contains all of parts.
func vipLineHas(out string, parts ...string) bool {
	for line := range strings.SplitSeq(out, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

func TestVIPManagerIPv6Preferred(t *testing.T) {
	n := vipNewTestNet(t)
	m, err := NewVIPManager(n.nlA, n.ifA, "vip", AllowIPv6Source())
	if err != nil {
		t.Fatal(err)
	}
	v6 := netip.MustParsePrefix("fd00:126::5/64")
	if err := m.Add(v6); err != nil {
		t.Fatal(err)
	}
	out6 := vipIP(t, "-n", n.nsA, "-6", "addr", "show", "dev", n.ifA)
	if !vipLineHas(out6, "inet6 fd00:126::5/64", "nodad") || vipLineHas(out6, "inet6 fd00:126::5/64", "deprecated") {
		t.Errorf("want a preferred nodad VIP:\n%s", out6)
	}
}

func TestVIPManagerRemoveStale(t *testing.T) {
	n := vipNewTestNet(t)
	l, err := n.nlA.LinkByName(n.ifA)
	if err != nil {
		t.Fatal(err)
	}
	// Left by a crashed run: our VIPs with other prefix lengths, and a
	// labelled VIP that is no longer configured.
	stale := []netip.Prefix{
		netip.MustParsePrefix("192.168.126.5/32"),
		netip.MustParsePrefix("192.168.126.99/24"),
		netip.MustParsePrefix("fd00:126::5/128"),
	}
	vipAddAddr(t, n.nlA, l, stale[0], "vipa0:vip")
	vipAddAddr(t, n.nlA, l, stale[1], "vipa0:vip")
	vipAddAddr(t, n.nlA, l, stale[2], "")
	// Not ours: another label, and an unlabelled address.
	others := []netip.Prefix{
		netip.MustParsePrefix("192.168.126.50/24"),
		netip.MustParsePrefix("192.168.126.51/24"),
	}
	vipAddAddr(t, n.nlA, l, others[0], "vipa0:other")
	vipAddAddr(t, n.nlA, l, others[1], "")

	m, err := NewVIPManager(n.nlA, n.ifA, "vip")
	if err != nil {
		t.Fatal(err)
	}
	removed, err := m.RemoveStale([]netip.Prefix{
		netip.MustParsePrefix("192.168.126.5/24"),
		netip.MustParsePrefix("fd00:126::5/64"),
	})
	if err != nil {
		t.Fatal(err)
	}
	sortP := func(s []netip.Prefix) []netip.Prefix {
		s = slices.Clone(s)
		slices.SortFunc(s, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
		return s
	}
	if got, want := sortP(removed), sortP(stale); !slices.Equal(got, want) {
		t.Errorf("removed %v, want %v", got, want)
	}
	want := sortP(append([]netip.Prefix{n.nodeV4, n.nodeV6}, others...))
	if got := n.addrs(t); !slices.Equal(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
	// Nothing left to remove the second time.
	if removed, err := m.RemoveStale(nil); err != nil || len(removed) != 0 {
		t.Errorf("second RemoveStale = %v, %v", removed, err)
	}
}

func TestVIPManagerErrors(t *testing.T) {
	n := vipNewTestNet(t)
	if _, err := NewVIPManager(n.nlA, "nosuch0", "vip"); err == nil || !strings.Contains(err.Error(), "nosuch0") {
		t.Errorf("NewVIPManager on a missing interface: %v", err)
	}
	// A second veth pair inside A (dummy links need a module that may be absent).
	gone := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "vipgone0"}, PeerName: "vipgone1"}
	if err := n.nlA.LinkAdd(gone); err != nil {
		t.Fatal(err)
	}
	m, err := NewVIPManager(n.nlA, "vipgone0", "vip")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.nlA.LinkDel(gone); err != nil {
		t.Fatal(err)
	}
	err = m.Add(netip.MustParsePrefix("192.168.126.5/24"))
	if err == nil || !strings.HasPrefix(err.Error(), "vrrp: add VIP 192.168.126.5/24 on vipgone0: ") {
		t.Errorf("Add on a vanished interface: %v", err)
	}
	if err := m.Remove(netip.MustParsePrefix("192.168.126.5/24")); err == nil {
		t.Error("Remove on a vanished interface succeeded")
	}
	if err := m.Add(netip.Prefix{}); err == nil || !strings.Contains(err.Error(), "vrrp: add VIP") {
		t.Errorf("Add(invalid): %v", err)
	}
}

func TestAnnouncerNamespace(t *testing.T) {
	n := vipNewTestNet(t)
	n.waitMulticastRoute(t)
	v4 := netip.MustParseAddr("192.168.126.5")
	v6 := netip.MustParseAddr("fd00:126::5")
	oldMAC := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}

	// The neighbour knows the VIPs at an old owner's MAC; announcing must move them.
	for _, ip := range []netip.Addr{v4, v6} {
		family := netlink.FAMILY_V4
		if ip.Is6() {
			family = netlink.FAMILY_V6
		}
		if err := n.nlB.NeighSet(&netlink.Neigh{LinkIndex: n.idxB, Family: family, State: netlink.NUD_STALE,
			IP: net.IP(ip.AsSlice()), HardwareAddr: oldMAC}); err != nil {
			t.Fatalf("neighbour entry for %s: %v", ip, err)
		}
	}

	var capture *packet.Conn
	vipInNS(t, n.hB, func() {
		ifi, err := net.InterfaceByName(n.ifB)
		if err != nil {
			t.Error(err)
			return
		}
		if capture, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, nil); err != nil {
			t.Error(err)
		}
	})
	if capture == nil {
		t.FailNow()
	}
	defer capture.Close()

	var a *Announcer
	vipInNS(t, n.hA, func() {
		var err error
		if a, err = NewAnnouncer(n.ifA); err != nil {
			t.Error(err)
		}
	})
	if a == nil {
		t.FailNow()
	}
	if err := a.Announce([]netip.Addr{v4, v6}); err != nil {
		t.Fatal(err)
	}

	var gotReq, gotRep, gotNA bool
	buf := make([]byte, 2048)
	deadline := time.Now().Add(5 * time.Second)
	_ = capture.SetReadDeadline(deadline)
	for !(gotReq && gotRep && gotNA) {
		nr, _, err := capture.ReadFrom(buf)
		if err != nil {
			t.Fatalf("capture (request %v, reply %v, NA %v): %v", gotReq, gotRep, gotNA, err)
		}
		f := buf[:nr]
		if nr < 14 || !bytes.Equal(f[6:12], n.macA) {
			continue
		}
		switch binary.BigEndian.Uint16(f[12:]) {
		case 0x0806:
			var p arp.Packet
			if p.UnmarshalBinary(f[14:]) != nil || p.SenderIP != v4 {
				continue
			}
			switch p.Operation {
			case arp.OperationRequest:
				checkGARP(t, f, arp.OperationRequest, n.macA, v4)
				gotReq = true
			case arp.OperationReply:
				checkGARP(t, f, arp.OperationReply, n.macA, v4)
				gotRep = true
			}
		case 0x86dd:
			// Skip the node's own IPv6 chatter (MLD, RS); keep NAs for v6.
			if nr >= 14+40+24 && f[20] == 58 && f[54] == 136 && bytes.Equal(f[14+40+8:14+40+24], v6.AsSlice()) {
				checkNA(t, f, n.macA, v6)
				gotNA = true
			}
		}
	}

	// The neighbour's kernel accepted them (it checks the NA's checksum,
	// hop limit and flags): its entries now point at the new owner.
	for _, ip := range []netip.Addr{v4, v6} {
		family := netlink.FAMILY_V4
		if ip.Is6() {
			family = netlink.FAMILY_V6
		}
		var got net.HardwareAddr
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			neighs, err := n.nlB.NeighList(n.idxB, family)
			if err != nil {
				t.Fatal(err)
			}
			for _, nb := range neighs {
				if a, _ := netip.AddrFromSlice(nb.IP); a.Unmap() == ip {
					got = nb.HardwareAddr
				}
			}
			if bytes.Equal(got, n.macA) {
				break
			}
		}
		if !bytes.Equal(got, n.macA) {
			t.Errorf("neighbour entry for %s is %s, want %s", ip, got, n.macA)
		}
	}

	if err := a.Close(); err != nil {
		t.Error(err)
	}
	if err := a.Announce([]netip.Addr{v4}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Announce after Close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestNewAnnouncerErrors(t *testing.T) {
	n := vipNewTestNet(t)
	vipInNS(t, n.hA, func() {
		if _, err := NewAnnouncer("nosuch0"); err == nil || !strings.Contains(err.Error(), "nosuch0") {
			t.Errorf("missing interface: %v", err)
		}
		// Loopback has no Ethernet address.
		if _, err := NewAnnouncer("lo"); err == nil || !strings.Contains(err.Error(), "no Ethernet address") {
			t.Errorf("lo: %v", err)
		}
	})
}
