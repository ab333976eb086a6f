package vrrp

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// pickSource chooses the address adverts are sent from among the interface's
// addresses: for IPv4 the current one while it is still there, else one
// inside a VIP's subnet, else any IPv4 address that is not a VIP; for IPv6 the
// link-local address (RFC 5798 5.1.2.1), except in unicast, where it is
// chosen as for IPv4 among the global addresses: peers know a node by the
// address it is configured with, and keepalived's unicast_src_ip is that
// address too. ok is false when there is none.
func pickSource(addrs []netip.Prefix, vips []netip.Prefix, v6, unicast bool, current netip.Addr) (netip.Addr, bool) {
	isVIP := func(a netip.Addr) bool {
		return slices.ContainsFunc(vips, func(v netip.Prefix) bool { return v.Addr() == a })
	}
	var inSubnet, fallback netip.Addr
	for _, p := range addrs {
		a := p.Addr().Unmap()
		if v6 && !unicast {
			if a.Is6() && a.IsLinkLocalUnicast() {
				if a == current || !inSubnet.IsValid() {
					inSubnet = a
				}
			}
			continue
		}
		if a.Is4() == v6 || isVIP(a) || (v6 && (a.IsLinkLocalUnicast() || a.IsLoopback())) {
			continue
		}
		if a == current {
			return a, true
		}
		if !inSubnet.IsValid() && slices.ContainsFunc(vips, func(v netip.Prefix) bool { return v.Masked().Contains(a) }) {
			inSubnet = a
		}
		if !fallback.IsValid() {
			fallback = a
		}
	}
	if inSubnet.IsValid() {
		return inSubnet, true
	}
	return fallback, fallback.IsValid()
}

// missingVIPs lists the VIPs (address and prefix length) not among addrs.
func missingVIPs(addrs []netip.Prefix, vips []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, v := range vips {
		if !slices.Contains(addrs, v) {
			out = append(out, v)
		}
	}
	return out
}

// Repair kinds, the label of appliance_vrrp_repairs_total.
const (
	repairVIP        = "vip_restored"       // a VIP deleted from under a master, put back
	repairSource     = "source_changed"     // the advert source address moved
	repairSourceGone = "source_lost"        // the advert source address vanished: FAULT
	repairInterface  = "interface_reopened" // sockets re-opened on a (new or re-created) interface
	repairReceiver   = "receiver_failed"    // the receive socket failed: FAULT until re-opened
)

// linkEvent is what the runner needs of a link change.
type linkEvent struct {
	index   int
	name    string
	up      bool
	deleted bool
}

// watchKernel follows link and address changes until ctx ends, telling the
// runner about links on links and about any address change on addrs (the
// runner lists its interface's addresses itself, so one notification covers
// a burst). A broken subscription is opened again with backoff, and the
// runner is told to look (an event may have been lost meanwhile).
func (r *runner) watchKernel(ctx context.Context, links chan<- linkEvent, addrs chan<- struct{}) {
	notify := func() {
		select {
		case addrs <- struct{}{}:
		default:
		}
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := r.subscribe(ctx, links, notify)
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("netlink subscription broke; subscribing again", "err", err, "retry_in", backoff)
		notify()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (r *runner) subscribe(ctx context.Context, links chan<- linkEvent, notify func()) error {
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	failed := make(chan error, 1)
	onErr := func(err error) {
		select {
		case failed <- err:
		default:
		}
	}
	lu := make(chan netlink.LinkUpdate, 16)
	au := make(chan netlink.AddrUpdate, 64)
	if err := netlink.LinkSubscribeWithOptions(lu, subCtx.Done(), netlink.LinkSubscribeOptions{ErrorCallback: onErr}); err != nil {
		return err
	}
	if err := netlink.AddrSubscribeWithOptions(au, subCtx.Done(), netlink.AddrSubscribeOptions{ErrorCallback: onErr}); err != nil {
		return err
	}
	notify() // whatever happened before the subscription
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		case u, ok := <-lu:
			if !ok {
				return errors.New("link subscription closed")
			}
			at := u.Attrs()
			ev := linkEvent{index: at.Index, name: at.Name, deleted: u.Header.Type == unix.RTM_DELLINK,
				up: operUp(at.OperState)}
			select {
			case links <- ev:
			case <-ctx.Done():
				return nil
			}
		case _, ok := <-au:
			if !ok {
				return errors.New("address subscription closed")
			}
			notify()
		}
	}
}

// operUp says whether a link in operational state s passes adverts: up, or
// unknown (interfaces that report no carrier, such as dummy ones).
func operUp(s netlink.LinkOperState) bool {
	return s == netlink.OperUp || s == netlink.OperUnknown
}

// linkUp reads whether the link with index passes adverts now.
func linkUp(index int) (bool, error) {
	l, err := netlink.LinkByIndex(index)
	if err != nil {
		return false, err
	}
	return operUp(l.Attrs().OperState), nil
}
