package vrrp

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// maxLabelLen is the longest IPv4 address label the kernel keeps (IFNAMSIZ-1).
const maxLabelLen = 15

// VIPManager installs and removes virtual IPs on one interface through
// netlink. It is safe for concurrent use.
//
// IPv4 VIPs carry the label "<ifname>:<label>" so that `ip addr` shows them
// apart from the node's own addresses and so that RemoveStale can find what
// an earlier run left behind. IPv6 has no address labels; IPv6 VIPs are added
// with IFA_F_NODAD (a VIP that just moved here must answer at once, and DAD
// would see the previous owner and mark it dadfailed) and, unless
// AllowIPv6Source is given, with a preferred lifetime of 0 ("deprecated") so
// the kernel never picks the VIP as the source of the node's own
// connections: they would break when the VIP moves away.
type VIPManager struct {
	h        *netlink.Handle
	ifname   string
	label    string // full IPv4 label; empty when none can be told apart from ifname
	v6Prefer bool
	mu       sync.Mutex // serialises list-then-change sequences
}

// VIPOption changes how a VIPManager installs addresses.
type VIPOption func(*VIPManager)

// AllowIPv6Source installs IPv6 VIPs as preferred addresses, which makes them
// eligible as source addresses for the node's own traffic. Only useful when
// something must originate traffic from the VIP itself.
func AllowIPv6Source() VIPOption {
	return func(m *VIPManager) { m.v6Prefer = true }
}

// NewVIPManager returns a manager for the VIPs on ifname. h selects the
// network namespace; nil means the namespace of the calling thread (normally
// the process's). label is the IPv4 label suffix, e.g. "vip": addresses get
// the label ifname+":"+label cut to 15 bytes, because the kernel keeps at
// most 15 and requires the label to start with the interface name. When the
// interface name is so long that no suffix fits, or label is empty, IPv4 VIPs
// are added without a label and RemoveStale matches by address only.
func NewVIPManager(h *netlink.Handle, ifname string, label string, opts ...VIPOption) (*VIPManager, error) {
	if ifname == "" {
		return nil, errors.New("vrrp: VIP manager: interface name is empty")
	}
	if h == nil {
		// A Handle without sockets opens one per request in the calling
		// thread's namespace, exactly like the package-level functions.
		h = &netlink.Handle{}
	}
	m := &VIPManager{h: h, ifname: ifname, label: vipLabel(ifname, label)}
	for _, o := range opts {
		o(m)
	}
	if _, err := m.link(); err != nil {
		return nil, fmt.Errorf("vrrp: VIP manager: %w", err)
	}
	return m, nil
}

// vipLabel builds the IPv4 address label. It returns "" when the result could
// not be told apart from the interface's own label, because RemoveStale
// deletes every address carrying our label and must never touch the node's.
func vipLabel(ifname, suffix string) string {
	if suffix == "" {
		return ""
	}
	l := ifname + ":" + suffix
	if len(l) > maxLabelLen {
		l = l[:maxLabelLen]
	}
	if len(l) <= len(ifname)+1 {
		// Nothing of the suffix survived the cut ("ifname" or "ifname:").
		return ""
	}
	return l
}

// Label returns the IPv4 address label in use, or "" when VIPs are unlabelled.
func (m *VIPManager) Label() string { return m.label }

// link looks the interface up on every call: an interface that is deleted and
// created again (a bond rebuilt by NetworkManager) gets a new index.
func (m *VIPManager) link() (netlink.Link, error) {
	l, err := m.h.LinkByName(m.ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", m.ifname, err)
	}
	return l, nil
}

func normPrefix(p netip.Prefix) (netip.Prefix, error) {
	if !p.IsValid() {
		return netip.Prefix{}, errors.New("invalid prefix")
	}
	a := p.Addr()
	if a.Is4In6() {
		bits := p.Bits() - 96
		if bits < 0 {
			return netip.Prefix{}, fmt.Errorf("prefix %s: IPv4-mapped prefix shorter than /96", p)
		}
		p = netip.PrefixFrom(a.Unmap(), bits)
	}
	return p, nil
}

// nlAddr converts p to the netlink form (address with host bits kept).
func nlAddr(p netip.Prefix) *netlink.Addr {
	a := p.Addr()
	return &netlink.Addr{IPNet: &net.IPNet{
		IP:   net.IP(a.AsSlice()),
		Mask: net.CIDRMask(p.Bits(), a.BitLen()),
	}}
}

// Add installs p on the interface. Adding an address that is already present
// succeeds (and refreshes its flags).
func (m *VIPManager) Add(p netip.Prefix) error {
	np, err := normPrefix(p)
	if err != nil {
		return fmt.Errorf("vrrp: add VIP %s on %s: %w", p, m.ifname, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.link()
	if err != nil {
		return fmt.Errorf("vrrp: add VIP %s on %s: %w", np, m.ifname, err)
	}
	a := nlAddr(np)
	if np.Addr().Is4() {
		a.Label = m.label
	} else {
		a.Flags = unix.IFA_F_NODAD
		if !m.v6Prefer {
			a.ValidLft = math.MaxUint32 // forever
			a.PreferedLft = 0           // deprecated: never chosen as source
		}
	}
	// Replace rather than add: it is idempotent and updates the flags of a
	// copy left with other ones.
	if err := m.h.AddrReplace(l, a); err != nil {
		return fmt.Errorf("vrrp: add VIP %s on %s: %w", np, m.ifname, err)
	}
	return nil
}

// Remove deletes p (same address and prefix length) from the interface.
// Removing an address that is not present succeeds.
func (m *VIPManager) Remove(p netip.Prefix) error {
	np, err := normPrefix(p)
	if err != nil {
		return fmt.Errorf("vrrp: remove VIP %s on %s: %w", p, m.ifname, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.link()
	if err != nil {
		return fmt.Errorf("vrrp: remove VIP %s on %s: %w", np, m.ifname, err)
	}
	if err := m.del(l, nlAddr(np)); err != nil {
		return fmt.Errorf("vrrp: remove VIP %s on %s: %w", np, m.ifname, err)
	}
	return nil
}

// del deletes a and treats "not there" as success.
func (m *VIPManager) del(l netlink.Link, a *netlink.Addr) error {
	err := m.h.AddrDel(l, a)
	if errors.Is(err, unix.EADDRNOTAVAIL) { // the kernel's answer for both families
		return nil
	}
	return err
}

// Has reports whether p (same address and prefix length) is on the interface.
func (m *VIPManager) Has(p netip.Prefix) (bool, error) {
	np, err := normPrefix(p)
	if err != nil {
		return false, fmt.Errorf("vrrp: look up VIP %s on %s: %w", p, m.ifname, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	addrs, err := m.list()
	if err != nil {
		return false, fmt.Errorf("vrrp: look up VIP %s on %s: %w", np, m.ifname, err)
	}
	for _, a := range addrs {
		if a.prefix == np {
			return true, nil
		}
	}
	return false, nil
}

// List returns the interface's addresses with their prefix lengths.
func (m *VIPManager) List() ([]netip.Prefix, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	addrs, err := m.list()
	if err != nil {
		return nil, fmt.Errorf("vrrp: list addresses of %s: %w", m.ifname, err)
	}
	out := make([]netip.Prefix, len(addrs))
	for i, a := range addrs {
		out[i] = a.prefix
	}
	return out, nil
}

type listedAddr struct {
	prefix netip.Prefix
	label  string
	nl     netlink.Addr
}

func (m *VIPManager) list() ([]listedAddr, error) {
	l, err := m.link()
	if err != nil {
		return nil, err
	}
	raw, err := m.h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	out := make([]listedAddr, 0, len(raw))
	for _, a := range raw {
		if a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		bits, _ := a.Mask.Size()
		out = append(out, listedAddr{prefix: netip.PrefixFrom(ip, bits), label: a.Label, nl: a})
	}
	return out, nil
}

// RemoveStale cleans up what a crashed or killed run may have left: every
// address on the interface equal to one of vips whatever its prefix length,
// and every address carrying our label that is not in vips. Call it once at
// start, before any VIP is added. It returns what it removed; on error it
// keeps going and returns all failures joined.
//
// Note: deleting a primary IPv4 address also deletes the secondaries of its
// subnet unless net.ipv4.conf.<if>.promote_secondaries is set; a stale VIP is
// normally secondary to the node's own address, so this only matters when a
// VIP was installed before the node's address.
func (m *VIPManager) RemoveStale(vips []netip.Prefix) (removed []netip.Prefix, err error) {
	want := make(map[netip.Addr]bool, len(vips))
	for _, v := range vips {
		nv, err := normPrefix(v)
		if err != nil {
			return nil, fmt.Errorf("vrrp: remove stale VIPs on %s: %s: %w", m.ifname, v, err)
		}
		want[nv.Addr()] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	addrs, err := m.list()
	if err != nil {
		return nil, fmt.Errorf("vrrp: remove stale VIPs on %s: %w", m.ifname, err)
	}
	l, err := m.link()
	if err != nil {
		return nil, fmt.Errorf("vrrp: remove stale VIPs on %s: %w", m.ifname, err)
	}
	var errs []error
	for _, a := range addrs {
		ours := want[a.prefix.Addr()]
		labelled := m.label != "" && a.prefix.Addr().Is4() && a.label == m.label
		if !ours && !labelled {
			continue
		}
		d := &netlink.Addr{IPNet: a.nl.IPNet, Peer: a.nl.Peer}
		if err := m.del(l, d); err != nil {
			errs = append(errs, fmt.Errorf("vrrp: remove stale VIP %s on %s: %w", a.prefix, m.ifname, err))
			continue
		}
		removed = append(removed, a.prefix)
	}
	return removed, errors.Join(errs...)
}
