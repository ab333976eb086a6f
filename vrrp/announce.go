package vrrp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// Ethernet framing used by the announcer's frames.
const (
	announceEtherARP  = 0x0806
	announceEtherIPv6 = 0x86dd
	announceEthHdrLen = 14
	announceMinFrame  = 60 // shortest Ethernet frame without FCS; shorter ARP frames are padded
)

var (
	announceBroadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	// 33:33 + low 32 bits of ff02::1 (RFC 2464 §7).
	announceAllNodesMAC = net.HardwareAddr{0x33, 0x33, 0x00, 0x00, 0x00, 0x01}
)

// Announcer tells the segment that this node now owns some VIPs, so that
// neighbours and switches move their ARP/ND entries and forwarding tables
// to this interface's MAC at once instead of after their caches expire.
//
// Per IPv4 VIP, one round sends two gratuitous ARP frames to the broadcast
// address: an ARP request (the RFC 5227 announcement: sender and target
// protocol address both the VIP, target hardware address zero) and an ARP
// reply with sender and target hardware address both our MAC (RFC 5944
// §4.6), because some stacks only update their caches from one of the two.
// Per IPv6 VIP it sends one unsolicited Neighbor Advertisement (RFC 4861
// §7.2.6) to ff02::1 with the Override flag set, Solicited clear, a Target
// Link-Layer Address option and the VIP itself as IPv6 source.
//
// Frames go out of one AF_PACKET socket bound with protocol 0, so the socket
// never receives anything and costs nothing between rounds. The socket lives
// in the network namespace of the thread that called NewAnnouncer: callers
// working with namespaces must create the Announcer from a thread that is in
// the right one. If the interface is deleted, Announce fails from then on and
// the Announcer must be created again.
//
// An Announcer is safe for concurrent use. Repeating rounds is the caller's
// job.
type Announcer struct {
	ifname string

	mu   sync.Mutex
	conn *packet.Conn
	mac  net.HardwareAddr // at open; replaced by the socket's current address when readable
}

// NewAnnouncer opens the sending socket on ifname (in the calling thread's
// network namespace). The interface must have an Ethernet (48-bit) address.
func NewAnnouncer(ifname string) (*Announcer, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("vrrp: announcer: interface %q: %w", ifname, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("vrrp: announcer: interface %s has no Ethernet address (%q); gratuitous ARP/NA need one", ifname, ifi.HardwareAddr)
	}
	c, err := packet.Listen(ifi, packet.Raw, 0, nil)
	if err != nil {
		return nil, fmt.Errorf("vrrp: announcer: open packet socket on %s: %w", ifname, err)
	}
	return &Announcer{ifname: ifname, conn: c, mac: ifi.HardwareAddr}, nil
}

// hwAddr returns the interface's MAC as the kernel reports it now, so an
// address changed after NewAnnouncer (bond failover) is announced correctly.
func (a *Announcer) hwAddr() net.HardwareAddr {
	rc, err := a.conn.SyscallConn()
	if err != nil {
		return a.mac
	}
	var sa unix.Sockaddr
	var serr error
	if err := rc.Control(func(fd uintptr) { sa, serr = unix.Getsockname(int(fd)) }); err != nil || serr != nil {
		return a.mac
	}
	if ll, ok := sa.(*unix.SockaddrLinklayer); ok && ll.Halen == 6 {
		mac := make(net.HardwareAddr, 6)
		copy(mac, ll.Addr[:6])
		a.mac = mac
	}
	return a.mac
}

// Announce sends one round of gratuitous ARP (IPv4 VIPs) and unsolicited NA
// (IPv6 VIPs). It tries every VIP and returns all failures joined.
func (a *Announcer) Announce(vips []netip.Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn == nil {
		return fmt.Errorf("vrrp: announce on %s: %w", a.ifname, net.ErrClosed)
	}
	mac := a.hwAddr()
	var errs []error
	for _, vip := range vips {
		frames, err := announceFrames(mac, vip)
		if err == nil {
			for _, f := range frames {
				if _, werr := a.conn.WriteTo(f, &packet.Addr{HardwareAddr: net.HardwareAddr(f[:6])}); werr != nil {
					err = werr
					break
				}
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("vrrp: announce %s on %s: %w", vip, a.ifname, err))
		}
	}
	return errors.Join(errs...)
}

// Close closes the socket. Announce fails afterwards.
func (a *Announcer) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn == nil {
		return nil
	}
	err := a.conn.Close()
	a.conn = nil
	return err
}

// announceFrames returns the frames of one round for vip.
func announceFrames(mac net.HardwareAddr, vip netip.Addr) ([][]byte, error) {
	vip = vip.Unmap()
	if vip.Is4() {
		req, err := garpFrame(mac, vip)
		if err != nil {
			return nil, err
		}
		rep, err := garpReplyFrame(mac, vip)
		if err != nil {
			return nil, err
		}
		return [][]byte{req, rep}, nil
	}
	na, err := unsolicitedNAFrame(mac, vip)
	if err != nil {
		return nil, err
	}
	return [][]byte{na}, nil
}

func checkAnnounceMAC(mac net.HardwareAddr) error {
	if len(mac) != 6 {
		return fmt.Errorf("hardware address %q is not a 48-bit Ethernet address", mac)
	}
	return nil
}

// announceEthHeader appends a 14-byte Ethernet II header.
func announceEthHeader(b []byte, dst, src net.HardwareAddr, etherType uint16) []byte {
	b = append(b, dst...)
	b = append(b, src...)
	return binary.BigEndian.AppendUint16(b, etherType)
}

// garpFrame builds the gratuitous ARP request for ip: broadcast, sender and
// target protocol address ip, sender hardware address mac, target hardware
// address zero (RFC 5227 §2.3), padded to the minimum Ethernet frame size.
func garpFrame(mac net.HardwareAddr, ip netip.Addr) ([]byte, error) {
	return garpBuild(arp.OperationRequest, mac, ip, net.HardwareAddr{0, 0, 0, 0, 0, 0})
}

// garpReplyFrame builds the gratuitous ARP reply for ip: broadcast, sender
// and target protocol address ip, sender and target hardware address mac
// (RFC 5944 §4.6; Linux only treats a reply as gratuitous when the two
// hardware addresses are equal).
func garpReplyFrame(mac net.HardwareAddr, ip netip.Addr) ([]byte, error) {
	return garpBuild(arp.OperationReply, mac, ip, mac)
}

func garpBuild(op arp.Operation, mac net.HardwareAddr, ip netip.Addr, tha net.HardwareAddr) ([]byte, error) {
	if err := checkAnnounceMAC(mac); err != nil {
		return nil, err
	}
	ip = ip.Unmap()
	if !ip.Is4() {
		return nil, fmt.Errorf("gratuitous ARP: %s is not an IPv4 address", ip)
	}
	p, err := arp.NewPacket(op, mac, ip, tha, ip)
	if err != nil {
		return nil, fmt.Errorf("gratuitous ARP for %s: %w", ip, err)
	}
	body, err := p.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("gratuitous ARP for %s: %w", ip, err)
	}
	b := make([]byte, 0, announceMinFrame)
	b = announceEthHeader(b, announceBroadcast, mac, announceEtherARP)
	b = append(b, body...)
	for len(b) < announceMinFrame {
		b = append(b, 0)
	}
	return b, nil
}

// unsolicitedNAFrame builds the unsolicited Neighbor Advertisement for ip:
// Ethernet to 33:33:00:00:00:01, IPv6 from ip to ff02::1 with hop limit 255,
// ICMPv6 NA with Override set, Router and Solicited clear, and a Target
// Link-Layer Address option carrying mac. The ICMPv6 checksum is filled in.
func unsolicitedNAFrame(mac net.HardwareAddr, ip netip.Addr) ([]byte, error) {
	if err := checkAnnounceMAC(mac); err != nil {
		return nil, err
	}
	if !ip.Is6() || ip.Is4In6() || ip.IsMulticast() || ip.IsUnspecified() {
		return nil, fmt.Errorf("unsolicited NA: %s is not a unicast IPv6 address", ip)
	}
	ip = ip.WithZone("")
	dst := netip.IPv6LinkLocalAllNodes()
	na := &ndp.NeighborAdvertisement{
		Override:      true,
		TargetAddress: ip,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}},
	}
	icmp, err := ndp.MarshalMessageChecksum(na, ip, dst)
	if err != nil {
		return nil, fmt.Errorf("unsolicited NA for %s: %w", ip, err)
	}
	b := make([]byte, 0, announceEthHdrLen+40+len(icmp))
	b = announceEthHeader(b, announceAllNodesMAC, mac, announceEtherIPv6)
	b = append(b, 0x60, 0, 0, 0) // version 6, traffic class 0, flow label 0
	b = binary.BigEndian.AppendUint16(b, uint16(len(icmp)))
	b = append(b, unix.IPPROTO_ICMPV6, 255) // next header, hop limit (RFC 4861 requires 255)
	b = append(b, ip.AsSlice()...)
	b = append(b, dst.AsSlice()...)
	b = append(b, icmp...)
	return b, nil
}
