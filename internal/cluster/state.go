package cluster

import (
	"bytes"
	"cmp"
	"context"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Source says where a member's entry came from.
type Source string

// Member sources.
const (
	SourceConfig     Source = "config"
	SourceMDNS       Source = "mdns"
	SourceKubernetes Source = "kubernetes"
)

// Member is one node as currently known.
type Member struct {
	Name     string
	Role     Role
	IPs      []netip.Addr
	MAC      net.HardwareAddr
	Source   Source
	Healthy  bool
	LastSeen time.Time // zero: never heard from (e.g. only configured)
}

// VIPState is this node's state in one virtual router, as the services
// that follow VIP ownership read it (the DHCP pool, the LB's handback).
// The names are VRRP's own, the ones /status and the logs show; the node
// composition maps the VRRP implementation's states onto these, so this
// package never depends on how that implementation spells them.
type VIPState string

// VIP states.
const (
	VIPStateInit   VIPState = "INIT"   // not started, or stopped
	VIPStateBackup VIPState = "BACKUP" // another router holds the VIP
	VIPStateMaster VIPState = "MASTER" // this node holds the VIP
	VIPStateFault  VIPState = "FAULT"  // silent and without the VIP (interface or a tracked check)
)

// VIPStatus is the local view of one virtual router.
type VIPStatus struct {
	Name       string // VIPName(kind, vip), e.g. "api-v4"
	VIP        netip.Addr
	VRID       uint8
	Kind       VIPKind
	LocalState VIPState   // VIPStateInit, VIPStateBackup, VIPStateMaster or VIPStateFault
	Master     netip.Addr // the router currently advertising; zero if unknown
	// Predecessor is, while this node is master, the master that handed
	// the VIP over alive (vrrp.Status.Predecessor); zero otherwise.
	Predecessor netip.Addr
	Priority    uint8     // this node's priority
	Since       time.Time // when LocalState last changed
	Collision   string    // non-empty when another router uses this VRID differently
	// Holders are the other routers heard holding the VIP lately
	// (vrrp.Status.Holders), oldest first: each may still serve
	// connections it accepted while it held it, so a new holder passes
	// their packets to every one (lb's handback), not only to the last.
	Holders []VIPHolder
}

// VIPHolder is a router heard advertising as a VIP's master.
type VIPHolder struct {
	Addr netip.Addr
	// Last is when its latest advert came, as of the status it was
	// published with: the master a backup still follows advertises on.
	Last time.Time
	// Alive says its reign did not end in a silence long enough to mean
	// death: it released the VIP (priority 0), stepped back to another
	// master, or still advertises.
	Alive bool
}

// Snapshot is one immutable version of the live state. Callers share it and
// must not modify it or anything it points to.
type Snapshot struct {
	Version uint64      // increases with every change
	Members []Member    // sorted by Name
	VIPs    []VIPStatus // sorted by Name
}

// Member finds a member by name.
func (s *Snapshot) Member(name string) (Member, bool) {
	i, ok := slices.BinarySearchFunc(s.Members, name, func(m Member, n string) int { return cmp.Compare(m.Name, n) })
	if !ok {
		return Member{}, false
	}
	return s.Members[i], true
}

// VIP finds a VIP's status by name.
func (s *Snapshot) VIP(name string) (VIPStatus, bool) {
	i, ok := slices.BinarySearchFunc(s.VIPs, name, func(v VIPStatus, n string) int { return cmp.Compare(v.Name, n) })
	if !ok {
		return VIPStatus{}, false
	}
	return s.VIPs[i], true
}

// State is the live view of the cluster that services share: members (from
// config, mDNS or the Kubernetes API) and VIP ownership. Reads are lock-free
// snapshots; writers serialize, copy, and publish a new snapshot; subscribers
// are told without ever holding a writer up. Safe for concurrent use.
type State struct {
	snap atomic.Pointer[Snapshot]

	mu sync.Mutex // serializes writers and subscriber bookkeeping
	// configIPs remembers configured addresses, so that merging in a
	// discovered member's addresses replaces the discovered ones only.
	configIPs map[string][]netip.Addr
	subs      map[chan *Snapshot]struct{}
}

// NewState starts a state whose members are cfg's nodes (SourceConfig,
// healthy, never seen). cfg may be nil.
func NewState(cfg *Config) *State {
	s := &State{configIPs: map[string][]netip.Addr{}, subs: map[chan *Snapshot]struct{}{}}
	snap := &Snapshot{Version: 1}
	if cfg != nil {
		for _, n := range cfg.Nodes {
			m := Member{Name: n.Name, Role: n.Role, IPs: slices.Clone(n.IPs), MAC: slices.Clone(n.MAC), Source: SourceConfig, Healthy: true}
			snap.Members = append(snap.Members, m)
			s.configIPs[n.Name] = m.IPs
		}
	}
	slices.SortStableFunc(snap.Members, func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	snap.Members = slices.CompactFunc(snap.Members, func(a, b Member) bool { return a.Name == b.Name })
	s.snap.Store(snap)
	return s
}

// Snapshot returns the current state without locking.
func (s *State) Snapshot() *Snapshot { return s.snap.Load() }

// UpsertMember adds or replaces the member named m.Name (empty names are
// ignored). One rule keeps it simple: a configured member stays configured.
// When a discovered entry (mDNS, Kubernetes) arrives for a SourceConfig
// member, the member keeps its Source, Role and configured MAC and IPs; it
// takes the discovered Healthy and LastSeen, the MAC if none was configured,
// and its IPs become the configured ones followed by the discovered ones not
// among them. Any other upsert replaces the entry. An upsert that changes
// nothing publishes nothing.
func (s *State) UpsertMember(m Member) {
	if m.Name == "" {
		return
	}
	m.IPs = cleanAddrs(m.IPs)
	m.MAC = slices.Clone(m.MAC)

	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.snap.Load()
	i, found := slices.BinarySearchFunc(cur.Members, m.Name, func(x Member, n string) int { return cmp.Compare(x.Name, n) })
	if found && cur.Members[i].Source == SourceConfig && m.Source != SourceConfig {
		old := cur.Members[i]
		merged := old
		merged.Healthy, merged.LastSeen = m.Healthy, m.LastSeen
		if len(merged.MAC) == 0 {
			merged.MAC = m.MAC
		}
		merged.IPs = slices.Clone(s.configIPs[m.Name])
		for _, a := range m.IPs {
			if !slices.Contains(merged.IPs, a) {
				merged.IPs = append(merged.IPs, a)
			}
		}
		m = merged
	} else if m.Source == SourceConfig {
		s.configIPs[m.Name] = m.IPs
	}
	if found && memberEqual(cur.Members[i], m) {
		return
	}
	s.publish(cur, &Snapshot{VIPs: cur.VIPs, Members: putSorted(cur.Members, i, found, m)})
}

// RemoveMember removes the member called name if its entry came from src, so
// that a discovery source cannot remove what another source (or the config)
// put there. It reports whether a member was removed.
func (s *State) RemoveMember(name string, src Source) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.snap.Load()
	i, found := slices.BinarySearchFunc(cur.Members, name, func(x Member, n string) int { return cmp.Compare(x.Name, n) })
	if !found || cur.Members[i].Source != src {
		return false
	}
	if src == SourceConfig {
		delete(s.configIPs, name)
	}
	next := &Snapshot{VIPs: cur.VIPs, Members: slices.Delete(slices.Clone(cur.Members), i, i+1)}
	s.publish(cur, next)
	return true
}

// SetVIP adds or replaces the status of the VIP named v.Name (empty names are
// ignored). A status that changes nothing publishes nothing.
func (s *State) SetVIP(v VIPStatus) {
	if v.Name == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.snap.Load()
	i, found := slices.BinarySearchFunc(cur.VIPs, v.Name, func(x VIPStatus, n string) int { return cmp.Compare(x.Name, n) })
	if found && vipEqual(cur.VIPs[i], v) {
		return
	}
	s.publish(cur, &Snapshot{Members: cur.Members, VIPs: putSorted(cur.VIPs, i, found, v)})
}

// RemoveVIP drops a VIP's status, e.g. when its virtual router stops. It
// reports whether there was one.
func (s *State) RemoveVIP(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.snap.Load()
	i, found := slices.BinarySearchFunc(cur.VIPs, name, func(x VIPStatus, n string) int { return cmp.Compare(x.Name, n) })
	if !found {
		return false
	}
	s.publish(cur, &Snapshot{Members: cur.Members, VIPs: slices.Delete(slices.Clone(cur.VIPs), i, i+1)})
	return true
}

// Subscribe returns a channel that receives the current snapshot first and
// then every newer one. It holds at most one: a slow reader skips straight to
// the latest version, and writers never wait for it. The channel is closed
// once ctx ends.
func (s *State) Subscribe(ctx context.Context) <-chan *Snapshot {
	ch := make(chan *Snapshot, 1)
	s.mu.Lock()
	ch <- s.snap.Load()
	s.subs[ch] = struct{}{}
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		delete(s.subs, ch)
		close(ch)
		s.mu.Unlock()
	})
	return ch
}

// publish stores next and hands it to every subscriber. Callers hold s.mu,
// which makes this the only sender on any subscriber channel: after taking
// out a stale value the send below always has room.
func (s *State) publish(cur, next *Snapshot) {
	next.Version = cur.Version + 1
	s.snap.Store(next)
	for ch := range s.subs {
		select {
		case ch <- next:
			continue
		default:
		}
		select {
		case <-ch: // drop the unread older snapshot
		default:
		}
		select {
		case ch <- next:
		default: // unreachable while s.mu is held; never block a writer
		}
	}
}

// cleanAddrs copies addrs, unmapping IPv4-in-IPv6 forms and dropping zero
// and repeated addresses.
func cleanAddrs(addrs []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if a.IsValid() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

func memberEqual(a, b Member) bool {
	return a.Name == b.Name && a.Role == b.Role && a.Source == b.Source && a.Healthy == b.Healthy &&
		a.LastSeen.Equal(b.LastSeen) && slices.Equal(a.IPs, b.IPs) && bytes.Equal(a.MAC, b.MAC)
}

func vipEqual(a, b VIPStatus) bool {
	return a.Name == b.Name && a.VIP == b.VIP && a.VRID == b.VRID && a.Kind == b.Kind &&
		a.LocalState == b.LocalState && a.Master == b.Master && a.Predecessor == b.Predecessor &&
		a.Priority == b.Priority && a.Since.Equal(b.Since) && a.Collision == b.Collision &&
		slices.EqualFunc(a.Holders, b.Holders, holderEqual)
}

func holderEqual(a, b VIPHolder) bool {
	return a.Addr == b.Addr && a.Alive == b.Alive && a.Last.Equal(b.Last)
}

// putSorted returns a copy of list with v at index i, replacing the element
// there when found (as slices.BinarySearch reports it) and inserting
// otherwise. The published snapshot's slice is never modified.
func putSorted[T any](list []T, i int, found bool, v T) []T {
	if found {
		out := slices.Clone(list)
		out[i] = v
		return out
	}
	return slices.Insert(slices.Clip(list), i, v)
}
