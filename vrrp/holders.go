package vrrp

import (
	"net/netip"
	"slices"
	"time"
)

// Holder is a router heard holding the virtual addresses: advertising as
// their master. A router that held them may still serve connections it
// accepted meanwhile (its load balancer drains them), so whoever holds
// them next passes those connections' packets to every recent holder, not
// only to the last (see lb's handback).
type Holder struct {
	Addr netip.Addr `json:"addr"`
	// Last is when its latest advert came.
	Last time.Time `json:"last"`
	// Alive says its reign did not end in a silence that means death; see
	// Machine.Holders.
	Alive bool `json:"alive"`
}

const (
	// holderMemory is how long a holder is remembered after its last
	// advert: longer than any load balancer's drain.
	holderMemory = 2 * time.Minute
	// maxHolders bounds the list on a segment where routers flap.
	maxHolders = 8
)

// holderRec is what a Machine keeps of a router heard advertising.
type holderRec struct {
	addr        netip.Addr
	first, last time.Time     // its current run of adverts
	interval    time.Duration // the interval it advertises at
	left        bool          // its latest advert had priority 0
}

// heard records an advert from src, whatever the machine makes of it: a
// lower-priority master it will preempt, a higher one it steps back to, a
// priority-0 release.
func (m *Machine) heard(now time.Time, src netip.Addr, p Packet) {
	interval := m.cfg.Interval
	if m.cfg.Version == 3 && p.Interval > 0 {
		interval = p.Interval
	}
	i := slices.IndexFunc(m.holders, func(h holderRec) bool { return h.addr == src })
	if i < 0 {
		m.holders = append(m.holders, holderRec{addr: src, first: now})
		i = len(m.holders) - 1
	}
	h := &m.holders[i]
	if now.Sub(h.last) > 3*h.interval {
		h.first = now // a new run after a silence
	}
	h.last, h.interval, h.left = now, interval, p.Priority == 0
	m.holders = slices.DeleteFunc(m.holders, func(h holderRec) bool { return now.Sub(h.last) > holderMemory })
	if len(m.holders) > maxHolders {
		slices.SortFunc(m.holders, func(a, b holderRec) int { return a.last.Compare(b.last) })
		m.holders = slices.Delete(m.holders, 0, len(m.holders)-maxHolders)
	}
}

// Holders lists the other routers heard holding the virtual addresses in
// the last holderMemory, oldest first. A holder is Alive when it released
// them (priority 0), still advertises (heard within three of its
// intervals), or when another master (another holder, or this router
// taking over) came before it had been silent for two of its intervals:
// it stepped back on hearing that one, or was preempted while it still
// advertised. A master replaced through Master_Down_Timer had been silent
// for Master_Down_Interval (three intervals and a skew), longer than that:
// it may be dead.
func (m *Machine) Holders(now time.Time) []Holder {
	type run struct{ first, last time.Time }
	runs := make([]run, 0, len(m.holders)+1)
	for _, h := range m.holders {
		runs = append(runs, run{h.first, h.last})
	}
	if m.state == StateMaster {
		runs = append(runs, run{m.masterSince, now})
	}
	out := make([]Holder, 0, len(m.holders))
	for i, h := range m.holders {
		if now.Sub(h.last) > holderMemory {
			continue
		}
		alive := h.left || now.Sub(h.last) < 3*h.interval
		for j, r := range runs {
			if alive {
				break
			}
			// Another master still went on after h's last advert and
			// began less than two intervals after it.
			alive = j != i && !r.last.Before(h.last) && r.first.Sub(h.last) < 2*h.interval
		}
		out = append(out, Holder{Addr: h.addr, Last: h.last, Alive: alive})
	}
	slices.SortFunc(out, func(a, b Holder) int { return a.Last.Compare(b.Last) })
	return out
}

// sameHolders reports whether two lists name the same routers with the
// same verdict, whatever their times: what makes a new status worth
// publishing.
func sameHolders(a, b []Holder) bool {
	return slices.EqualFunc(a, b, func(x, y Holder) bool { return x.Addr == y.Addr && x.Alive == y.Alive })
}
