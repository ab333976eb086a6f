package netlab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"os"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Defaults for Options.
var (
	DefaultIPv4    = netip.MustParsePrefix("192.168.126.0/24")
	DefaultMACBase = net.HardwareAddr{0x52, 0x54, 0x00, 0x7e, 0x00, 0x00}
)

const (
	// hostOffset is added to a node's index to get the host part of its
	// addresses and the last byte(s) of its MAC: n0 is .10, ::10 and
	// 52:54:00:7e:00:10, matching the design's example inventory.
	hostOffset = 0x10 // for IPv6 and MACs (hex digits "10")
	v4Offset   = 10   // for IPv4 (decimal ".10")

	bridgeName = "br0"
	nodeIface  = "eth0"

	// stopGrace is how long processes get between SIGTERM and SIGKILL.
	stopGrace = 2 * time.Second
)

// Options describes a lab. The zero value (plus Nodes) is a usable IPv4-only
// lab on 192.168.126.0/24.
type Options struct {
	// Nodes is the number of nodes New creates (at least 1).
	Nodes int
	// Name is an optional short label (lower-case letters and digits, at
	// most 12) included in namespace names to tell labs apart while
	// debugging.
	Name string
	// IPv4 is the node network, default 192.168.126.0/24. Node i gets host
	// address 10+i (decimal); the bridge has no address.
	IPv4 netip.Prefix
	// IPv6, if set (e.g. fd00:126::/64), gives node i host address 0x10+i
	// (so n0 is ::10, n1 ::11, ... n10 ::1a). DAD is off in every node, so
	// the address is usable at once.
	IPv6 netip.Prefix
	// MACBase is the MAC that node MACs count up from, default
	// 52:54:00:7e:00:00: node i gets base+0x10+i (n0 is ...:00:10).
	MACBase net.HardwareAddr
}

var labelRE = regexp.MustCompile(`^[a-z0-9]{1,12}$`)

func (o *Options) normalize() error {
	if o.Nodes < 1 {
		return fmt.Errorf("netlab: options: Nodes is %d, need at least 1", o.Nodes)
	}
	if o.Name != "" && !labelRE.MatchString(o.Name) {
		return fmt.Errorf("netlab: options: Name %q: use 1-12 lower-case letters or digits", o.Name)
	}
	if !o.IPv4.IsValid() {
		o.IPv4 = DefaultIPv4
	}
	if !o.IPv4.Addr().Is4() {
		return fmt.Errorf("netlab: options: IPv4 %s is not an IPv4 prefix", o.IPv4)
	}
	o.IPv4 = o.IPv4.Masked()
	if o.IPv6.IsValid() {
		if !o.IPv6.Addr().Is6() || o.IPv6.Addr().Is4In6() {
			return fmt.Errorf("netlab: options: IPv6 %s is not an IPv6 prefix", o.IPv6)
		}
		o.IPv6 = o.IPv6.Masked()
	}
	if o.MACBase == nil {
		o.MACBase = DefaultMACBase
	}
	if len(o.MACBase) != 6 || o.MACBase[0]&1 != 0 {
		return fmt.Errorf("netlab: options: MACBase %s is not a unicast Ethernet address", o.MACBase)
	}
	o.MACBase = append(net.HardwareAddr(nil), o.MACBase...)
	// Fail now rather than half-way through building.
	if _, err := o.addrs(o.Nodes - 1); err != nil {
		return err
	}
	return nil
}

// addrs computes the addresses of node i.
func (o *Options) addrs(i int) (nodeAddrs, error) {
	var a nodeAddrs
	v4, ok := addHost(o.IPv4.Addr(), uint64(v4Offset+i))
	if !ok || !o.IPv4.Contains(v4) || (o.IPv4.Bits() < 31 && isBroadcast(o.IPv4, v4)) {
		return a, fmt.Errorf("netlab: options: IPv4 %s has no room for node %d", o.IPv4, i)
	}
	a.v4 = netip.PrefixFrom(v4, o.IPv4.Bits())
	if o.IPv6.IsValid() {
		v6, ok := addHost(o.IPv6.Addr(), uint64(hostOffset+i))
		if !ok || !o.IPv6.Contains(v6) {
			return a, fmt.Errorf("netlab: options: IPv6 %s has no room for node %d", o.IPv6, i)
		}
		a.v6 = netip.PrefixFrom(v6, o.IPv6.Bits())
	}
	mac, ok := addMAC(o.MACBase, uint64(hostOffset+i))
	if !ok {
		return a, fmt.Errorf("netlab: options: MACBase %s has no room for node %d", o.MACBase, i)
	}
	a.mac = mac
	return a, nil
}

type nodeAddrs struct {
	v4, v6 netip.Prefix
	mac    net.HardwareAddr
}

func addHost(base netip.Addr, n uint64) (netip.Addr, bool) {
	b := base.AsSlice()
	x := new(big.Int).SetBytes(b)
	x.Add(x, new(big.Int).SetUint64(n))
	out := x.Bytes()
	if len(out) > len(b) {
		return netip.Addr{}, false
	}
	buf := make([]byte, len(b))
	copy(buf[len(b)-len(out):], out)
	a, _ := netip.AddrFromSlice(buf)
	return a, true
}

func isBroadcast(p netip.Prefix, a netip.Addr) bool {
	last, ok := addHost(p.Addr(), (uint64(1)<<(32-p.Bits()))-1)
	return ok && last == a
}

// addMAC adds n to the low three bytes of base (the NIC-specific part),
// never touching the OUI.
func addMAC(base net.HardwareAddr, n uint64) (net.HardwareAddr, bool) {
	low := uint64(base[3])<<16 | uint64(base[4])<<8 | uint64(base[5])
	low += n
	if low > 0xffffff {
		return nil, false
	}
	return net.HardwareAddr{base[0], base[1], base[2], byte(low >> 16), byte(low >> 8), byte(low)}, true
}

// Lab is a running topology. Nodes is appended to by AddNode; do not read it
// concurrently with AddNode.
type Lab struct {
	// Nodes are the lab's nodes, Nodes[i].Index == i.
	Nodes []*Node

	opts   Options
	prefix string
	hub    string
	dir    string

	// opMu serialises AddNode and Close so that no namespace can be
	// created after Close has deleted the lab's namespaces.
	opMu sync.Mutex

	mu         sync.Mutex
	closed     bool
	namespaces []string // every namespace created or being created
	procs      []*Process
	seq        int
}

var (
	prefixMu   sync.Mutex
	prefixUsed = map[string]bool{}
)

// newPrefix picks a namespace-name prefix no other lab of this process has
// used. Other processes differ by pid.
func newPrefix(label string) (string, error) {
	prefixMu.Lock()
	defer prefixMu.Unlock()
	for range 100 {
		var b [2]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("netlab: random prefix: %w", err)
		}
		p := fmt.Sprintf("apl%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
		if label != "" {
			p += "-" + label
		}
		if prefixUsed[p] {
			continue
		}
		if _, err := os.Stat(nsPath(p + "-hub")); err == nil {
			continue
		}
		prefixUsed[p] = true
		return p, nil
	}
	return "", errors.New("netlab: no free namespace prefix")
}

// New builds a lab: the hub namespace with its bridge, then opts.Nodes nodes.
// It first sweeps namespaces left by dead processes (see Sweep). On error it
// tears down whatever it had built. The caller must Close the lab.
func New(ctx context.Context, opts Options) (*Lab, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("netlab: creating network namespaces needs root")
	}
	if err := prepareNetnsDir(); err != nil {
		return nil, err
	}
	if removed, err := Sweep(); err != nil {
		slog.Warn("netlab: sweeping stale labs", "err", err, "removed", removed)
	} else if len(removed) > 0 {
		slog.Info("netlab: removed stale lab namespaces", "removed", removed)
	}
	prefix, err := newPrefix(opts.Name)
	if err != nil {
		return nil, err
	}
	l := &Lab{opts: opts, prefix: prefix, hub: prefix + "-hub"}
	if err := l.build(ctx); err != nil {
		if cerr := l.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	return l, nil
}

func (l *Lab) build(ctx context.Context) error {
	dir, err := os.MkdirTemp("", l.prefix+"-logs-")
	if err != nil {
		return fmt.Errorf("netlab: temp dir: %w", err)
	}
	l.dir = dir
	l.mu.Lock()
	l.namespaces = append(l.namespaces, l.hub)
	l.mu.Unlock()
	err = createNS(l.hub, func() error {
		// The hub is a switch, not a host: no IPv6 on its ports means no
		// router solicitations or MLD reports of its own in captures.
		for _, k := range []string{"net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"} {
			if err := writeSysctl(k, "1"); err != nil {
				return err
			}
		}
		if err := setLinkUp("lo"); err != nil {
			return err
		}
		return createBridge(bridgeName)
	})
	if err != nil {
		return fmt.Errorf("netlab: hub: %w", err)
	}
	for range l.opts.Nodes {
		if _, err := l.addNode(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Prefix is the unique prefix of every namespace name of this lab
// ("apl<pid>-<hex>" or "apl<pid>-<hex>-<label>"); names are Prefix()+"-hub"
// and Prefix()+"-n<i>".
func (l *Lab) Prefix() string { return l.prefix }

// Hub is the name of the hub namespace, which holds bridge br0 and one port
// per node named after the node ("n0", ...). `ip netns exec <Hub()> tcpdump
// -i br0` sees all lab traffic.
func (l *Lab) Hub() string { return l.hub }

// Bridge is the name of the bridge in the hub namespace.
func (l *Lab) Bridge() string { return bridgeName }

// Dir is the lab's temporary directory holding process logs; Close removes it.
func (l *Lab) Dir() string { return l.dir }

// Processes lists the processes started through the lab so far, running or
// not, in start order.
func (l *Lab) Processes() []*Process {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Process(nil), l.procs...)
}

// HubDo runs fn on a locked OS thread inside the hub namespace; see Node.Do.
func (l *Lab) HubDo(fn func() error) error { return inNS(l.hub, fn) }

// HubStart starts a tracked process inside the hub namespace (for example
// tcpdump on br0); see Node.Start.
func (l *Lab) HubStart(ctx context.Context, name string, args ...string) (*Process, error) {
	return l.start(ctx, l.hub, "hub", name, args...)
}

// AddNode adds one more node (for example a client) to the bridge and
// returns it. It is safe to call concurrently with Close, but not with code
// reading l.Nodes.
func (l *Lab) AddNode(ctx context.Context) (*Node, error) {
	return l.addNode(ctx)
}

func (l *Lab) addNode(ctx context.Context) (*Node, error) {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("netlab: add node: %w", err)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errors.New("netlab: add node: lab is closed")
	}
	i := len(l.Nodes)
	l.mu.Unlock()

	a, err := l.opts.addrs(i)
	if err != nil {
		return nil, err
	}
	n := &Node{
		Index:    i,
		Name:     fmt.Sprintf("n%d", i),
		Iface:    nodeIface,
		MAC:      a.mac,
		IPv4:     a.v4,
		IPv6:     a.v6,
		lab:      l,
		HubIface: fmt.Sprintf("n%d", i),
	}
	n.NS = l.prefix + "-" + n.Name
	l.mu.Lock()
	l.namespaces = append(l.namespaces, n.NS)
	l.mu.Unlock()

	err = createNS(n.NS, func() error {
		// accept_dad=0 before eth0 exists, so eth0 inherits it from
		// "default" and its addresses (including link-local) work at once.
		for _, k := range []string{"net.ipv6.conf.all.accept_dad", "net.ipv6.conf.default.accept_dad"} {
			if err := writeSysctl(k, "0"); err != nil {
				return err
			}
		}
		return setLinkUp("lo")
	})
	if err != nil {
		return nil, fmt.Errorf("netlab: node %s: %w", n.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("netlab: node %s: %w", n.Name, err)
	}

	// Create the pair from inside the hub with the peer placed straight
	// into the node's namespace: neither end ever exists in the root
	// namespace.
	err = inNS(l.hub, func() error {
		fd, err := unix.Open(nsPath(n.NS), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open namespace: %w", err)
		}
		defer unix.Close(fd)
		br, err := netlink.LinkByName(bridgeName)
		if err != nil {
			return fmt.Errorf("bridge: %w", err)
		}
		veth := &netlink.Veth{
			LinkAttrs:        netlink.LinkAttrs{Name: n.HubIface, MasterIndex: br.Attrs().Index},
			PeerName:         n.Iface,
			PeerHardwareAddr: n.MAC,
			PeerNamespace:    netlink.NsFd(fd),
		}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("veth %s/%s: %w", n.HubIface, n.Iface, err)
		}
		return setLinkUp(n.HubIface)
	})
	if err != nil {
		return nil, fmt.Errorf("netlab: node %s: hub side: %w", n.Name, err)
	}
	err = inNS(n.NS, func() error {
		link, err := netlink.LinkByName(n.Iface)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("%s up: %w", n.Iface, err)
		}
		addrs := []*netlink.Addr{{IPNet: prefixToIPNet(n.IPv4)}}
		if n.IPv6.IsValid() {
			addrs = append(addrs, &netlink.Addr{IPNet: prefixToIPNet(n.IPv6), Flags: unix.IFA_F_NODAD})
		}
		for _, a := range addrs {
			if err := netlink.AddrAdd(link, a); err != nil {
				return fmt.Errorf("address %s: %w", a.IPNet, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("netlab: node %s: %w", n.Name, err)
	}
	l.mu.Lock()
	l.Nodes = append(l.Nodes, n)
	l.mu.Unlock()
	return n, nil
}

func prefixToIPNet(p netip.Prefix) *net.IPNet {
	bits := p.Addr().BitLen()
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)}
}

// Close stops every process started through the lab (SIGTERM to its process
// group, SIGKILL after 2 s), kills any other process still inside the lab's
// namespaces (daemons that left their group), deletes the namespaces and the
// log directory. It is idempotent and safe after a partial setup.
func (l *Lab) Close() error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	procs := append([]*Process(nil), l.procs...)
	names := append([]string(nil), l.namespaces...)
	l.mu.Unlock()

	var errs []error
	ids := map[nsID]bool{}
	for _, name := range names {
		if id, err := statNS(nsPath(name)); err == nil {
			ids[id] = true
		}
	}
	if err := stopAll(procs, ids); err != nil {
		errs = append(errs, err)
	}
	// Nodes first, so their veths go before the hub's bridge does.
	for i := len(names) - 1; i >= 0; i-- {
		if err := deleteNS(names[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if l.dir != "" {
		if err := os.RemoveAll(l.dir); err != nil {
			errs = append(errs, fmt.Errorf("netlab: remove %s: %w", l.dir, err))
		}
	}
	return errors.Join(errs...)
}

// stopAll terminates tracked process groups and every process inside the
// namespaces ids: SIGTERM, up to stopGrace for them to go, then SIGKILL.
// Processes are found through /proc rather than by signalling a group id
// blindly, so zombies awaiting their reaper do not count as alive.
func stopAll(procs []*Process, ids map[nsID]bool) error {
	pgids := map[int]bool{}
	for _, p := range procs {
		pgids[p.Pid()] = true
	}
	signalAll := func(sig syscall.Signal) {
		for _, p := range procs {
			if !p.exited() {
				_ = unix.Kill(-p.Pid(), sig)
			}
		}
		for _, pid := range procsIn(ids, pgids) {
			_ = unix.Kill(pid, sig)
		}
	}
	gone := func() bool {
		for _, p := range procs {
			if !p.exited() {
				return false
			}
		}
		return len(procsIn(ids, pgids)) == 0
	}
	if gone() {
		return nil
	}
	signalAll(unix.SIGTERM)
	if waitFor(gone, stopGrace) {
		return nil
	}
	signalAll(unix.SIGKILL)
	if waitFor(gone, 5*time.Second) {
		return nil
	}
	var left []int
	for _, p := range procs {
		if !p.exited() {
			left = append(left, p.Pid())
		}
	}
	left = append(left, procsIn(ids, pgids)...)
	return fmt.Errorf("netlab: processes still alive after SIGKILL: %v", left)
}

// waitFor polls cond until it holds or d passes.
func waitFor(cond func() bool, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for step := time.Millisecond; ; step = min(step*2, 50*time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(step)
	}
}
