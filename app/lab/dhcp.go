package lab

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"

	"appliance/internal/netlab"
)

// dhcpPool is the lab's dynamic pool: host numbers .100 to .119 of the
// machine network, answered by the API VIP's holder alone.
func (r *run) dhcpPool() (netip.Addr, netip.Addr) {
	b := r.boot.IPv4.Masked().Addr().As4()
	b[3] = 100
	start := netip.AddrFrom4(b)
	b[3] = 119
	return start, netip.AddrFrom4(b)
}

// askDHCP runs a DHCP exchange (discover, offer, request, ack) from n's
// eth0 and says what it got and from whom. The address is not put on the
// interface: the lab's nodes keep theirs.
func (r *run) askDHCP(n *netlab.Node, why string) string {
	var got, server netip.Addr
	var lease time.Duration
	err := n.Do(func() error {
		c, err := nclient4.New(n.Iface, nclient4.WithTimeout(time.Second), nclient4.WithRetry(3))
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		defer cancel()
		l, err := c.Request(ctx)
		if err != nil {
			return err
		}
		got, _ = netip.AddrFromSlice(l.ACK.YourIPAddr.To4())
		server, _ = netip.AddrFromSlice(l.ACK.ServerIdentifier().To4())
		lease = l.ACK.IPAddressLeaseTime(0)
		return nil
	})
	var line string
	if err != nil {
		line = fmt.Sprintf("%s (%s, %s) asks DHCP: no answer: %v", r.names[n], n.MAC, why, err)
	} else {
		line = fmt.Sprintf("%s (%s, %s) asks DHCP: ACK %s for %s from %s (%s)", r.names[n], n.MAC, why, got, lease, r.nameOf(server), server)
	}
	r.say("%s", line)
	return line
}

// nameOf names the lab node owning addr, or "?".
func (r *run) nameOf(addr netip.Addr) string {
	for n, name := range r.names {
		if n.IPv4.Addr() == addr {
			return name
		}
	}
	return "?"
}
