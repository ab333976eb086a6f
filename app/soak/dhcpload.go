package soak

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/vishvananda/netlink"

	"appliance/internal/netlab"
)

// dhcpEvent is one DHCP exchange of a client.
type dhcpEvent struct {
	At     time.Time `json:"at"`
	Client string    `json:"client"` // worker-0 (a reservation) or pool-N
	MAC    string    `json:"mac"`
	Op     string    `json:"op"` // "request" (discover, offer, request, ack) or "renew"
	Addr   string    `json:"addr,omitempty"`
	Server string    `json:"server,omitempty"`
	Err    string    `json:"err,omitempty"` // no answer
	// Violation breaks an invariant: a reserved address given to another
	// MAC, a reservation answered with another address, an acknowledged
	// lease refused (NAK) or moved before it ended.
	Violation string `json:"violation,omitempty"`
}

// dhcpClient is one machine asking for an address: a worker on its own
// eth0 (its reservation), or a macvlan of the DHCP node with a MAC of its
// own (the pool).
type dhcpClient struct {
	name     string
	n        *netlab.Node
	nd       *node // a worker's node: its client follows its address onto br-ex
	iface    string
	mac      net.HardwareAddr
	reserved netip.Addr // the reservation; invalid for a pool client

	lease  *nclient4.Lease
	addr   netip.Addr
	expiry time.Time
}

// dhcpLoad keeps every client's lease renewed every dhcpEvery.
type dhcpLoad struct {
	ctx      context.Context
	c        *cluster
	rec      *recorder
	every    time.Duration
	reserved map[netip.Addr]string // every reserved address → its MAC
	clients  []*dhcpClient
	wg       sync.WaitGroup
}

// poolClients is how many pool clients the DHCP node runs.
const poolClients = 3

func (l *dhcpLoad) setup() error {
	l.reserved = map[netip.Addr]string{}
	for _, nd := range l.c.nodes {
		l.reserved[nd.addr()] = nd.n.MAC.String()
	}
	for _, nd := range l.c.byRole(roleWorker) {
		l.clients = append(l.clients, &dhcpClient{name: nd.name, n: nd.n, nd: nd, iface: nd.n.Iface, mac: nd.n.MAC, reserved: nd.addr()})
	}
	h, err := l.c.dhcpNode.Handle()
	if err != nil {
		return err
	}
	defer h.Close()
	parent, err := h.LinkByName(l.c.dhcpNode.Iface)
	if err != nil {
		return err
	}
	for i := range poolClients {
		name := fmt.Sprintf("dh%d", i)
		mac := net.HardwareAddr{0x02, 0x50, 0x4f, 0x4f, 0x4c, byte(i + 1)}
		mv := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: parent.Attrs().Index, HardwareAddr: mac},
			Mode: netlink.MACVLAN_MODE_BRIDGE}
		if err := h.LinkAdd(mv); err != nil {
			return fmt.Errorf("soak: macvlan %s: %w", name, err)
		}
		link, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		if err := h.LinkSetUp(link); err != nil {
			return err
		}
		l.clients = append(l.clients, &dhcpClient{name: fmt.Sprintf("pool-%d", i), n: l.c.dhcpNode, iface: name, mac: mac})
	}
	return nil
}

func (l *dhcpLoad) run() {
	for i, cl := range l.clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			// Spread the clients over the period.
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(time.Duration(i) * l.every / time.Duration(len(l.clients))):
			}
			t := time.NewTicker(l.every)
			defer t.Stop()
			for {
				ev := l.exchange(cl)
				if l.ctx.Err() != nil {
					return // cut short by the soak's end: says nothing
				}
				l.rec.addDHCP(ev)
				select {
				case <-l.ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
}

func (l *dhcpLoad) wait() { l.wg.Wait() }

// exchange renews cl's lease, or asks for one when it has none (or it
// ended).
func (l *dhcpLoad) exchange(cl *dhcpClient) dhcpEvent {
	ev := dhcpEvent{At: time.Now(), Client: cl.name, MAC: cl.mac.String(), Op: "request"}
	if cl.lease != nil && time.Now().Before(cl.expiry) {
		ev.Op = "renew"
	}
	// A worker whose address moved onto br-ex asks from there, as its
	// NetworkManager does: its NIC is a bridge port then and sees nothing.
	iface := cl.iface
	if cl.nd != nil {
		cl.nd.mu.Lock()
		if cl.nd.brex {
			iface = "br-ex"
		}
		cl.nd.mu.Unlock()
	}
	var ack *dhcpv4.DHCPv4
	err := cl.n.Do(func() error {
		c, err := nclient4.New(iface, nclient4.WithHWAddr(cl.mac), nclient4.WithTimeout(time.Second), nclient4.WithRetry(3))
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
		defer cancel()
		if ev.Op == "request" {
			lease, err := c.Request(ctx)
			if err != nil {
				return err
			}
			cl.lease, ack = lease, lease.ACK
			return nil
		}
		// RENEWING as a client whose server may be gone: broadcast, and
		// any server's answer counts (the pool moves with the API VIP).
		req, err := dhcpv4.NewRenewFromAck(cl.lease.ACK)
		if err != nil {
			return err
		}
		resp, err := c.SendAndRead(ctx, nclient4.DefaultServers, req, nclient4.IsMessageType(dhcpv4.MessageTypeAck, dhcpv4.MessageTypeNak))
		if err != nil {
			return err
		}
		ack = resp
		return nil
	})
	var nak *nclient4.ErrNak
	switch {
	case errors.As(err, &nak):
		ack = nak.Nak
	case err != nil:
		ev.Err = err.Error()
		return ev
	}
	ev.Server = addrOf(ack.ServerIdentifier()).String()
	got := addrOf(ack.YourIPAddr)
	if ack.MessageType() == dhcpv4.MessageTypeNak {
		ev.Err = "NAK: " + ack.Message()
		if ev.Op == "renew" {
			ev.Violation = fmt.Sprintf("lease of %s (acknowledged, %s left) refused by %s", cl.addr, time.Until(cl.expiry).Round(time.Second), ev.Server)
		} else if cl.reserved.IsValid() {
			ev.Violation = fmt.Sprintf("reservation %s refused by %s", cl.reserved, ev.Server)
		}
		l.forget(cl)
		return ev
	}
	ev.Addr = got.String()
	switch mac, ok := l.reserved[got]; {
	case cl.reserved.IsValid() && got != cl.reserved:
		ev.Violation = fmt.Sprintf("reserved %s, answered %s", cl.reserved, got)
	case !cl.reserved.IsValid() && ok:
		ev.Violation = fmt.Sprintf("reserved address %s (MAC %s) given to %s", got, mac, cl.mac)
	case ev.Op == "renew" && got != cl.addr:
		ev.Violation = fmt.Sprintf("lease of %s (acknowledged, %s left) renewed as %s", cl.addr, time.Until(cl.expiry).Round(time.Second), got)
	}
	if ev.Op == "request" && cl.lease != nil {
		cl.lease.ACK = ack
	} else if cl.lease != nil {
		cl.lease = &nclient4.Lease{Offer: cl.lease.Offer, ACK: ack, CreationTime: time.Now()}
	}
	if !cl.reserved.IsValid() && got != cl.addr {
		l.hold(cl, got)
	}
	cl.addr = got
	cl.expiry = time.Now().Add(ack.IPAddressLeaseTime(time.Hour))
	return ev
}

// hold puts a pool client's address on its macvlan, as a machine
// configures what it leased: the server's ARP probe then sees it in use,
// and answers to the address reach the client.
func (l *dhcpLoad) hold(cl *dhcpClient, a netip.Addr) {
	h, err := cl.n.Handle()
	if err != nil {
		return
	}
	defer h.Close()
	link, err := h.LinkByName(cl.iface)
	if err != nil {
		return
	}
	if cl.addr.IsValid() {
		_ = h.AddrDel(link, &netlink.Addr{IPNet: &net.IPNet{IP: cl.addr.AsSlice(), Mask: net.CIDRMask(32, 32)}})
	}
	_ = h.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}})
}

// forget drops a refused lease: the client asks from scratch next time.
func (l *dhcpLoad) forget(cl *dhcpClient) {
	if !cl.reserved.IsValid() && cl.addr.IsValid() {
		if h, err := cl.n.Handle(); err == nil {
			if link, err := h.LinkByName(cl.iface); err == nil {
				_ = h.AddrDel(link, &netlink.Addr{IPNet: &net.IPNet{IP: cl.addr.AsSlice(), Mask: net.CIDRMask(32, 32)}})
			}
			h.Close()
		}
	}
	cl.lease, cl.addr, cl.expiry = nil, netip.Addr{}, time.Time{}
}

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip.To4())
	return a
}
