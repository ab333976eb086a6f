package preflight

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
)

// ThrowawayMAC returns a random locally administered unicast MAC, so the
// DISCOVER matches no reservation anywhere and leaves no lease that could
// block a real host.
func ThrowawayMAC() net.HardwareAddr {
	mac := make(net.HardwareAddr, 6)
	_, _ = rand.Read(mac)
	mac[0] = mac[0]&^0x01 | 0x02
	return mac
}

// offerFrom decodes a DHCP message and returns it as an offer when it is a
// DHCPOFFER for transaction xid; anything else (requests of other clients,
// ACKs, garbage) gives ok=false.
func offerFrom(b []byte, src netip.Addr, xid dhcpv4.TransactionID) (DHCPOffer, bool) {
	m, err := dhcpv4.FromBytes(b)
	if err != nil || m.OpCode != dhcpv4.OpcodeBootReply || m.TransactionID != xid || m.MessageType() != dhcpv4.MessageTypeOffer {
		return DHCPOffer{}, false
	}
	o := DHCPOffer{Source: src, Server: src}
	if sid, ok := netip.AddrFromSlice(m.ServerIdentifier()); ok && m.ServerIdentifier() != nil {
		o.Server = sid.Unmap()
	}
	if y, ok := netip.AddrFromSlice(m.YourIPAddr); ok {
		o.Offered = y.Unmap()
	}
	return o, true
}

// DiscoverServers broadcasts a DISCOVER (broadcast flag set, so every
// server broadcasts its offer back) from mac on ifname and collects every
// offer that arrives within wait. The DISCOVER is sent twice, in case the
// first is lost; no REQUEST follows, so no server commits a lease.
func DiscoverServers(ctx context.Context, ifname string, mac net.HardwareAddr, wait time.Duration) ([]DHCPOffer, error) {
	conn, err := nclient4.NewRawUDPConn(ifname, dhcpv4.ClientPort)
	if err != nil {
		return nil, fmt.Errorf("DHCP client socket on %s: %w", ifname, err)
	}
	defer conn.Close()
	msg, err := dhcpv4.NewDiscovery(mac, dhcpv4.WithBroadcast(true))
	if err != nil {
		return nil, fmt.Errorf("build DISCOVER: %w", err)
	}
	dst := &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ServerPort}
	send := func() error {
		if _, err := conn.WriteTo(msg.ToBytes(), dst); err != nil {
			return fmt.Errorf("send DISCOVER on %s: %w", ifname, err)
		}
		return nil
	}
	if err := send(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetReadDeadline(deadline)
	resend := time.AfterFunc(wait/3, func() { _ = send() })
	defer resend.Stop()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	var offers []DHCPOffer
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if isTimeout(err) || errors.Is(err, net.ErrClosed) {
				return offers, nil
			}
			return offers, fmt.Errorf("read offers on %s: %w", ifname, err)
		}
		var src netip.Addr
		if ua, ok := from.(*net.UDPAddr); ok {
			src, _ = netip.AddrFromSlice(ua.IP)
			src = src.Unmap()
		}
		if o, ok := offerFrom(buf[:n], src, msg.TransactionID); ok {
			offers = append(offers, o)
		}
	}
}
