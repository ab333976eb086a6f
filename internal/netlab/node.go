package netlab

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
)

// Node is one host of a lab: its own network namespace with eth0 on the
// lab's bridge. Fields are fixed once the node exists.
type Node struct {
	// Index is the node's position in Lab.Nodes.
	Index int
	// Name is "n0", "n1", ...
	Name string
	// NS is the node's namespace name under /run/netns, usable with
	// `ip netns exec`.
	NS string
	// Iface is the node's interface on the bridge, "eth0".
	Iface string
	// HubIface is the other end of the node's veth: a port of the bridge
	// in the hub namespace, named like the node ("n0").
	HubIface string
	// MAC is eth0's hardware address.
	MAC net.HardwareAddr
	// IPv4 and IPv6 are eth0's addresses with the lab's prefix length;
	// IPv6 is the zero Prefix when the lab has no IPv6.
	IPv4, IPv6 netip.Prefix

	lab *Lab
}

// String returns the node's name.
func (n *Node) String() string { return n.Name }

// Addrs returns the node's addresses (IPv4 first), without prefix length.
func (n *Node) Addrs() []netip.Addr {
	out := []netip.Addr{n.IPv4.Addr()}
	if n.IPv6.IsValid() {
		out = append(out, n.IPv6.Addr())
	}
	return out
}

// Do runs fn on an OS thread locked inside the node's namespace: sockets
// fn opens and netlink calls it makes belong to the node. fn runs on a
// fresh goroutine whose thread is discarded afterwards, so the caller's
// thread never changes namespace and nothing can leak into the root
// namespace. Hence fn must not call t.FailNow/t.Fatal; goroutines fn starts
// run in the root namespace; a panic in fn is re-raised in the caller.
func (n *Node) Do(fn func() error) error {
	return inNS(n.NS, fn)
}

// DialTimeout connects to addr over network ("tcp", "udp", ...) from
// inside the node's namespace, as net.DialTimeout does (timeout 0: the
// system's); the connection stays the node's and may be used from any
// goroutine.
func (n *Node) DialTimeout(network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
		var err error
		c, err = net.DialTimeout(network, addr, timeout)
		return err
	})
	return c, err
}

// Handle returns a netlink handle whose sockets live in the node's
// namespace; it may be used from any goroutine. The caller closes it.
func (n *Node) Handle() (*netlink.Handle, error) {
	var h *netlink.Handle
	err := inNS(n.NS, func() error {
		var err error
		h, err = netlink.NewHandle()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netlab: %s: netlink handle: %w", n.Name, err)
	}
	return h, nil
}

// Sysctl sets a sysctl in the node's namespace, e.g.
// Sysctl("net.ipv4.ip_nonlocal_bind", "1"). A key containing "/" is taken
// as a path below /proc/sys (for interface names with dots).
func (n *Node) Sysctl(key, value string) error {
	return inNS(n.NS, func() error { return writeSysctl(key, value) })
}

// ReadSysctl reads a sysctl of the node's namespace.
func (n *Node) ReadSysctl(key string) (string, error) {
	var v string
	err := inNS(n.NS, func() error {
		var err error
		v, err = readSysctl(key)
		return err
	})
	return v, err
}

// Command returns `ip netns exec <NS> name args...` in its own process
// group, so the whole group can be signalled; cancelling ctx SIGKILLs the
// group. The process is not tracked by the lab (use Start for that), but
// Close still kills it if it is inside the node's namespace then. Start it
// with StartCommand so it dies with this process.
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return nsCommand(ctx, n.NS, name, args...)
}

// StartCommand starts cmd from the lab's spawner thread. Commands made by
// Command carry Pdeathsig (SIGKILL when the starting OS thread exits, so a
// killed test binary takes its children along); the kernel ties that to the
// thread, not the process, and Go retires any thread a goroutine ends on
// while locked (as Do and Handle do). Starting every child from one thread
// that stays locked for the life of the process makes Pdeathsig mean "when
// this process dies".
func StartCommand(cmd *exec.Cmd) error {
	spawnerOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: this thread lives as long as the process
			for r := range spawnReqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnReqs <- spawnReq{cmd: cmd, done: done}
	return <-done
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnerOnce sync.Once
	spawnReqs   chan spawnReq
)

func nsCommand(ctx context.Context, ns, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	// Bounds Wait when a background child keeps the output pipe open.
	cmd.WaitDelay = stopGrace
	return cmd
}

// Start starts name inside the node and tracks it: Close stops it. Its
// stdout and stderr go to a file in the lab's directory (see
// Process.Output). Cancelling ctx SIGKILLs its process group.
func (n *Node) Start(ctx context.Context, name string, args ...string) (*Process, error) {
	return n.lab.start(ctx, n.NS, n.Name, name, args...)
}

// Run runs name inside the node to completion and returns its combined
// output; the error includes the output.
func (n *Node) Run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := n.Command(ctx, name, args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := StartCommand(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	out := buf.Bytes()
	if err != nil {
		return string(out), fmt.Errorf("netlab: %s: %s %s: %w\n%s",
			n.Name, name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// LinkDown sets the hub side of the node's veth down: the node is cut off
// from the bridge, like a pulled cable. The node's eth0 stays
// administratively UP and keeps its addresses (IPv4, IPv6 and link-local)
// but loses carrier: flags NO-CARRIER without LOWER_UP, operstate "down",
// /sys/class/net/eth0/carrier 0, and the kernel flags its connected routes
// "linkdown". Programs watching link state see the failure. Use Partition
// to cut traffic while carrier stays up.
func (n *Node) LinkDown() error {
	return n.hubLink(false)
}

// LinkUp undoes LinkDown. Carrier returns at once and, with STP off, the
// bridge port forwards immediately (it also leaves any Partition state).
func (n *Node) LinkUp() error {
	return n.hubLink(true)
}

func (n *Node) hubLink(up bool) error {
	err := inNS(n.lab.hub, func() error {
		link, err := netlink.LinkByName(n.HubIface)
		if err != nil {
			return err
		}
		if up {
			return netlink.LinkSetUp(link)
		}
		return netlink.LinkSetDown(link)
	})
	if err != nil {
		return fmt.Errorf("netlab: %s: set hub port %s up=%v: %w", n.Name, n.HubIface, up, err)
	}
	return nil
}

// Partition puts the node's bridge port into the disabled state: no frame
// passes in either direction, yet both veth ends keep carrier, so the node
// sees a healthy link and hears nothing (split brain, a failed switch
// beyond the first hop). Heal undoes it; so does any carrier change of the
// port (LinkDown/LinkUp).
func (n *Node) Partition() error {
	return n.portState(brStateDisabled)
}

// Heal undoes Partition.
func (n *Node) Heal() error {
	return n.portState(brStateForwarding)
}

func (n *Node) portState(state uint8) error {
	err := inNS(n.lab.hub, func() error { return setBridgePortState(n.HubIface, state) })
	if err != nil {
		return fmt.Errorf("netlab: %s: %w", n.Name, err)
	}
	return nil
}
