package soak

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"appliance/internal/netlab"
)

// Domain is the soak cluster's domain: cluster ocp4, base domain example.com.
const Domain = "ocp4.example.com"

// adminListen is `appliance run`'s admin listener inside every node.
const adminListen = "127.0.0.1:9447"

// The soak's addresses on netlab's default network 192.168.126.0/24.
var (
	apiVIP     = netip.MustParseAddr("192.168.126.5")
	ingressVIP = netip.MustParseAddr("192.168.126.6")
	// day2IP is the day-2 worker's InternalIP: its Node exists in the
	// Kubernetes API only (no machine answers there).
	day2IP = netip.MustParseAddr("192.168.126.40")
	// forwardedA is what the upstream DNS servers answer for forwarded
	// names.
	forwardedA = netip.MustParseAddr("198.51.100.80")
)

// Roles of the soak's nodes.
const (
	roleBootstrap = "bootstrap"
	roleMaster    = "master"
	roleWorker    = "worker"
)

// node is one cluster node of the soak: its namespace, what runs in it and
// what the faults did to it.
type node struct {
	name string // "bootstrap", "master-0", ...
	role string
	n    *netlab.Node
	h    *netlink.Handle // in the node's namespace, for reading its addresses

	mu        sync.Mutex
	procs     map[string]*netlab.Process // "run" (or the classic stack's), "apiserver", "mcs", "router"
	started   []startedProc              // every process started in it, for unplannedExits
	gone      bool                       // torn down (the bootstrap): nothing runs, nothing is checked
	brex      bool                       // its address is on br-ex
	busy      int                        // faults running on it now
	restarted time.Time                  // when its services last started
}

func (nd *node) addr() netip.Addr { return nd.n.IPv4.Addr() }

// proc returns the process key runs, or nil.
func (nd *node) proc(key string) *netlab.Process {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.procs[key]
}

func (nd *node) setProc(key string, p *netlab.Process) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	nd.procs[key] = p
	nd.started = append(nd.started, startedProc{key: key, p: p})
}

// startedProc is a process the soak started, and whether a fault stopped
// it.
type startedProc struct {
	key     string
	p       *netlab.Process
	stopped bool
}

// markStopped notes that a fault stops p.
func (nd *node) markStopped(p *netlab.Process) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	for i := range nd.started {
		if nd.started[i].p == p {
			nd.started[i].stopped = true
		}
	}
}

func (nd *node) isGone() bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.gone
}

// controlPlane reports whether the node runs the API VIP, the LB and an
// apiserver.
func (nd *node) controlPlane() bool { return nd.role != roleWorker }

// holds reports whether the node carries addr on any of its interfaces
// (eth0, or br-ex after a move).
func (nd *node) holds(addr netip.Addr) bool {
	as, err := nd.h.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return false
	}
	for _, a := range as {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr {
			return true
		}
	}
	return false
}

// cluster is the soak's lab: nodes, the client, the upstream DNS servers,
// the Kubernetes API.
type cluster struct {
	ctx   context.Context
	o     *Options
	lab   *netlab.Lab
	nodes []*node // bootstrap, masters, workers
	// client calls the API and asks DNS; dhcpNode hosts the pool clients.
	client, dhcpNode *netlab.Node
	ups              []*upstream
	kube             *kubeAPI // nil: no Kubernetes API
	kubeWhy          string   // why not
	cfgPath          string
	svc              services // what runs the nodes' network services
	// logf prints a live line (the soak's say).
	logf func(format string, args ...any)
}

func (c *cluster) node(name string) *node {
	for _, nd := range c.nodes {
		if nd.name == name {
			return nd
		}
	}
	return nil
}

func (c *cluster) byRole(role string) []*node {
	var out []*node
	for _, nd := range c.nodes {
		if nd.role == role {
			out = append(out, nd)
		}
	}
	return out
}

// live is every node not torn down.
func (c *cluster) live() []*node {
	var out []*node
	for _, nd := range c.nodes {
		if !nd.isGone() {
			out = append(out, nd)
		}
	}
	return out
}

// holders names the live nodes carrying addr.
func (c *cluster) holders(addr netip.Addr) []string {
	var out []string
	for _, nd := range c.nodes {
		if nd.holds(addr) {
			out = append(out, nd.name)
		}
	}
	return out
}

// holderOf is the one node carrying addr, or nil.
func (c *cluster) holderOf(addr netip.Addr) *node {
	var h *node
	for _, nd := range c.nodes {
		if nd.holds(addr) {
			if h != nil {
				return nil
			}
			h = nd
		}
	}
	return h
}

// build creates the namespaces: bootstrap, three masters, two workers, the
// client, the DHCP clients' node and two upstream DNS servers.
func (c *cluster) build() error {
	lab, err := netlab.New(c.ctx, netlab.Options{Nodes: 10, Name: "soak"})
	if err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	c.lab = lab
	names := []struct{ name, role string }{{"bootstrap", roleBootstrap}, {"master-0", roleMaster}, {"master-1", roleMaster},
		{"master-2", roleMaster}, {"worker-0", roleWorker}, {"worker-1", roleWorker}}
	for i, x := range names {
		n := lab.Nodes[i]
		h, err := n.Handle()
		if err != nil {
			return err
		}
		c.nodes = append(c.nodes, &node{name: x.name, role: x.role, n: n, h: h, procs: map[string]*netlab.Process{}})
	}
	c.client, c.dhcpNode = lab.Nodes[6], lab.Nodes[7]
	for i, n := range lab.Nodes[8:10] {
		u, err := startUpstream(n, fmt.Sprintf("upstream-%d", i))
		if err != nil {
			return err
		}
		c.ups = append(c.ups, u)
	}
	return nil
}

// close removes the lab, keeping the appliances' logs in dir first.
func (c *cluster) close(logDir string) error {
	for _, u := range c.ups {
		u.close()
	}
	if logDir != "" && c.lab != nil {
		_ = os.MkdirAll(logDir, 0o755)
		for _, p := range c.lab.Processes() {
			b := filepath.Base(p.LogPath())
			if data, err := os.ReadFile(p.LogPath()); err == nil && len(data) > 0 {
				_ = os.WriteFile(filepath.Join(logDir, b), data, 0o644)
			}
		}
	}
	for _, nd := range c.nodes {
		if nd.h != nil {
			nd.h.Close()
		}
	}
	if c.lab == nil {
		return nil
	}
	return c.lab.Close()
}

// config is the cluster's appliance.yaml. No interface is named, so the
// appliance follows its node's address onto br-ex.
func (c *cluster) config() string {
	var b strings.Builder
	var ups []string
	for _, u := range c.ups {
		ups = append(ups, u.addr.String())
	}
	fmt.Fprintf(&b, `cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: %s
  apiVIPs: [%s]
  ingressVIPs: [%s]
  upstreamDNS: [%s]
nodes:
`, c.nodes[0].n.IPv4.Masked(), apiVIP, ingressVIP, strings.Join(ups, ", "))
	for _, nd := range c.nodes {
		fmt.Fprintf(&b, "  - {name: %s, role: %s, mac: %s, ips: [%s]}\n", nd.name, nd.role, nd.n.MAC, nd.addr())
	}
	start, end := dhcpPool()
	fmt.Fprintf(&b, "lb: {mcs: true}\ndns: {mdns: true}\ndhcp: {enabled: true, leaseTime: 10m, pool: {start: %s, end: %s}}\n", start, end)
	return b.String()
}

// dhcpPool is the dynamic pool: .100 to .119.
func dhcpPool() (netip.Addr, netip.Addr) {
	return netip.MustParseAddr("192.168.126.100"), netip.MustParseAddr("192.168.126.119")
}

// start starts a process of the appliance binary in nd, tracked as key.
func (c *cluster) start(nd *node, key string, args ...string) error {
	return c.startExe(nd, key, c.o.Exe, append([]string{"--log-level", c.o.LogLevel, "--log-format", "text"}, args...)...)
}

// startExe starts program exe in nd, tracked as key.
func (c *cluster) startExe(nd *node, key, exe string, args ...string) error {
	p, err := nd.n.Start(c.ctx, exe, args...)
	if err != nil {
		return fmt.Errorf("soak: %s %s: %w", nd.name, key, err)
	}
	nd.setProc(key, p)
	return nil
}

func (c *cluster) failFile(nd *node) string {
	return filepath.Join(c.lab.Dir(), "fail-readyz-"+nd.name)
}

// startAPIServer starts the stand-in apiserver of a control-plane node
// (`appliance lab apiserver`), passing Kubernetes calls to the real API
// when there is one.
func (c *cluster) startAPIServer(nd *node) error {
	args := []string{"lab", "apiserver", "--listen", ":6443", "--name", nd.name, "--fail-file", c.failFile(nd)}
	if c.kube != nil {
		args = append(args, "--upstream", c.kube.upstream)
	}
	return c.start(nd, "apiserver", args...)
}

func (c *cluster) startMCS(nd *node) error {
	return c.start(nd, "mcs", "lab", "mcs", "--listen", ":22623", "--name", nd.name)
}

func (c *cluster) startRouter(nd *node) error {
	return c.start(nd, "router", "lab", "router", "--name", nd.name)
}

// stop ends nd's process key: SIGTERM and the wait for it (grace, then
// SIGKILL), or SIGKILL at once when kill is set.
func (c *cluster) stop(nd *node, key string, kill bool, grace time.Duration) error {
	p := nd.proc(key)
	if p == nil {
		return nil
	}
	select {
	case <-p.Done():
		return nil // it ended on its own: unplannedExits tells
	default:
	}
	nd.markStopped(p)
	if kill {
		if err := p.Kill(); err != nil {
			return err
		}
		<-p.Done()
		return nil
	}
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.Done():
	case <-time.After(grace):
		_ = p.Kill()
		<-p.Done()
		return fmt.Errorf("soak: %s %s did not exit %s after SIGTERM", nd.name, key, grace)
	}
	return nil
}

// unplannedExits checks every process the soak started in a node: one
// that ended though no fault stopped it (a crash, a fatal error) is a
// violation, with its exit status and last lines.
func (c *cluster) unplannedExits() invariant {
	inv := invariant{Name: "no appliance or stand-in exits but when a fault stops it"}
	for _, nd := range c.nodes {
		nd.mu.Lock()
		started := slices.Clone(nd.started)
		nd.mu.Unlock()
		for _, sp := range started {
			inv.Checks++
			if sp.stopped {
				continue
			}
			select {
			case <-sp.p.Done():
				inv.Violations = append(inv.Violations, fmt.Sprintf("%s's %s (pid %d) exited: %v; its last lines: %s",
					nd.name, sp.key, sp.p.Pid(), sp.p.Wait(), strings.ReplaceAll(tail(sp.p.Output(), 3), "\n", " | ")))
			default:
			}
		}
	}
	return inv
}

// startAll starts every node's stand-ins and services and waits until
// each node's services answer.
func (c *cluster) startAll() error {
	for _, nd := range c.nodes {
		if nd.controlPlane() {
			if err := c.startAPIServer(nd); err != nil {
				return err
			}
			if err := c.startMCS(nd); err != nil {
				return err
			}
		} else if err := c.startRouter(nd); err != nil {
			return err
		}
	}
	if err := c.svc.prepare(c); err != nil {
		return err
	}
	for _, nd := range c.nodes {
		if err := c.svc.start(c, nd); err != nil {
			return err
		}
	}
	for _, nd := range c.nodes {
		if err := c.svc.ready(c, nd, 60*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
