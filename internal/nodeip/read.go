package nodeip

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Read lists the links, addresses and main-table routes that runtimecfg
// reads, through h (nil: a handle in the caller's network namespace).
func Read(h *netlink.Handle) (State, error) {
	if h == nil {
		nh, err := netlink.NewHandle()
		if err != nil {
			return State{}, fmt.Errorf("nodeip: netlink: %w", err)
		}
		defer nh.Close()
		h = nh
	}
	var s State
	links, err := h.LinkList()
	if err != nil {
		return State{}, fmt.Errorf("nodeip: list links: %w", err)
	}
	for _, l := range links {
		attrs := l.Attrs()
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return State{}, fmt.Errorf("nodeip: addresses of %s: %w", attrs.Name, err)
		}
		link := Link{Index: attrs.Index, Name: attrs.Name}
		for _, a := range addrs {
			p, ok := prefix(a.IPNet)
			if !ok {
				continue
			}
			link.Addrs = append(link.Addrs, Addr{
				Prefix:     p,
				Label:      a.Label,
				Deprecated: a.PreferedLft == 0,
				Unbindable: a.Flags&unix.IFA_F_DADFAILED != 0 ||
					(a.Flags&unix.IFA_F_TENTATIVE != 0 && a.Flags&unix.IFA_F_OPTIMISTIC == 0),
			})
		}
		s.Links = append(s.Links, link)
	}
	routes, err := h.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return State{}, fmt.Errorf("nodeip: list routes: %w", err)
	}
	for _, r := range routes {
		rt := Route{LinkIndex: r.LinkIndex, Priority: r.Priority, Protocol: int(r.Protocol)}
		if p, ok := prefix(r.Dst); ok {
			rt.Dst = p
		}
		if gw, ok := netip.AddrFromSlice(r.Gw); ok {
			rt.Gw = gw.Unmap()
		}
		s.Routes = append(s.Routes, rt)
	}
	return s, nil
}

// prefix converts an address with its mask, keeping an IPv4 address
// IPv4 (the kernel hands 4 bytes, a net.IPNet may carry 16).
func prefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	if bits == 32 {
		ip = ip.Unmap()
	}
	if bits == 0 || (bits == 32) != ip.Is4() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(ip, ones), true
}
