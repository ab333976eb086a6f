package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// Namespace tests of what other programs do to the kernel state a VIP daemon
// relies on (here: NetworkManager, an operator with `ip`, OVN-Kubernetes
// moving the node's address onto br-ex). Bounds are loose; `make bench`
// measures the times.

// holdsOn reports the interface of node n holding vip, or "".
func holdsOn(t testing.TB, n *netlab.Node, vip netip.Addr) string {
	t.Helper()
	h, err := n.Handle()
	if err != nil {
		t.Fatalf("netlink handle in %s: %v", n.Name, err)
	}
	defer h.Close()
	addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatalf("%s: addresses: %v", n.Name, err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == vip {
			if l, err := h.LinkByIndex(a.LinkIndex); err == nil {
				return l.Attrs().Name
			}
			return "?"
		}
	}
	return ""
}

// watchHolders polls until cond holds for the holder set (node index →
// interface), failing the test after timeout; it also fails at once if two
// nodes hold vip at any moment. It returns how long cond took.
func watchHolders(t *testing.T, nodes []*netlab.Node, vip netip.Addr, timeout time.Duration, what string, cond func(map[int]string) bool) time.Duration {
	t.Helper()
	return pollHolders(t, nodes, vip, timeout, what, false, cond)
}

// pollHolders is watchHolders; overlap allows two holders for a moment, as
// in a planned handover (the leaving master keeps the VIP until its
// successor, which installed it first, advertises).
func pollHolders(t *testing.T, nodes []*netlab.Node, vip netip.Addr, timeout time.Duration, what string, overlap bool, cond func(map[int]string) bool) time.Duration {
	t.Helper()
	start := time.Now()
	var got map[int]string
	for time.Since(start) < timeout {
		got = map[int]string{}
		for _, n := range nodes {
			if ifname := holdsOn(t, n, vip); ifname != "" {
				got[n.Index] = ifname
			}
		}
		if len(got) > 1 && !overlap {
			t.Fatalf("%s: two nodes hold %s at once: %v", what, vip, got)
		}
		if cond(got) {
			return time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s; holders %v", what, timeout, got)
	return 0
}

func heldBy(node int, ifname string) func(map[int]string) bool {
	return func(h map[int]string) bool { return len(h) == 1 && h[node] == ifname }
}

func TestVIPDeletedFromUnderTheMasterIsRestored(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "vipdel"})
	procs := startCluster(t, lab, []int{100, 90})
	waitHolder(t, lab.Nodes, labVIP, 0, 10*time.Second, 500*time.Millisecond)

	for round := range 3 {
		netlabtest.Run(t, lab.Nodes[0], "ip", "addr", "del", prefixOf(lab, labVIP), "dev", "eth0")
		took := watchHolders(t, lab.Nodes, labVIP, 2*time.Second, "the VIP back on n0", heldBy(0, "eth0"))
		t.Logf("round %d: VIP restored after %s", round, took.Round(time.Millisecond))
	}
	// It stays with n0 (n1 never took over meanwhile) and the repair was logged.
	waitHolder(t, lab.Nodes, labVIP, 0, 2*time.Second, 500*time.Millisecond)
	if out := procs["n0"].Output(); grepLines(out, "removed from under us; put back") == "" {
		t.Errorf("no repair line in n0's log:\n%s", out)
	}
}

func TestVIPMasterLosingItsAddressHandsOver(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "vipsrc"})
	procs := startCluster(t, lab, []int{100, 90})
	waitHolder(t, lab.Nodes, labVIP, 0, 10*time.Second, 500*time.Millisecond)

	// Deleting the primary address also deletes the VIP, its secondary.
	own := lab.Nodes[0].IPv4.String()
	netlabtest.Run(t, lab.Nodes[0], "ip", "addr", "del", own, "dev", "eth0")
	took := watchHolders(t, lab.Nodes, labVIP, 3*time.Second, "n1 holding the VIP", heldBy(1, "eth0"))
	t.Logf("n1 held the VIP %s after n0 lost its address", took.Round(time.Millisecond))
	waitHolder(t, lab.Nodes, labVIP, 1, 2*time.Second, 500*time.Millisecond)
	if out := procs["n0"].Output(); grepLines(out, "FAULT") == "" {
		t.Errorf("n0 did not report FAULT:\n%s", grepLines(out, "state"))
	}

	// The address is back: n0 rejoins and, with the higher priority, preempts.
	netlabtest.Run(t, lab.Nodes[0], "ip", "addr", "add", own, "dev", "eth0")
	// Preemption: the new master installs the VIP before its advert makes
	// the old one release it, so both hold it for that instant.
	pollHolders(t, lab.Nodes, labVIP, 5*time.Second, "n0 holding the VIP again", true, heldBy(0, "eth0"))
	waitHolder(t, lab.Nodes, labVIP, 0, 5*time.Second, 500*time.Millisecond)
}

// bridgeMoveLab runs two masters on eth0 with no interface pinned and
// returns which node holds the VIP and each node's process.
func bridgeMoveLab(t *testing.T, name string) (lab *netlab.Lab, holder int, procs []*netlab.Process) {
	t.Helper()
	lab = netlabtest.New(t, netlab.Options{Nodes: 2, Name: name})
	byName := map[string]*netlab.Process{}
	dumpOnFailure(t, byName)
	conf := fmt.Sprintf(`cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: %s
  apiVIPs: [%s]
nodes:
  - {name: master-0, role: master, ips: [%s]}
  - {name: master-1, role: master, ips: [%s]}
vrrp: {advertInterval: 100ms}
`, lab.Nodes[0].IPv4.Masked(), labVIP, lab.Nodes[0].IPv4.Addr(), lab.Nodes[1].IPv4.Addr())
	cfgPath := writeFile(t, "appliance.yaml", conf)
	for i, name := range []string{"master-0", "master-1"} {
		byName[name] = startAppliance(t, lab.Nodes[i], "vip", "--config", cfgPath, "--node", name)
		procs = append(procs, byName[name])
	}
	return lab, waitOneHolder(t, lab.Nodes, labVIP, 10*time.Second, 500*time.Millisecond), procs
}

// moveOntoBridge moves n's address from eth0 onto a new br-ex with eth0 as
// its port, as OVN-Kubernetes does.
func moveOntoBridge(t *testing.T, n *netlab.Node) {
	own := n.IPv4.String()
	netlabtest.Run(t, n, "ip", "link", "add", "br-ex", "type", "bridge")
	netlabtest.Run(t, n, "ip", "link", "set", "eth0", "master", "br-ex")
	netlabtest.Run(t, n, "ip", "addr", "del", own, "dev", "eth0")
	netlabtest.Run(t, n, "ip", "addr", "add", own, "dev", "br-ex")
	netlabtest.Run(t, n, "ip", "link", "set", "br-ex", "up")
}

// With no interface pinned, the node's address moving onto a new bridge (the
// NIC becomes its port, as OVN-Kubernetes does with br-ex) moves the VRRP
// instance with it.
func TestVIPFollowsTheAddressOntoABridge(t *testing.T) {
	lab, holder, procs := bridgeMoveLab(t, "vipbrex")
	n1 := lab.Nodes[holder]
	moveOntoBridge(t, n1)
	// The mover has no address for a moment: the other node takes over.
	other := 1 - holder
	took := watchHolders(t, lab.Nodes, labVIP, 3*time.Second, "the other node holding the VIP", heldBy(other, "eth0"))
	t.Logf("%s held the VIP %s after the move began", lab.Nodes[other].Name, took.Round(time.Millisecond))
	// The mover rejoined on br-ex as a backup that hears the master: the
	// VIP stays where it is...
	time.Sleep(time.Second)
	watchHolders(t, lab.Nodes, labVIP, time.Second, "the VIP staying put", heldBy(other, "eth0"))
	// ...and when the master leaves, the mover takes over on br-ex.
	procs[other].Signal(syscall.SIGTERM)
	took = pollHolders(t, lab.Nodes, labVIP, 3*time.Second, "the mover holding the VIP on br-ex", true, heldBy(holder, "br-ex"))
	t.Logf("%s took over on br-ex %s after the master left", n1.Name, took.Round(time.Millisecond))
	if out := procs[holder].Output(); grepLines(out, "moving to another interface") == "" {
		t.Errorf("no move line in the mover's log:\n%s", out)
	}
}

// The address moving back off the bridge (br-ex emptied, which takes its
// carrier down, then deleted; the address back on eth0): the instance moves
// back and is a candidate again. The fault soak found it staying in FAULT:
// br-ex's carrier loss was kept as "eth0 is down", so when the master's
// adverts stopped nobody took the VIP.
func TestVIPFollowsTheAddressBackOffABridge(t *testing.T) {
	lab, holder, _ := bridgeMoveLab(t, "vipbrback")
	mover, other := lab.Nodes[holder], 1-holder
	moveOntoBridge(t, mover)
	watchHolders(t, lab.Nodes, labVIP, 3*time.Second, "the other node holding the VIP", heldBy(other, "eth0"))
	time.Sleep(time.Second)
	own := mover.IPv4.String()
	netlabtest.Run(t, mover, "ip", "addr", "del", own, "dev", "br-ex")
	netlabtest.Run(t, mover, "ip", "link", "set", "eth0", "nomaster")
	netlabtest.Run(t, mover, "ip", "link", "del", "br-ex")
	netlabtest.Run(t, mover, "ip", "addr", "add", own, "dev", "eth0")
	time.Sleep(time.Second)
	watchHolders(t, lab.Nodes, labVIP, time.Second, "the VIP staying put", heldBy(other, "eth0"))
	// The master's link goes down (no priority-0 goodbye reaches the
	// mover): the takeover must come from the mover's own Master_Down
	// timer.
	netlabtest.Run(t, lab.Nodes[other], "ip", "link", "set", "eth0", "down")
	took := pollHolders(t, lab.Nodes, labVIP, 3*time.Second, "the mover holding the VIP on eth0 again", true, heldBy(holder, "eth0"))
	t.Logf("%s took over on eth0 %s after the master's link went down", mover.Name, took.Round(time.Millisecond))
}

// A node whose link is down when its instance starts is in FAULT from the
// start: no link event comes for a link that does not change, so the
// instance reads the state when it opens the interface. Taken for up, it
// would hear no adverts and take the VIP on a link nobody reaches while
// the other node holds it too. Once the link is up it rejoins and, with
// the higher priority, preempts.
func TestVIPStartsInFaultOnADownLink(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "vipdown"})
	netlabtest.Run(t, lab.Nodes[0], "ip", "link", "set", "eth0", "down")
	startCluster(t, lab, []int{100, 90})
	waitHolder(t, lab.Nodes, labVIP, 1, 10*time.Second, 2*time.Second)
	if vs := vipsOf(t, lab.Nodes[0]); len(vs) != 1 || vs[0].State != "FAULT" || !strings.Contains(vs[0].Fault, "eth0 is down") {
		t.Fatalf("n0 started on a down eth0: %+v; want FAULT, eth0 down", vs)
	}
	netlabtest.Run(t, lab.Nodes[0], "ip", "link", "set", "eth0", "up")
	pollHolders(t, lab.Nodes, labVIP, 5*time.Second, "n0 holding the VIP once its link is up", true, heldBy(0, "eth0"))
	waitHolder(t, lab.Nodes, labVIP, 0, 5*time.Second, 500*time.Millisecond)
}

// An interface deleted and created again (a bridge or bond rebuilt by
// NetworkManager) is a FAULT while it is gone and is opened again when it
// is back, with its new index.
func TestVIPInterfaceDeletedAndRecreated(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "vipre"})
	n0, n1 := lab.Nodes[0], lab.Nodes[1]
	own := n1.IPv4.String()
	bridge := func() {
		netlabtest.Run(t, n1, "ip", "link", "add", "br-ex", "type", "bridge")
		netlabtest.Run(t, n1, "ip", "link", "set", "eth0", "master", "br-ex")
		netlabtest.Run(t, n1, "ip", "addr", "add", own, "dev", "br-ex")
		netlabtest.Run(t, n1, "ip", "link", "set", "br-ex", "up")
	}
	netlabtest.Run(t, n1, "ip", "addr", "del", own, "dev", "eth0")
	bridge()
	procs := map[string]*netlab.Process{}
	dumpOnFailure(t, procs)
	procs["n0"] = startAppliance(t, n0, vipArgs(lab, 90)...)
	args := vipArgs(lab, 100)
	for i, a := range args {
		if a == "eth0" {
			args[i] = "br-ex"
		}
	}
	procs["n1"] = startAppliance(t, n1, args...)
	// At start n0 may be master for a moment until n1 (higher priority)
	// preempts: both hold the VIP for the instant of the preemption.
	pollHolders(t, lab.Nodes, labVIP, 10*time.Second, "n1 holding the VIP on br-ex", true, heldBy(1, "br-ex"))
	time.Sleep(500 * time.Millisecond)
	watchHolders(t, lab.Nodes, labVIP, time.Second, "n1 keeping the VIP on br-ex", heldBy(1, "br-ex"))

	netlabtest.Run(t, n1, "ip", "link", "del", "br-ex")
	took := watchHolders(t, lab.Nodes, labVIP, 3*time.Second, "n0 holding the VIP", heldBy(0, "eth0"))
	t.Logf("n0 held the VIP %s after br-ex was deleted", took.Round(time.Millisecond))

	bridge()
	took = pollHolders(t, lab.Nodes, labVIP, 10*time.Second, "n1 holding the VIP on the new br-ex", true, heldBy(1, "br-ex"))
	t.Logf("n1 took the VIP back %s after br-ex was created again", took.Round(time.Millisecond))
	if out := procs["n1"].Output(); grepLines(out, "sockets re-opened") == "" {
		t.Errorf("no re-open line in n1's log:\n%s", grepLines(out, "vrrp"))
	}
}
