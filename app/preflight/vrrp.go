package preflight

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"appliance/internal/cluster"
)

// Advert is one VRRP advertisement heard on the segment.
type Advert struct {
	Source   netip.Addr   `json:"source"`
	VRID     uint8        `json:"vrid"`
	Version  uint8        `json:"version"`
	Priority uint8        `json:"priority"`
	Addrs    []netip.Addr `json:"vips"`
}

// VRRPObservation is what listening for adverts found.
type VRRPObservation struct {
	Iface   string
	Window  time.Duration
	Adverts []Advert
	Err     error
}

// DecideVRRP fails when a router that is not this cluster's advertises on
// one of our VRIDs: two virtual routers with one VRID fight over the same
// virtual MAC and each drops the other's adverts as misconfigured. A router
// counts as ours when it advertises only our VIPs of that kind, from a
// configured node's address (any address when no nodes are configured and
// members are discovered). On the unicast transport our routers drop a
// stranger's adverts, so a stranger with other VIPs only warns; one that
// advertises our own VIPs fails in either transport, since it puts them on
// its own host and answers ARP for them. The message names each clashing
// VRID, source and VIPs, and suggests VRIDs nobody was heard on.
func DecideVRRP(cfg *cluster.Config, o VRRPObservation) Result {
	if o.Err != nil {
		return warn(IDVRRP, "did not listen for VRRP on %s: %v", o.Iface, o.Err)
	}
	ourVRIDs := map[uint8]cluster.VIPKind{
		cfg.VRRP.APIVRID:     cluster.VIPAPI,
		cfg.VRRP.IngressVRID: cluster.VIPIngress,
	}
	type clash struct {
		vrid  uint8
		kind  cluster.VIPKind
		a     Advert
		rogue bool // it advertises our VIPs, from no node of ours
	}
	var clashes []clash
	used := map[uint8]bool{}
	seen := map[string]bool{}
	for _, a := range o.Adverts {
		used[a.VRID] = true
		kind, mine := ourVRIDs[a.VRID]
		// IPv4 and IPv6 virtual routers are separate even with one VRID
		// (their virtual MACs differ), so only our family's router clashes.
		if !mine || !hasFamily(cfg.VIPsFor(kind), a.Source) {
			continue
		}
		ours := onlyOurs(a.Addrs, cfg.VIPsFor(kind))
		if ours && fromOurNode(cfg, a.Source) {
			continue
		}
		key := fmt.Sprintf("%d/%s", a.VRID, a.Source)
		if seen[key] {
			continue
		}
		seen[key] = true
		clashes = append(clashes, clash{a.VRID, kind, a, ours})
	}
	d := map[string]any{"interface": o.Iface, "window": o.Window.String(), "adverts": o.Adverts,
		"apiVRID": cfg.VRRP.APIVRID, "ingressVRID": cfg.VRRP.IngressVRID}
	if len(clashes) == 0 {
		heard := "no other VRRP router"
		if n := len(used); n > 0 {
			heard = fmt.Sprintf("routers on VRIDs %s, none clashing with ours", joinVRIDs(used))
		}
		return pass(IDVRRP, "VRIDs %d (api) and %d (ingress) are free on %s: heard %s in %s",
			cfg.VRRP.APIVRID, cfg.VRRP.IngressVRID, o.Iface, heard, o.Window).with(d)
	}
	free := FreeVRIDs(used, ourVRIDs, 3)
	d["freeVRIDs"] = free
	lines := make([]string, len(clashes))
	rogue := false
	for i, c := range clashes {
		lines[i] = fmt.Sprintf("VRID %d (our %s VRID) is used by %s (VRRPv%d, priority %d) for %s",
			c.vrid, c.kind, c.a.Source, c.a.Version, c.a.Priority, joinAddrs(c.a.Addrs))
		if c.rogue {
			rogue = true
			lines[i] += fmt.Sprintf(": our own VIPs, from %s, which is no configured node; it holds them on its own host, so stop it", c.a.Source)
		}
	}
	fix := fmt.Sprintf("set vrrp.apiVRID / vrrp.ingressVRID to free ones (free here: %s)", joinInts(free))
	if cfg.VRRP.Mode == cluster.VRRPModeKeepalivedOpenShift {
		fix = fmt.Sprintf("%s mode derives VRIDs from cluster.name, so rename the cluster or move the other router (free here: %s)",
			cluster.VRRPModeKeepalivedOpenShift, joinInts(free))
	}
	if cfg.Unicast() && !rogue {
		return warn(IDVRRP, "%s\nour routers advertise by unicast among the cluster's nodes and drop these adverts, but two routers on one VRID confuse whoever reads the segment; %s",
			strings.Join(lines, "\n"), fix).with(d)
	}
	return fail(IDVRRP, "%s\n%s", strings.Join(lines, "\n"), fix).with(d)
}

// fromOurNode reports whether src is a configured node's address or a
// configured unicast peer; with no nodes configured (members discovered),
// any source may be ours.
func fromOurNode(cfg *cluster.Config, src netip.Addr) bool {
	if len(cfg.Nodes) == 0 {
		return true
	}
	_, ok := cfg.NodeByAddr(src)
	return ok || slices.Contains(cfg.VRRP.UnicastPeers, src)
}

func hasFamily(vips []netip.Addr, a netip.Addr) bool {
	for _, v := range vips {
		if v.Is4() == a.Is4() {
			return true
		}
	}
	return false
}

// onlyOurs reports whether every advertised address is one of vips.
func onlyOurs(addrs, vips []netip.Addr) bool {
	if len(addrs) == 0 {
		return false
	}
	for _, a := range addrs {
		if !slices.Contains(vips, a) {
			return false
		}
	}
	return true
}

// FreeVRIDs returns up to n VRIDs that were not heard and are not ours,
// starting after our own so a suggestion stays near what the user chose.
func FreeVRIDs(used map[uint8]bool, ours map[uint8]cluster.VIPKind, n int) []int {
	start := 1
	for v := range ours {
		start = max(start, int(v)+1)
	}
	var out []int
	for i := range 255 {
		v := uint8((start-1+i)%255 + 1)
		if used[v] {
			continue
		}
		if _, mine := ours[v]; mine {
			continue
		}
		out = append(out, int(v))
		if len(out) == n {
			break
		}
	}
	return out
}

func joinVRIDs(m map[uint8]bool) string {
	var ids []int
	for v := range m {
		ids = append(ids, int(v))
	}
	slices.Sort(ids)
	return joinInts(ids)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}
