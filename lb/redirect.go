package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// DefaultTable is the nftables table (family inet) the redirect owns.
const DefaultTable = "appliance_lb"

// Redirect sends TCP to VIP:Port to the local port ToPort: to To, the
// node's own address, when set (dnat), else to the address the kernel's
// redirect picks.
type Redirect struct {
	VIP    netip.Addr
	Port   uint16
	ToPort uint16
	To     netip.Addr
}

// Redirector owns one inet nftables table holding two NAT chains: prerouting
// for traffic arriving from the network and output (on lo) for local clients
// of a VIP this node holds. It replaces the table's whole content in one
// netlink batch, so the kernel never sees a half-applied set.
type Redirector struct {
	table   string
	netnsFd int // 0: the caller's (the process's) namespace

	mu       sync.Mutex
	current  []Redirect // nil: never applied; empty: no table wanted
	handback []Handback // the handback tables' rules (ApplyHandback); nil: never applied

	// ownTIDs are the threads our batches were sent from (see flush).
	tidMu   sync.Mutex
	ownTIDs map[uint32]struct{}
}

// NewRedirector prepares a redirector for table ("" means DefaultTable) in
// the network namespace at netnsPath ("" means the process's own). Holding
// the namespace by fd means every netlink socket it opens lands there, from
// whichever thread it is opened: it never acts on another namespace.
func NewRedirector(table, netnsPath string) (*Redirector, error) {
	if table == "" {
		table = DefaultTable
	}
	r := &Redirector{table: table}
	if netnsPath != "" {
		fd, err := unix.Open(netnsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("lb: open netns %s: %w", netnsPath, err)
		}
		r.netnsFd = fd
	}
	return r, nil
}

// Table is the name of the owned table.
func (r *Redirector) Table() string { return r.table }

// Close releases the namespace handle (the table is left as it is).
func (r *Redirector) Close() error {
	if r.netnsFd != 0 {
		err := unix.Close(r.netnsFd)
		r.netnsFd = 0
		return err
	}
	return nil
}

func (r *Redirector) conn() (*nftables.Conn, error) {
	var opts []nftables.ConnOption
	if r.netnsFd != 0 {
		opts = append(opts, nftables.WithNetNSFd(r.netnsFd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("lb: nftables: %w", err)
	}
	return c, nil
}

func (r *Redirector) tableObj() *nftables.Table {
	return &nftables.Table{Name: r.table, Family: nftables.TableFamilyINet}
}

// Apply makes the table hold exactly rules; no rules removes the table.
// Applying the same set again does nothing.
func (r *Redirector) Apply(rules []Redirect) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rules = slices.Clone(rules)
	slices.SortFunc(rules, compareRedirect)
	if r.current != nil && slices.Equal(rules, r.current) {
		return nil
	}
	if len(rules) == 0 {
		if err := r.remove(); err != nil {
			return err
		}
		r.current = []Redirect{}
		return nil
	}
	if err := r.install(rules); err != nil {
		return err
	}
	r.current = rules
	return nil
}

// install replaces the table with one holding exactly rules, in one batch:
// adding the table first makes the delete valid whether or not it exists,
// and deleting it drops whatever else someone put into it (a stray chain,
// a chain re-created with another hook). Callers hold r.mu.
func (r *Redirector) install(rules []Redirect) error {
	c, err := r.conn()
	if err != nil {
		return err
	}
	c.AddTable(r.tableObj())
	c.DelTable(r.tableObj())
	t := c.AddTable(r.tableObj())
	pre := c.AddChain(chainSpec(t, chainPrerouting))
	out := c.AddChain(chainSpec(t, chainOutput))
	for _, rd := range rules {
		c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: redirectExprs(rd, false)})
		c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: redirectExprs(rd, true)})
	}
	if len(rules) == 0 {
		c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: holdExprs()})
	}
	if err := r.flush(c); err != nil {
		return fmt.Errorf("lb: install redirect table %s: %w", r.table, err)
	}
	return nil
}

// flush sends c's batch from a thread locked for the call and remembers
// that thread: the kernel names the sending thread in the generation
// message that closes each transaction, which is how the watcher tells our
// own batches from someone else's without reading the table back.
func (r *Redirector) flush(c *nftables.Conn) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := uint32(unix.Gettid())
	r.tidMu.Lock()
	if r.ownTIDs == nil {
		r.ownTIDs = map[uint32]struct{}{}
	}
	r.ownTIDs[tid] = struct{}{}
	r.tidMu.Unlock()
	return c.Flush()
}

// ownThread reports whether tid sent one of our batches and is still a
// thread of this process: a thread that exited (one that entered another
// namespace is discarded) frees its id for another process's use.
func (r *Redirector) ownThread(tid uint32) bool {
	r.tidMu.Lock()
	defer r.tidMu.Unlock()
	if _, ok := r.ownTIDs[tid]; !ok {
		return false
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); err != nil {
		delete(r.ownTIDs, tid)
		return false
	}
	return true
}

// Names of the two chains of the table.
const (
	chainPrerouting = "prerouting"
	chainOutput     = "output"
)

// chainSpec is the NAT base chain called name: prerouting for traffic from
// the network, output for local clients.
func chainSpec(t *nftables.Table, name string) *nftables.Chain {
	hook := nftables.ChainHookPrerouting
	if name == chainOutput {
		hook = nftables.ChainHookOutput
	}
	return &nftables.Chain{
		Name: name, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: hook, Priority: nftables.ChainPriorityNATDest,
	}
}

// Hold replaces the redirects with a rule that only keeps conntrack
// running, for a draining LB. The packets of connections already
// redirected are translated by their conntrack entries, not by the rules,
// but only while conntrack runs in the namespace, and it runs only while
// some rule needs it: on a node where nothing else does, deleting the
// redirects would cut every session still draining (measured:
// TestNetnsHandback). New connections are no longer redirected.
func (r *Redirector) Hold() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.install(nil); err != nil {
		return err
	}
	r.current = []Redirect{}
	return nil
}

// Remove deletes the table if it exists: at start (a crashed run may have
// left it) and on exit.
func (r *Redirector) Remove() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.remove(); err != nil {
		return err
	}
	r.current = []Redirect{}
	return nil
}

func (r *Redirector) remove() error {
	c, err := r.conn()
	if err != nil {
		return err
	}
	if _, err := c.ListTableOfFamily(r.table, nftables.TableFamilyINet); err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("lb: look up table %s: %w", r.table, err)
	}
	c.DelTable(r.tableObj())
	if err := r.flush(c); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("lb: delete table %s: %w", r.table, err)
	}
	return nil
}

// redirectExprs builds
//
//	meta nfproto ipv4|ipv6 [oifname "lo"] meta l4proto tcp
//	ip[6] daddr VIP tcp dport Port counter redirect to :ToPort
func redirectExprs(rd Redirect, local bool) []expr.Any {
	proto, off, addr := byte(unix.NFPROTO_IPV4), uint32(16), rd.VIP.Unmap().AsSlice()
	if len(addr) == 16 {
		proto, off = unix.NFPROTO_IPV6, 24
	}
	e := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
	if local {
		lo := make([]byte, unix.IFNAMSIZ)
		copy(lo, "lo")
		e = append(e,
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: lo},
		)
	}
	e = append(e,
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(addr))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(rd.Port)},
		&expr.Counter{},
	)
	if rd.To.IsValid() && !local {
		// dnat ip[6] to [To]:ToPort
		return append(e,
			&expr.Immediate{Register: 1, Data: rd.To.Unmap().AsSlice()},
			&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(rd.ToPort)},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(proto), RegAddrMin: 1, RegAddrMax: 1, RegProtoMin: 2, RegProtoMax: 2, Specified: true},
		)
	}
	return append(e,
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(rd.ToPort)},
		&expr.Redir{RegisterProtoMin: 1},
	)
}

// holdExprs builds `ct state established counter`: it matches nothing
// (NAT chains see a connection's first packet only) but needs conntrack.
func holdExprs() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		&expr.Counter{},
	}
}

func compareRedirect(a, b Redirect) int {
	if c := a.VIP.Compare(b.VIP); c != 0 {
		return c
	}
	if a.Port != b.Port {
		return int(a.Port) - int(b.Port)
	}
	if a.ToPort != b.ToPort {
		return int(a.ToPort) - int(b.ToPort)
	}
	return a.To.Compare(b.To)
}
