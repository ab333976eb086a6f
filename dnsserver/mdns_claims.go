package dnsserver

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/host"
)

// Reasons an mDNS claim is refused: the label values of
// appliance_dns_mdns_refused_claims_total.
const (
	refuseName    = "name"    // a known node's name with addresses it does not have
	refuseAddress = "address" // a known node's address under another name
	refuseOutside = "outside" // an address outside the machine networks
	refuseVIP     = "vip"     // a VIP of the cluster
)

var refuseReasons = []string{refuseName, refuseAddress, refuseOutside, refuseVIP}

// claimOutcome is what becomes of one announced node.
type claimOutcome int

const (
	// claimNew: nobody else knows the node; mDNS may add or update it.
	claimNew claimOutcome = iota
	// claimKnown: the node is known from an authoritative source and the
	// announcement agrees with it; there is nothing for mDNS to add.
	claimKnown
	// claimRefused: the announcement contradicts what is known.
	claimRefused
)

// claimVerdict is judgeClaim's decision; Reason and Detail are set when the
// claim is refused.
type claimVerdict struct {
	Outcome claimOutcome
	Reason  string
	Detail  string
}

// authority is a node whose name and addresses mDNS may not contradict.
type authority struct {
	name   string
	addrs  []netip.Addr
	source string // for the log: config, kubernetes, this node
	// open says a name-only entry may take addresses from mDNS (a
	// configured node listed without addresses).
	open bool
}

// authorities lists who speaks for which node: the configured nodes, the
// members from the Kubernetes API and this node itself (self may be nil).
func authorities(snap *cluster.Snapshot, cfg *cluster.Config, self *host.View) []authority {
	var out []authority
	for _, n := range cfg.Nodes {
		out = append(out, authority{name: n.Name, addrs: n.IPs, source: string(cluster.SourceConfig), open: len(n.IPs) == 0})
	}
	if snap != nil {
		for _, m := range snap.Members {
			if m.Source == cluster.SourceKubernetes {
				out = append(out, authority{name: m.Name, addrs: m.IPs, source: string(cluster.SourceKubernetes)})
			}
		}
	}
	if self != nil && self.Name != "" {
		out = append(out, authority{name: self.Name, addrs: self.Addrs(), source: "this node"})
	}
	return out
}

// judgeClaim decides whether an mDNS announcement of claim may speak for the
// node it names. Configured nodes, Kubernetes members and this node (self)
// are authoritative for their names and addresses; mDNS only adds nodes
// nobody else knows. It is pure, so every rule is table-tested.
func judgeClaim(claim cluster.Member, snap *cluster.Snapshot, cfg *cluster.Config, self *host.View) claimVerdict {
	refuse := func(reason, format string, args ...any) claimVerdict {
		return claimVerdict{Outcome: claimRefused, Reason: reason, Detail: fmt.Sprintf(format, args...)}
	}
	for _, a := range claim.IPs {
		if slices.Contains(cfg.Network.APIVIPs, a) || slices.Contains(cfg.Network.IngressVIPs, a) {
			return refuse(refuseVIP, "%s is a VIP of the cluster", a)
		}
	}
	for _, a := range claim.IPs {
		if _, ok := cfg.Network.PrefixFor(a); !ok {
			return refuse(refuseOutside, "%s is outside network.machineCIDRs", a)
		}
	}
	auths := authorities(snap, cfg, self)
	for _, au := range auths {
		if !strings.EqualFold(au.name, claim.Name) || au.open {
			// An open name still meets the address rule below; its
			// addresses then reach State through the configured member.
			continue
		}
		for _, a := range claim.IPs {
			if !slices.Contains(au.addrs, a) {
				return refuse(refuseName, "%s is known from %s with %v, not %s", au.name, au.source, au.addrs, a)
			}
		}
		return claimVerdict{Outcome: claimKnown}
	}
	for _, au := range auths {
		if strings.EqualFold(au.name, claim.Name) {
			continue
		}
		for _, a := range claim.IPs {
			if slices.Contains(au.addrs, a) {
				return refuse(refuseAddress, "%s belongs to %s (known from %s)", a, au.name, au.source)
			}
		}
	}
	return claimVerdict{Outcome: claimNew}
}

// RefusedClaim is one kind of mDNS announcement that was not believed:
// the same announcer claiming the same node for the same reason is one entry.
type RefusedClaim struct {
	From   netip.Addr   `json:"from"` // the announcer's source address
	Node   string       `json:"node"`
	Addrs  []netip.Addr `json:"addrs"`
	Reason string       `json:"reason"`
	Detail string       `json:"detail"`
	Count  int          `json:"count"`
	First  time.Time    `json:"first"`
	Last   time.Time    `json:"last"`

	logged time.Time // when it was last logged
}

// maxRefused bounds the refused claims kept for /status.
const maxRefused = 16

// refusedLogEvery is how often the same refused claim is logged again.
const refusedLogEvery = time.Minute

// recordRefused adds a refused claim to list (most recent last, at most
// maxRefused entries) and reports whether it deserves a log line: a new
// kind of claim, or one not logged for refusedLogEvery.
func recordRefused(list []RefusedClaim, c RefusedClaim, now time.Time) ([]RefusedClaim, bool) {
	for i, r := range list {
		if r.From == c.From && r.Node == c.Node && r.Reason == c.Reason {
			log := now.Sub(r.logged) >= refusedLogEvery
			if log {
				r.logged = now
			}
			r.Count++
			r.Addrs, r.Detail, r.Last = c.Addrs, c.Detail, now
			list = append(slices.Delete(list, i, i+1), r)
			return list, log
		}
	}
	c.Count, c.First, c.Last, c.logged = 1, now, now, now
	list = append(list, c)
	if len(list) > maxRefused {
		list = slices.Delete(list, 0, len(list)-maxRefused)
	}
	return list, true
}
