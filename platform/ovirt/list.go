package ovirt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"
	"golang.org/x/sync/errgroup"

	"appliance/platform"
)

// owned is a VM that carries the cluster's mark or tag.
type owned struct {
	vm ovirtclient.VM
	m  mark
}

// ownedVMs finds the VMs carrying infraID's description mark or its tag
// (the tag alone covers VMs tagged by other tools for the same cluster).
func (p *Provider) ownedVMs(ctx context.Context, infraID string) ([]owned, error) {
	if infraID == "" {
		// Every name and mark is "<infraID>-...": an empty one would
		// match strangers' resources by their suffix alone.
		return nil, errors.New("empty infra ID")
	}
	e := p.eng(ctx)
	all, err := e.ListVMs()
	if err != nil {
		return nil, fmt.Errorf("list VMs: %w", err)
	}
	var out []owned
	seen := map[ovirtclient.VMID]bool{}
	for _, vm := range all {
		if m, ok := parseMark(vm.Description()); ok && m.InfraID == infraID {
			out = append(out, owned{vm, m})
			seen[vm.ID()] = true
		}
	}
	tagID, ok, err := p.findTag(ctx, infraID)
	if err != nil || !ok {
		return out, err
	}
	// An engine answers the tag search itself; the mock ignores the tag
	// criterion, so every hit is confirmed against the VM's tags.
	tagged, err := e.SearchVMs(ovirtclient.VMSearchParams().WithTag(infraID))
	if err != nil {
		return nil, fmt.Errorf("search VMs tagged %s: %w", infraID, err)
	}
	for _, vm := range tagged {
		if seen[vm.ID()] {
			continue
		}
		tags, err := e.ListVMTags(vm.ID())
		if err != nil {
			if notFound(err) {
				continue
			}
			return nil, fmt.Errorf("list tags of VM %s: %w", vm.Name(), err)
		}
		if slices.ContainsFunc(tags, func(t ovirtclient.Tag) bool { return t.ID() == tagID }) {
			out = append(out, owned{vm, mark{InfraID: infraID}})
			seen[vm.ID()] = true
		}
	}
	return out, nil
}

// List returns the cluster's VMs with their power state, MAC and the
// addresses the guest agent reports; it does not wait for any of them.
func (p *Provider) List(ctx context.Context, infraID string) ([]platform.VM, error) {
	vms, err := p.ownedVMs(ctx, infraID)
	if err != nil {
		return nil, p.s.err(fmt.Errorf("ovirt: list %s: %w", infraID, err))
	}
	vms = slices.DeleteFunc(vms, func(o owned) bool { return o.m.Role == roleBuilder })
	out := make([]platform.VM, len(vms))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.opts.Workers)
	for i, o := range vms {
		g.Go(func() error {
			v, err := p.describe(gctx, o)
			out[i] = v
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, p.s.err(fmt.Errorf("ovirt: list %s: %w", infraID, err))
	}
	slices.SortFunc(out, func(a, b platform.VM) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (p *Provider) describe(ctx context.Context, o owned) (platform.VM, error) {
	e := p.eng(ctx)
	v := platform.VM{
		Name:     o.vm.Name(),
		Node:     o.m.Node,
		Power:    power(o.vm.Status()),
		Complete: o.vm.Comment() == completeComment,
	}
	nics, err := e.ListNICs(o.vm.ID())
	if err != nil && !notFound(err) {
		return v, fmt.Errorf("NICs of %s: %w", v.Name, err)
	}
	for _, n := range nics {
		if mac, err := net.ParseMAC(n.Mac()); err == nil {
			v.MAC = mac
			break
		}
	}
	if v.Power == platform.PowerRunning || v.Power == platform.PowerStarting {
		ips, err := e.GetVMIPAddresses(o.vm.ID(), ovirtclient.NewVMIPSearchParams())
		if err != nil && !notFound(err) {
			return v, fmt.Errorf("addresses of %s: %w", v.Name, err)
		}
		v.Addresses = usable(ips)
	}
	return v, nil
}

// usable keeps the addresses other machines can reach: no loopback or
// link-local, sorted and deduplicated.
func usable(ips map[string][]net.IP) []netip.Addr {
	var out []netip.Addr
	for _, list := range ips {
		for _, ip := range list {
			a, ok := netip.AddrFromSlice(ip)
			if !ok {
				continue
			}
			a = a.Unmap()
			if a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast() {
				continue
			}
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out)
}

func power(s ovirtclient.VMStatus) platform.Power {
	switch s {
	case ovirtclient.VMStatusUp, ovirtclient.VMStatusMigrating, ovirtclient.VMStatusPoweringDown,
		ovirtclient.VMStatusRebooting, ovirtclient.VMStatusSavingState:
		return platform.PowerRunning
	case ovirtclient.VMStatusDown, ovirtclient.VMStatusImageLocked:
		return platform.PowerStopped
	case ovirtclient.VMStatusWaitForLaunch, ovirtclient.VMStatusPoweringUp, ovirtclient.VMStatusRestoringState:
		return platform.PowerStarting
	case ovirtclient.VMStatusPaused, ovirtclient.VMStatusSuspended:
		return platform.PowerPaused
	}
	return platform.PowerUnknown
}

// WaitForAddresses polls List until every VM in names reports at least one
// usable address, or timeout passes; it returns what is known either way,
// with an error naming the VMs still without one.
func (p *Provider) WaitForAddresses(ctx context.Context, infraID string, names []string, timeout time.Duration) (map[string][]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	got := map[string][]netip.Addr{}
	for {
		vms, err := p.List(ctx, infraID)
		if err == nil {
			for _, v := range vms {
				if len(v.Addresses) > 0 {
					got[v.Name] = v.Addresses
				}
			}
		}
		var missing []string
		for _, n := range names {
			if len(got[n]) == 0 {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return got, nil
		}
		t := time.NewTimer(p.opts.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return got, fmt.Errorf("ovirt: no address reported after %s for %s", timeout, strings.Join(missing, ", "))
		case <-t.C:
		}
	}
}
