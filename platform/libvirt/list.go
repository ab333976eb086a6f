package libvirt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"appliance/platform"
)

// marked is a domain with our mark and its XML.
type marked struct {
	Dom  golibvirt.Domain
	Mark Mark
	XML  string
}

// allMarked reads every domain's mark; foreign domains come back with
// Foreign set in the markedDomain view.
func (p *Provider) allMarked() ([]marked, []markedDomain, error) {
	doms, _, err := p.l.ConnectListAllDomains(1, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("libvirt: list domains: %w", err)
	}
	var ours []marked
	var view []markedDomain
	for _, d := range doms {
		doc, err := p.l.DomainGetXMLDesc(d, golibvirt.DomainXMLInactive)
		if isCode(err, golibvirt.ErrNoDomain) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, nil, fmt.Errorf("libvirt: domain %s XML: %w", d.Name, err)
		}
		mk, err := markFromDomainXML(doc)
		if errors.Is(err, errNoMark) {
			view = append(view, markedDomain{Name: d.Name, Foreign: true})
			continue
		}
		if err != nil {
			// A domain whose metadata we cannot read is not ours to touch.
			p.log.Warn("unreadable domain metadata; treating as foreign", "domain", d.Name, "err", err)
			view = append(view, markedDomain{Name: d.Name, Foreign: true})
			continue
		}
		ours = append(ours, marked{Dom: d, Mark: mk, XML: doc})
		view = append(view, markedDomain{Name: d.Name, Mark: mk})
	}
	return ours, view, nil
}

// List returns infraID's node VMs (not the image marker), sorted by name.
// Addresses come from the network's DHCP leases, else from the guest agent
// with a short timeout; a VM that is off or reports nothing has none.
func (p *Provider) List(ctx context.Context, infraID string) ([]platform.VM, error) {
	ours, _, err := p.allMarked()
	if err != nil {
		return nil, err
	}
	var vms []platform.VM
	var doms []golibvirt.Domain
	for _, o := range ours {
		if o.Mark.InfraID != infraID || o.Mark.Kind != kindNode {
			continue
		}
		vm := platform.VM{Name: o.Dom.Name, Node: o.Mark.Node, Complete: o.Mark.Complete, Power: platform.PowerUnknown}
		var dx libvirtxml.Domain
		if err := dx.Unmarshal(o.XML); err == nil && dx.Devices != nil && len(dx.Devices.Interfaces) > 0 && dx.Devices.Interfaces[0].MAC != nil {
			vm.MAC, _ = net.ParseMAC(dx.Devices.Interfaces[0].MAC.Address)
		}
		state, _, err := p.l.DomainGetState(o.Dom, 0)
		if err == nil {
			vm.Power = powerOf(golibvirt.DomainState(state))
		}
		vms = append(vms, vm)
		doms = append(doms, o.Dom)
	}
	// Address queries may wait on a guest agent: run them side by side.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range vms {
		if vms[i].Power != platform.PowerRunning || ctx.Err() != nil {
			continue
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			vms[i].Addresses = p.addresses(ctx, doms[i], vms[i].MAC)
		}(i)
	}
	wg.Wait()
	sort.Slice(vms, func(i, j int) bool { return vms[i].Name < vms[j].Name })
	return vms, ctx.Err()
}

func powerOf(s golibvirt.DomainState) platform.Power {
	switch s {
	case golibvirt.DomainRunning, golibvirt.DomainBlocked, golibvirt.DomainShutdown:
		return platform.PowerRunning
	case golibvirt.DomainPaused, golibvirt.DomainPmsuspended:
		return platform.PowerPaused
	case golibvirt.DomainShutoff, golibvirt.DomainCrashed:
		return platform.PowerStopped
	}
	return platform.PowerUnknown
}

// addresses asks the network's DHCP leases (network mode only), then the
// hypervisor host's ARP table (bridges, where libvirt serves no DHCP),
// then the guest agent.
func (p *Provider) addresses(ctx context.Context, d golibvirt.Domain, mac net.HardwareAddr) []netip.Addr {
	if p.opts.Network != "" {
		if a := p.ifaceAddrs(ctx, d, golibvirt.DomainInterfaceAddressesSrcLease, mac, 5*time.Second); len(a) > 0 {
			return a
		}
	}
	if a := p.ifaceAddrs(ctx, d, golibvirt.DomainInterfaceAddressesSrcArp, mac, 5*time.Second); len(a) > 0 {
		return a
	}
	return p.ifaceAddrs(ctx, d, golibvirt.DomainInterfaceAddressesSrcAgent, mac, p.opts.AgentTimeout)
}

// ifaceAddrs runs one address query, giving up after timeout: go-libvirt
// calls take no context, so a slow agent query is left to finish alone.
func (p *Provider) ifaceAddrs(ctx context.Context, d golibvirt.Domain, src golibvirt.DomainInterfaceAddressesSource, mac net.HardwareAddr, timeout time.Duration) []netip.Addr {
	ch := make(chan []golibvirt.DomainInterface, 1)
	go func() {
		ifs, err := p.l.DomainInterfaceAddresses(d, uint32(src), 0)
		if err != nil {
			p.log.Debug("no interface addresses", "domain", d.Name, "source", src, "err", err)
		}
		ch <- ifs
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ifs := <-ch:
		return addrsFor(ifs, mac)
	case <-t.C:
		return nil
	case <-ctx.Done():
		return nil
	}
}

// addrsFor picks the addresses of the interface with mac (all interfaces
// when mac is unknown or the source reports none), loopback excluded.
func addrsFor(ifs []golibvirt.DomainInterface, mac net.HardwareAddr) []netip.Addr {
	var out []netip.Addr
	for _, ifc := range ifs {
		if len(mac) > 0 && len(ifc.Hwaddr) > 0 {
			hw, err := net.ParseMAC(ifc.Hwaddr[0])
			if err != nil || hw.String() != mac.String() {
				continue
			}
		}
		for _, a := range ifc.Addrs {
			ip, err := netip.ParseAddr(a.Addr)
			if err != nil || ip.IsLoopback() || ip.IsLinkLocalUnicast() {
				continue
			}
			out = append(out, ip)
		}
	}
	return out
}
