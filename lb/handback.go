package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"appliance/internal/cluster"
)

// HandbackTable names the nftables tables (one in family ip, one in ip6:
// the dup statement has no inet form) that pass connections back to the
// node that held a VIP before this one. IPv6 is passed back only when the
// LB sends IPv6 VIP traffic to the node's own address (Options.Self).
const HandbackTable = "appliance_lb_handback"

// Handback sends the packets of connections this node does not know,
// arriving for VIP:Port, to To: a node that held the VIP before this one
// and may still serve those connections. A VIP:Port may have several.
//
// When a VIP moves from a live node (it released it with priority 0 on
// SIGTERM, or was preempted), its clients' open connections still belong
// to its LB: its conntrack holds their redirect and its sessions drain for
// DrainTimeout. Their next packets reach the new holder, which knows none
// of them and would answer each with a reset. The rule passes every such
// packet (no SYN, conntrack has not seen the flow) to each earlier holder
// unchanged but for its TTL, through the interface it came in on, and
// drops it here; new connections (SYN) stay here. The holder that knows
// the connection serves it; the others drop the copy (see handbackExprs).
type Handback struct {
	VIP  netip.Addr
	Port uint16
	To   netip.Addr
}

// handbackPriority runs the chain after conntrack (-200), so ct state is
// known, and before destination NAT (-100), so the redirect never sees a
// packet passed back.
const handbackPriority = -150

// silenceGrace is how long a takeover by silence keeps passing connections
// to the master followed before (see handbackTargets).
const silenceGrace = time.Second

// handbackWindow is how long a new holder passes connections back: the
// old holder's LB drains for DrainTimeout (ours, as every node runs the
// same defaults), and a little longer covers its last segments.
func handbackWindow(drain time.Duration) time.Duration { return drain + 2*time.Second }

// handbackTargets decides where packets of unknown connections to one VIP
// go, from this node's VRRP state of it: every router that held the VIP
// within the window before, not only the last one, because a VIP that
// moves twice in quick succession (a preempted holder, then the one that
// preempted it; or the split brain of a teardown, where two routers take
// over at once and one steps back) leaves connections on each. last is the
// master a backup followed most recently; the result carries it on. until,
// when not zero, is when the answer changes without any state change (a
// target's window ends).
//
//   - backup: the master it follows (or the last one while a leaving
//     master is being replaced: its priority-0 release clears Master), and
//     the other holders heard within the window. A backup holds no VIP, so
//     the rule only matters from the instant it takes over (installed
//     ahead, the takeover has no gap) and for a client whose neighbour
//     entry still names this node.
//   - master: each holder for the window after it was last heard; the
//     predecessor that handed over alive for the window after the takeover.
//     A holder whose reign ended in silence (vrrp's Holder.Alive false; the
//     master followed last when vrrp names no holders) only until
//     silenceGrace after the takeover: a router starved of CPU looks dead
//     and is not, and vrrp names it the predecessor (ActPredecessor) when
//     its late adverts come; a dead one's clients get their reset that
//     much later.
//   - init or fault: nothing.
func handbackTargets(st cluster.VIPStatus, last netip.Addr, now time.Time, window time.Duration) (to []netip.Addr, keep netip.Addr, until time.Time) {
	ends := map[netip.Addr]time.Time{} // target → when it stops being one; zero: never on its own
	add := func(a netip.Addr, end time.Time) {
		if !a.IsValid() || (!end.IsZero() && !now.Before(end)) {
			return
		}
		if cur, ok := ends[a]; ok && (cur.IsZero() || (!end.IsZero() && cur.After(end))) {
			return
		}
		ends[a] = end
	}
	switch st.LocalState {
	case cluster.VIPStateBackup:
		keep = last
		if st.Master.IsValid() {
			keep = st.Master
		}
		add(keep, time.Time{})
		for _, h := range st.Holders {
			add(h.Addr, h.Last.Add(window))
		}
	case cluster.VIPStateMaster:
		grace := st.Since.Add(silenceGrace)
		if st.Predecessor.IsValid() {
			add(st.Predecessor, st.Since.Add(window))
		}
		named := false
		for _, h := range st.Holders {
			named = named || h.Addr == last
			switch {
			case h.Addr == st.Predecessor:
				add(h.Addr, later(h.Last, st.Since).Add(window))
			case h.Alive || h.Last.After(st.Since):
				add(h.Addr, h.Last.Add(window))
			default:
				add(h.Addr, earlier(h.Last.Add(window), grace))
			}
		}
		if !st.Predecessor.IsValid() && last.IsValid() && now.Before(grace) {
			keep = last
			if !named {
				add(last, grace)
			}
		}
	default:
		keep = last
	}
	for a, end := range ends {
		to = append(to, a)
		if !end.IsZero() && (until.IsZero() || end.Before(until)) {
			until = end
		}
	}
	slices.SortFunc(to, netip.Addr.Compare)
	return to, keep, until
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// ApplyHandback makes the handback tables hold exactly hb, in one batch
// for both families; none removes them. Applying the same set again does
// nothing unless force is set (the tables were found missing).
func (r *Redirector) ApplyHandback(hb []Handback, force bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	hb = slices.Clone(hb)
	slices.SortFunc(hb, compareHandback)
	if !force && r.handback != nil && slices.Equal(hb, r.handback) {
		return nil
	}
	c, err := r.conn()
	if err != nil {
		return err
	}
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		t := &nftables.Table{Name: HandbackTable, Family: fam}
		// Adding first makes the delete valid whether or not it exists.
		c.AddTable(t)
		c.DelTable(t)
		var mine []Handback
		for _, h := range hb {
			if h.VIP.Is4() == (fam == nftables.TableFamilyIPv4) {
				mine = append(mine, h)
			}
		}
		if len(mine) == 0 {
			continue
		}
		t = c.AddTable(t)
		pol := nftables.ChainPolicyAccept
		ch := c.AddChain(&nftables.Chain{Name: chainPrerouting, Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(handbackPriority), Policy: &pol})
		// hb is sorted: the targets of one VIP:Port are neighbours.
		for i := 0; i < len(mine); {
			j := i + 1
			for j < len(mine) && mine[j].VIP == mine[i].VIP && mine[j].Port == mine[i].Port {
				j++
			}
			var to []netip.Addr
			for _, h := range mine[i:j] {
				to = append(to, h.To)
			}
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: handbackExprs(mine[i].VIP, mine[i].Port, to)})
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: handbackDropExprs(mine[i].VIP, mine[i].Port)})
			i = j
		}
	}
	if err := r.flush(c); err != nil {
		return fmt.Errorf("lb: install handback tables %s: %w", HandbackTable, err)
	}
	r.handback = hb
	return nil
}

// HandbackMissing reports whether a handback table that should hold rules
// is gone (someone flushed the ruleset).
func (r *Redirector) HandbackMissing() (bool, error) {
	r.mu.Lock()
	want := slices.Clone(r.handback)
	r.mu.Unlock()
	if len(want) == 0 {
		return false, nil
	}
	c, err := r.conn()
	if err != nil {
		return false, err
	}
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		if !slices.ContainsFunc(want, func(h Handback) bool { return h.VIP.Is4() == (fam == nftables.TableFamilyIPv4) }) {
			continue
		}
		if _, err := c.ListTableOfFamily(HandbackTable, fam); err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) {
				return true, nil
			}
			return false, fmt.Errorf("lb: look up table %s: %w", HandbackTable, err)
		}
	}
	return false, nil
}

// passedBack is the TTL (IPv6: hop limit) a packet leaves with when it is
// passed back: set to 1 before nf_dup, which decrements it once more in
// prerouting, it arrives as 0 (or 1, were dup ever to stop decrementing).
// No packet is sent or forwarded with a TTL that low, so a node receiving
// one knows it was passed back and never passes it on again. Without that
// mark a holder and its predecessor, each passing the other what neither
// knows, kept a packet circling for as long as their rules stood: nf_dup's
// decrement is not checked and wraps from 0 to 255.
const passedBack = 1

// handbackExprs builds, for a VIP:Port and its targets,
//
//	ip[6] daddr VIP meta l4proto tcp tcp dport Port ip ttl > 1
//	ct state new,invalid tcp flags & syn == 0
//	counter ip ttl set 1 dup to To[0] device <the interface it came in on>
//	dup to To[1] device <...> ... drop
//
// invalid as well as new: with nf_conntrack_tcp_loose off, conntrack does
// not pick up a connection in its middle.
func handbackExprs(vip netip.Addr, port uint16, to []netip.Addr) []expr.Any {
	exprs := handbackMatch(vip, port, expr.CmpOpGt)
	ttlOff, csum := uint32(8), expr.CsumTypeInet // IPv4: TTL, header checksum at 10
	if vip.Unmap().Is6() {
		ttlOff, csum = 7, expr.CsumTypeNone // IPv6: hop limit, no header checksum
	}
	write := &expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseNetworkHeader,
		Offset: ttlOff, Len: 1, CsumType: csum}
	if csum == expr.CsumTypeInet {
		write.CsumOffset = 10
	}
	exprs = append(exprs,
		&expr.Counter{},
		&expr.Immediate{Register: 1, Data: []byte{passedBack}},
		write,
		&expr.Meta{Key: expr.MetaKeyIIF, Register: 2},
	)
	for _, a := range to {
		exprs = append(exprs,
			&expr.Immediate{Register: 1, Data: a.Unmap().AsSlice()},
			&expr.Dup{RegAddr: 1, RegDev: 2, IsRegDevSet: true})
	}
	return append(exprs, &expr.Verdict{Kind: expr.VerdictDrop})
}

// handbackDropExprs builds the rule that ends a passed-back packet that
// this node does not know either (another earlier holder's):
//
//	ip[6] daddr VIP meta l4proto tcp tcp dport Port ip ttl <= 1
//	ct state new,invalid tcp flags & syn == 0 counter drop
//
// Dropped here it is silent; routed on, it would cost an ICMP time
// exceeded to the client.
func handbackDropExprs(vip netip.Addr, port uint16) []expr.Any {
	return append(handbackMatch(vip, port, expr.CmpOpLte), &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
}

// handbackMatch matches packets to VIP:Port that are not a SYN, of a
// connection conntrack has not seen, whose TTL compares with passedBack by
// op.
func handbackMatch(vip netip.Addr, port uint16, op expr.CmpOp) []expr.Any {
	off, addr, ttlOff := uint32(16), vip.Unmap().AsSlice(), uint32(8)
	if len(addr) == 16 {
		off, ttlOff = 24, 7
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(addr))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: ttlOff, Len: 1},
		&expr.Cmp{Op: op, Register: 1, Data: []byte{passedBack}},
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitNEW | expr.CtStateBitINVALID), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x02}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}},
	}
}

func compareHandback(a, b Handback) int {
	if c := a.VIP.Compare(b.VIP); c != 0 {
		return c
	}
	if a.Port != b.Port {
		return int(a.Port) - int(b.Port)
	}
	return a.To.Compare(b.To)
}
