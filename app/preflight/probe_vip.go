package preflight

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
)

const (
	etherTypeARP = 0x0806
	ethHdrLen    = 14
	minFrame     = 60
	// probeRounds is how many times each VIP is probed within the wait:
	// RFC 5227 sends three probes, as one may be lost.
	probeRounds = 3
)

var (
	broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	zeroMAC      = net.HardwareAddr{0, 0, 0, 0, 0, 0}
)

// probeFrame builds an RFC 5227 ARP probe for ip: a broadcast request with
// sender protocol address 0.0.0.0 (so no neighbour cache learns anything
// from it) and target hardware address zero.
func probeFrame(mac net.HardwareAddr, ip netip.Addr) ([]byte, error) {
	p, err := arp.NewPacket(arp.OperationRequest, mac, netip.IPv4Unspecified(), zeroMAC, ip)
	if err != nil {
		return nil, fmt.Errorf("ARP probe for %s: %w", ip, err)
	}
	body, err := p.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("ARP probe for %s: %w", ip, err)
	}
	b := make([]byte, 0, minFrame)
	b = append(b, broadcastMAC...)
	b = append(b, mac...)
	b = binary.BigEndian.AppendUint16(b, etherTypeARP)
	b = append(b, body...)
	for len(b) < minFrame {
		b = append(b, 0)
	}
	return b, nil
}

// arpClaim decodes an Ethernet frame and returns who claims which IPv4
// address in it: the sender of any ARP packet with a sender protocol
// address (a reply to our probe, or a host announcing the address). Frames
// from self, probes (sender 0.0.0.0) and anything malformed give ok=false.
func arpClaim(frame []byte, self net.HardwareAddr) (mac net.HardwareAddr, ip netip.Addr, ok bool) {
	if len(frame) < ethHdrLen+28 || binary.BigEndian.Uint16(frame[12:14]) != etherTypeARP {
		return nil, netip.Addr{}, false
	}
	var p arp.Packet
	if err := p.UnmarshalBinary(frame[ethHdrLen:]); err != nil {
		return nil, netip.Addr{}, false
	}
	if bytes.Equal(p.SenderHardwareAddr, self) || !p.SenderIP.Is4() || p.SenderIP.IsUnspecified() {
		return nil, netip.Addr{}, false
	}
	return slices.Clone(p.SenderHardwareAddr), p.SenderIP, true
}

// claims collects, per VIP, the distinct MACs that claimed it.
type claims struct {
	mu  sync.Mutex
	got map[netip.Addr][]net.HardwareAddr
}

func (c *claims) add(ip netip.Addr, mac net.HardwareAddr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.got[ip] {
		if bytes.Equal(m, mac) {
			return
		}
	}
	c.got[ip] = append(c.got[ip], mac)
}

// ProbeVIPs asks the segment on ifi whether anyone holds vips: RFC 5227 ARP
// probes for IPv4, neighbour solicitations for IPv6, each sent probeRounds
// times within wait. It returns the MACs that answered per VIP; an error
// for one family leaves the other's answers intact and is returned per VIP.
func ProbeVIPs(ctx context.Context, ifi *net.Interface, vips []netip.Addr, wait time.Duration) (map[netip.Addr][]net.HardwareAddr, map[netip.Addr]error) {
	c := &claims{got: map[netip.Addr][]net.HardwareAddr{}}
	errs := map[netip.Addr]error{}
	var v4, v6 []netip.Addr
	for _, v := range vips {
		if v.Is4() {
			v4 = append(v4, v)
		} else {
			v6 = append(v6, v)
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	setErr := func(list []netip.Addr, err error) {
		mu.Lock()
		defer mu.Unlock()
		for _, v := range list {
			errs[v] = err
		}
	}
	if len(v4) > 0 {
		wg.Go(func() {
			if err := probeARP(ctx, ifi, v4, wait, c); err != nil {
				setErr(v4, err)
			}
		})
	}
	if len(v6) > 0 {
		wg.Go(func() {
			if err := probeNDP(ctx, ifi, v6, wait, c); err != nil {
				setErr(v6, err)
			}
		})
	}
	wg.Wait()
	return c.got, errs
}

func probeARP(ctx context.Context, ifi *net.Interface, vips []netip.Addr, wait time.Duration, c *claims) error {
	if len(ifi.HardwareAddr) != 6 {
		return fmt.Errorf("interface %s has no Ethernet address", ifi.Name)
	}
	conn, err := packet.Listen(ifi, packet.Raw, etherTypeARP, nil)
	if err != nil {
		return fmt.Errorf("ARP socket on %s: %w", ifi.Name, err)
	}
	defer conn.Close()
	want := map[netip.Addr]bool{}
	for _, v := range vips {
		want[v] = true
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1514)
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				return // the deadline set below, or a socket that cannot read any more
			}
			if mac, ip, ok := arpClaim(buf[:n], ifi.HardwareAddr); ok && want[ip] {
				c.add(ip, mac)
			}
		}
	}()
	sendErr := roundsWithin(ctx, wait, func() error {
		for _, v := range vips {
			f, err := probeFrame(ifi.HardwareAddr, v)
			if err != nil {
				return err
			}
			if _, err := conn.WriteTo(f, &packet.Addr{HardwareAddr: broadcastMAC}); err != nil {
				return fmt.Errorf("send ARP probe for %s on %s: %w", v, ifi.Name, err)
			}
		}
		return nil
	})
	_ = conn.SetReadDeadline(time.Unix(1, 0))
	<-done
	return sendErr
}

// roundsWithin calls send probeRounds times spread over wait, then waits
// out the rest of wait for late answers. It stops early when ctx ends.
func roundsWithin(ctx context.Context, wait time.Duration, send func() error) error {
	end := time.Now().Add(wait)
	gap := wait / (probeRounds + 1)
	for i := range probeRounds {
		if err := send(); err != nil {
			return err
		}
		next := gap
		if i == probeRounds-1 {
			next = time.Until(end)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(next):
		}
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// probeNDP sends neighbour solicitations for vips from the interface's
// link-local address and records who advertises them.
func probeNDP(ctx context.Context, ifi *net.Interface, vips []netip.Addr, wait time.Duration, c *claims) error {
	conn, _, err := ndp.Listen(ifi, ndp.LinkLocal)
	if err != nil {
		return fmt.Errorf("NDP socket on %s: %w", ifi.Name, err)
	}
	defer conn.Close()
	want := map[netip.Addr]bool{}
	for _, v := range vips {
		want[v] = true
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, _, _, err := conn.ReadFrom()
			if err != nil {
				var oe *net.OpError
				if errors.As(err, &oe) || errors.Is(err, net.ErrClosed) || isTimeout(err) {
					return // the deadline set below, or a socket that cannot read any more
				}
				continue // a message ndp could not parse: drop it
			}
			na, ok := m.(*ndp.NeighborAdvertisement)
			if !ok || !want[na.TargetAddress.WithZone("")] {
				continue
			}
			mac := net.HardwareAddr(nil)
			for _, o := range na.Options {
				if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target {
					mac = lla.Addr
				}
			}
			if mac == nil || bytes.Equal(mac, ifi.HardwareAddr) {
				continue
			}
			c.add(na.TargetAddress.WithZone(""), slices.Clone(mac))
		}
	}()
	sendErr := roundsWithin(ctx, wait, func() error {
		for _, v := range vips {
			dst, err := ndp.SolicitedNodeMulticast(v)
			if err != nil {
				return fmt.Errorf("NS for %s: %w", v, err)
			}
			ns := &ndp.NeighborSolicitation{
				TargetAddress: v,
				Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: ifi.HardwareAddr}},
			}
			if err := conn.WriteTo(ns, nil, dst); err != nil {
				return fmt.Errorf("send NS for %s on %s: %w", v, ifi.Name, err)
			}
		}
		return nil
	})
	_ = conn.SetReadDeadline(time.Unix(1, 0))
	<-done
	return sendErr
}
