package preflight

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"appliance/internal/cluster"
)

// DHCPOffer is one DHCPOFFER received for the throwaway client.
type DHCPOffer struct {
	// Server is the server identifier (option 54), else the packet's source.
	Server netip.Addr `json:"server"`
	// Source is the IP source address of the offer.
	Source netip.Addr `json:"source"`
	// Offered is the address offered (yiaddr).
	Offered netip.Addr `json:"offered"`
}

// DHCPObservation is what a DISCOVER from a throwaway MAC brought back.
type DHCPObservation struct {
	Iface  string
	MAC    net.HardwareAddr // the throwaway client's
	Wait   time.Duration    // how long offers were collected
	Offers []DHCPOffer
	Err    error
}

// DecideDHCP fails when a server other than this cluster's own answered:
// nodes booting on the segment would take whichever offer comes first.
// Offers from a configured node's address are this cluster's appliance DHCP
// and pass.
func DecideDHCP(cfg *cluster.Config, o DHCPObservation) Result {
	if o.Err != nil {
		return warn(IDDHCP, "no DHCP DISCOVER sent on %s: %v", o.Iface, o.Err)
	}
	var foreign, ours []string
	seen := map[netip.Addr]bool{}
	for _, of := range o.Offers {
		if seen[of.Server] {
			continue
		}
		seen[of.Server] = true
		desc := of.Server.String()
		if of.Source.IsValid() && of.Source != of.Server {
			desc += " (from " + of.Source.String() + ")"
		}
		if of.Offered.IsValid() {
			desc += " offering " + of.Offered.String()
		}
		if n, ok := cfg.NodeByAddr(of.Server); ok {
			ours = append(ours, fmt.Sprintf("%s (node %s)", desc, n.Name))
			continue
		}
		foreign = append(foreign, desc)
	}
	slices.Sort(foreign)
	d := map[string]any{"interface": o.Iface, "clientMAC": o.MAC.String(), "offers": o.Offers}
	if len(foreign) > 0 {
		return fail(IDDHCP, "another DHCP server answers on %s: %s; nodes would take its offer instead of their reservation: stop it, or make it ignore the nodes' MACs",
			o.Iface, strings.Join(foreign, ", ")).with(d)
	}
	if len(ours) > 0 {
		return pass(IDDHCP, "only this cluster's DHCP answers on %s: %s", o.Iface, strings.Join(ours, ", ")).with(d)
	}
	return pass(IDDHCP, "no DHCP server answered a DISCOVER from %s on %s within %s", o.MAC, o.Iface, o.Wait).with(d)
}
