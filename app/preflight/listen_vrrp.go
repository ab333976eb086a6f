package preflight

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"appliance/vrrp"
)

// bindToDevice makes a socket see only ifname's traffic.
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

// decodeAdvert turns one received VRRP payload into an Advert with the
// project's codec; anything the codec rejects gives ok=false.
func decodeAdvert(payload []byte, src, dst netip.Addr) (Advert, bool) {
	p, err := vrrp.Parse(payload, src, dst)
	if err != nil {
		return Advert{}, false
	}
	return Advert{Source: src, VRID: p.VRID, Version: p.Version, Priority: p.Priority, Addrs: p.Addrs}, true
}

// ListenVRRP joins the VRRP multicast group on ifi (IPv4, and IPv6 when v6
// is set) and returns every advert heard within window.
func ListenVRRP(ctx context.Context, ifi *net.Interface, v6 bool, window time.Duration) ([]Advert, error) {
	ctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	var (
		mu   sync.Mutex
		out  []Advert
		errs []error
		wg   sync.WaitGroup
	)
	add := func(a Advert) {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, a)
	}
	lc := net.ListenConfig{Control: bindToDevice(ifi.Name)}
	pc4, err := lc.ListenPacket(ctx, "ip4:112", "0.0.0.0")
	if err != nil {
		return nil, fmt.Errorf("VRRP socket on %s: %w", ifi.Name, err)
	}
	rc, err := ipv4.NewRawConn(pc4)
	if err != nil {
		pc4.Close()
		return nil, fmt.Errorf("VRRP socket on %s: %w", ifi.Name, err)
	}
	defer rc.Close()
	if err := rc.JoinGroup(ifi, &net.IPAddr{IP: vrrp.MulticastGroupV4.AsSlice()}); err != nil {
		return nil, fmt.Errorf("join %s on %s: %w", vrrp.MulticastGroupV4, ifi.Name, err)
	}
	wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			h, payload, _, err := rc.ReadFrom(buf)
			if err != nil {
				return // deadline or closed
			}
			src, _ := netip.AddrFromSlice(h.Src)
			dst, _ := netip.AddrFromSlice(h.Dst)
			if a, ok := decodeAdvert(payload, src.Unmap(), dst.Unmap()); ok {
				add(a)
			}
		}
	})
	var pc6 *ipv6.PacketConn
	if v6 {
		raw, err := lc.ListenPacket(ctx, "ip6:112", "::")
		if err == nil {
			pc6 = ipv6.NewPacketConn(raw)
			defer pc6.Close()
			if err = pc6.SetControlMessage(ipv6.FlagDst, true); err == nil {
				err = pc6.JoinGroup(ifi, &net.IPAddr{IP: vrrp.MulticastGroupV6.AsSlice()})
			}
		}
		if err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("IPv6 VRRP socket on %s: %w", ifi.Name, err))
			mu.Unlock()
			pc6 = nil
		} else {
			wg.Go(func() {
				buf := make([]byte, 1500)
				for {
					n, cm, from, err := pc6.ReadFrom(buf)
					if err != nil {
						return
					}
					var src, dst netip.Addr
					if ia, ok := from.(*net.IPAddr); ok {
						src, _ = netip.AddrFromSlice(ia.IP)
					}
					if cm != nil {
						dst, _ = netip.AddrFromSlice(cm.Dst)
					}
					if a, ok := decodeAdvert(buf[:n], src.WithZone(""), dst); ok {
						add(a)
					}
				}
			})
		}
	}
	<-ctx.Done()
	_ = rc.SetReadDeadline(time.Unix(1, 0))
	if pc6 != nil {
		_ = pc6.SetReadDeadline(time.Unix(1, 0))
	}
	wg.Wait()
	return out, errors.Join(errs...)
}
