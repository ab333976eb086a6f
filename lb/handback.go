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
// arriving for VIP:Port, to To: the node that held the VIP before us and
// still serves those connections.
//
// When a VIP moves from a live node (it released it with priority 0 on
// SIGTERM, or was preempted), its clients' open connections still belong
// to its LB: its conntrack holds their redirect and its sessions drain for
// DrainTimeout. Their next packets reach the new holder, which knows none
// of them and would answer each with a reset. The rule passes every such
// packet (no SYN, conntrack has not seen the flow) to the old holder
// unchanged, through the interface it came in on, and drops it here; new
// connections (SYN) stay here.
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
// to the master followed before (see handbackTo).
const silenceGrace = time.Second

// handbackWindow is how long a new holder passes connections back: the
// old holder's LB drains for DrainTimeout (ours, as every node runs the
// same defaults), and a little longer covers its last segments.
func handbackWindow(drain time.Duration) time.Duration { return drain + 2*time.Second }

// handbackTo decides where packets of unknown connections to one VIP go,
// from this node's VRRP state of it. last is the master a backup followed
// most recently (the one to pass connections to if it hands over); the
// result carries it on. until, when not zero, is when the answer changes
// without any state change (the end of the window).
//
//   - backup: the master it follows, or the last one while a leaving master
//     is being replaced (its priority-0 release clears Master). A backup
//     holds no VIP, so the rule only matters from the instant it takes over:
//     installed ahead, the takeover has no gap.
//   - master: the predecessor that handed over alive, for window after the
//     takeover. After a takeover by silence, the master followed last for
//     silenceGrace: a router starved of CPU looks dead and is not, and
//     vrrp names it the predecessor (ActPredecessor) when its late adverts
//     come; a dead one's clients get their reset that much later. Then
//     nothing.
//   - init or fault: nothing.
func handbackTo(st cluster.VIPStatus, last netip.Addr, now time.Time, window time.Duration) (to, keep netip.Addr, until time.Time) {
	switch st.LocalState {
	case cluster.VIPStateBackup:
		if st.Master.IsValid() {
			return st.Master, st.Master, time.Time{}
		}
		return last, last, time.Time{}
	case cluster.VIPStateMaster:
		end := st.Since.Add(window)
		if st.Predecessor.IsValid() && now.Before(end) {
			return st.Predecessor, netip.Addr{}, end
		}
		if grace := st.Since.Add(silenceGrace); !st.Predecessor.IsValid() && last.IsValid() && now.Before(grace) {
			return last, last, grace
		}
		return netip.Addr{}, netip.Addr{}, time.Time{}
	}
	return netip.Addr{}, last, time.Time{}
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
		for _, h := range mine {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: handbackExprs(h)})
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

// handbackExprs builds
//
//	ip[6] daddr VIP meta l4proto tcp tcp dport Port
//	ct state new,invalid tcp flags & syn == 0
//	counter dup to To device <the interface it came in on> drop
//
// invalid as well as new: with nf_conntrack_tcp_loose off, conntrack does
// not pick up a connection in its middle.
func handbackExprs(h Handback) []expr.Any {
	off, addr := uint32(16), h.VIP.Unmap().AsSlice()
	if len(addr) == 16 {
		off = 24
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(addr))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(h.Port)},
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitNEW | expr.CtStateBitINVALID), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x02}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}},
		&expr.Counter{},
		&expr.Immediate{Register: 1, Data: h.To.Unmap().AsSlice()},
		&expr.Meta{Key: expr.MetaKeyIIF, Register: 2},
		&expr.Dup{RegAddr: 1, RegDev: 2, IsRegDevSet: true},
		&expr.Verdict{Kind: expr.VerdictDrop},
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
