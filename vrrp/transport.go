package vrrp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// rxMeta is what the socket tells us about a received advert besides its payload.
type rxMeta struct {
	Src, Dst netip.Addr
	TTL      int // TTL (IPv4) or hop limit (IPv6); -1 when the kernel did not report it
	IfIndex  int // 0 when unknown
}

// rxFilter holds the receive checks of RFC 3768 §7.1 / RFC 5798 §7.1 that
// precede the state machine. It is pure so every drop reason can be
// table-tested without sockets.
type rxFilter struct {
	version  uint8
	vrid     uint8
	ifIndex  int
	group    netip.Addr
	unicast  bool // accept adverts from peers only
	peers    map[netip.Addr]bool
	authType uint8
	authData [8]byte
	interval time.Duration
	vips     []netip.Addr // sorted
}

// Drop reasons owned by the receive filter, beside those of the codec.
const (
	// ReasonAddrList: an advert on our VRID listing other addresses (a VRID collision).
	ReasonAddrList DropReason = "addr_list"
	// ReasonInterface: an advert that arrived on another interface.
	ReasonInterface DropReason = "interface"
)

// verdict is the outcome of rxFilter.check.
type verdict struct {
	Packet    Packet
	Reason    DropReason // empty when accepted
	Collision bool       // the advert is on our VRID but lists other addresses
}

// check applies the transport-level receive rules to one packet. Adverts on
// other VRIDs are normal on a shared segment (API and ingress instances) and
// are reported with ReasonVRID so they can be counted apart from errors.
func (f *rxFilter) check(meta rxMeta, payload []byte) verdict {
	// A unicast peer is known by its address, which may be a router away
	// (masters in several subnets) and is not bound to send with 255:
	// keepalived sends IPv6 unicast with the default hop limit, and checks
	// no TTL in unicast itself. Anyone else must be on the link.
	if meta.TTL >= 0 && meta.TTL != 255 && !(f.unicast && f.peers[meta.Src]) {
		return verdict{Reason: ReasonTTL}
	}
	if f.ifIndex != 0 && meta.IfIndex != 0 && meta.IfIndex != f.ifIndex {
		return verdict{Reason: ReasonInterface}
	}
	if meta.Src.Is4() != f.group.Is4() {
		return verdict{Reason: ReasonFamily}
	}
	p, err := Parse(payload, meta.Src, meta.Dst)
	if err != nil {
		var pe *ParseError
		if errors.As(err, &pe) {
			return verdict{Reason: pe.Reason}
		}
		return verdict{Reason: ReasonShort}
	}
	if p.Version != f.version {
		return verdict{Reason: ReasonVersion}
	}
	if p.VRID != f.vrid {
		return verdict{Reason: ReasonVRID}
	}
	// Checked once the advert is known to be on our VRID, so a stranger
	// here is a router competing for our VIPs, not another cluster's.
	if f.unicast && !f.peers[meta.Src] {
		return verdict{Packet: p, Reason: ReasonUnknownPeer}
	}
	if f.version == 2 {
		if !CheckAuth(p, f.authType, f.authData) {
			return verdict{Reason: ReasonAuth}
		}
		// RFC 3768 §7.1: a v2 advert with another interval is discarded.
		if p.Interval != f.interval {
			return verdict{Reason: ReasonInterval}
		}
	}
	if !sameAddrs(p.Addrs, f.vips) {
		// RFC 5798 §7.1: log, and drop unless it comes from the address owner.
		if p.Priority != 255 {
			return verdict{Packet: p, Reason: ReasonAddrList, Collision: true}
		}
		return verdict{Packet: p, Collision: true}
	}
	return verdict{Packet: p}
}

// peerList lists the peers, for logs.
func (f *rxFilter) peerList() []netip.Addr {
	out := make([]netip.Addr, 0, len(f.peers))
	for p := range f.peers {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// sameAddrs reports whether a and b hold the same set of addresses; want is sorted.
func sameAddrs(got, want []netip.Addr) bool {
	if len(got) != len(want) {
		return false
	}
	seen := make(map[netip.Addr]bool, len(want))
	for _, a := range want {
		seen[a] = true
	}
	for _, a := range got {
		if !seen[a] {
			return false
		}
	}
	return true
}

// conn is a raw VRRP socket for one family on one interface.
type conn interface {
	// read blocks for the next packet; the returned payload aliases buf.
	read(buf []byte) (payload []byte, meta rxMeta, err error)
	write(payload []byte, src, dst netip.Addr) error
	// pending reports whether the kernel holds received packets not yet read.
	pending() bool
	Close() error
}

// socketPending asks the kernel whether pc has unread data (FIONREAD).
func socketPending(pc net.PacketConn) bool {
	sc, ok := pc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	_ = raw.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	})
	return n > 0
}

// bindToDevice returns a socket Control function that binds to ifname before
// bind(2), so the socket sees only this interface's traffic.
func bindToDevice(ifname string) func(string, string, syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, ifname)
		}); err != nil {
			return err
		}
		return serr
	}
}

// openConn opens the raw socket for the family of group on ifi and joins
// group when multicast is in use.
func openConn(ctx context.Context, ifi *net.Interface, group netip.Addr, multicast bool) (conn, error) {
	lc := net.ListenConfig{Control: bindToDevice(ifi.Name)}
	if group.Is4() {
		pc, err := lc.ListenPacket(ctx, "ip4:112", "0.0.0.0")
		if err != nil {
			return nil, fmt.Errorf("vrrp: open IPv4 raw socket on %s: %w", ifi.Name, err)
		}
		rc, err := ipv4.NewRawConn(pc)
		if err != nil {
			pc.Close()
			return nil, fmt.Errorf("vrrp: IPv4 raw socket on %s: %w", ifi.Name, err)
		}
		c := &conn4{rc: rc, pc: pc, ifi: ifi}
		if err := c.setup(group, multicast); err != nil {
			rc.Close()
			return nil, err
		}
		return c, nil
	}
	pc, err := lc.ListenPacket(ctx, "ip6:112", "::")
	if err != nil {
		return nil, fmt.Errorf("vrrp: open IPv6 raw socket on %s: %w", ifi.Name, err)
	}
	c := &conn6{pc: ipv6.NewPacketConn(pc), raw: pc, ifi: ifi}
	if err := c.setup(group, multicast); err != nil {
		pc.Close()
		return nil, err
	}
	return c, nil
}

type conn4 struct {
	rc  *ipv4.RawConn
	pc  net.PacketConn
	ifi *net.Interface
}

func (c *conn4) pending() bool { return socketPending(c.pc) }

func (c *conn4) setup(group netip.Addr, multicast bool) error {
	if err := c.rc.SetControlMessage(ipv4.FlagInterface, true); err != nil {
		return fmt.Errorf("vrrp: IPv4 control messages on %s: %w", c.ifi.Name, err)
	}
	if err := c.rc.SetMulticastInterface(c.ifi); err != nil {
		return fmt.Errorf("vrrp: multicast interface %s: %w", c.ifi.Name, err)
	}
	if err := c.rc.SetMulticastLoopback(false); err != nil {
		return fmt.Errorf("vrrp: multicast loopback off on %s: %w", c.ifi.Name, err)
	}
	if err := c.rc.SetMulticastTTL(255); err != nil {
		return fmt.Errorf("vrrp: multicast TTL on %s: %w", c.ifi.Name, err)
	}
	if multicast {
		if err := c.rc.JoinGroup(c.ifi, &net.IPAddr{IP: group.AsSlice()}); err != nil {
			return fmt.Errorf("vrrp: join %s on %s: %w", group, c.ifi.Name, err)
		}
	}
	return nil
}

func (c *conn4) read(buf []byte) ([]byte, rxMeta, error) {
	h, p, cm, err := c.rc.ReadFrom(buf)
	if err != nil {
		return nil, rxMeta{}, err
	}
	meta := rxMeta{TTL: h.TTL}
	meta.Src, _ = netip.AddrFromSlice(h.Src.To4())
	meta.Dst, _ = netip.AddrFromSlice(h.Dst.To4())
	if cm != nil {
		meta.IfIndex = cm.IfIndex
	}
	return p, meta, nil
}

func (c *conn4) write(payload []byte, src, dst netip.Addr) error {
	h := &ipv4.Header{
		Version:  ipv4.Version,
		Len:      ipv4.HeaderLen,
		TOS:      0xc0, // DSCP CS6 (network control), as routers mark VRRP
		TotalLen: ipv4.HeaderLen + len(payload),
		TTL:      255,
		Protocol: ProtocolNumber,
		Src:      src.AsSlice(),
		Dst:      dst.AsSlice(),
	}
	if err := c.rc.WriteTo(h, payload, nil); err != nil {
		return fmt.Errorf("vrrp: send to %s on %s: %w", dst, c.ifi.Name, err)
	}
	return nil
}

func (c *conn4) Close() error { return c.rc.Close() }

type conn6 struct {
	pc  *ipv6.PacketConn
	raw net.PacketConn
	ifi *net.Interface
}

func (c *conn6) pending() bool { return socketPending(c.raw) }

func (c *conn6) setup(group netip.Addr, multicast bool) error {
	if err := c.pc.SetControlMessage(ipv6.FlagHopLimit|ipv6.FlagDst|ipv6.FlagInterface, true); err != nil {
		return fmt.Errorf("vrrp: IPv6 control messages on %s: %w", c.ifi.Name, err)
	}
	if err := c.pc.SetMulticastInterface(c.ifi); err != nil {
		return fmt.Errorf("vrrp: multicast interface %s: %w", c.ifi.Name, err)
	}
	if err := c.pc.SetMulticastLoopback(false); err != nil {
		return fmt.Errorf("vrrp: multicast loopback off on %s: %w", c.ifi.Name, err)
	}
	if err := c.pc.SetMulticastHopLimit(255); err != nil {
		return fmt.Errorf("vrrp: multicast hop limit on %s: %w", c.ifi.Name, err)
	}
	if err := c.pc.SetHopLimit(255); err != nil {
		return fmt.Errorf("vrrp: hop limit on %s: %w", c.ifi.Name, err)
	}
	if multicast {
		if err := c.pc.JoinGroup(c.ifi, &net.IPAddr{IP: group.AsSlice()}); err != nil {
			return fmt.Errorf("vrrp: join %s on %s: %w", group, c.ifi.Name, err)
		}
	}
	return nil
}

func (c *conn6) read(buf []byte) ([]byte, rxMeta, error) {
	n, cm, src, err := c.pc.ReadFrom(buf)
	if err != nil {
		return nil, rxMeta{}, err
	}
	meta := rxMeta{TTL: -1}
	if ia, ok := src.(*net.IPAddr); ok {
		meta.Src, _ = netip.AddrFromSlice(ia.IP)
		meta.Src = meta.Src.Unmap()
	}
	if cm != nil {
		meta.TTL = cm.HopLimit
		meta.IfIndex = cm.IfIndex
		meta.Dst, _ = netip.AddrFromSlice(cm.Dst)
	}
	return buf[:n], meta, nil
}

func (c *conn6) write(payload []byte, src, dst netip.Addr) error {
	cm := &ipv6.ControlMessage{HopLimit: 255, Src: src.AsSlice(), IfIndex: c.ifi.Index}
	to := &net.IPAddr{IP: dst.AsSlice()}
	if dst.IsLinkLocalUnicast() || dst.IsLinkLocalMulticast() {
		to.Zone = c.ifi.Name
	}
	if _, err := c.pc.WriteTo(payload, cm, to); err != nil {
		return fmt.Errorf("vrrp: send to %s on %s: %w", dst, c.ifi.Name, err)
	}
	return nil
}

func (c *conn6) Close() error { return c.pc.Close() }
