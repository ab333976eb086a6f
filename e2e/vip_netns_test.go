package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// Namespace tests of `appliance vip`: real kernels, real raw sockets, the real
// binary. Timeouts are loose (10x the expected figures); precise numbers come
// from `make bench`.

// vipArgs are the flags of one lab node's VIP daemon.
func vipArgs(lab *netlab.Lab, prio int, extra ...string) []string {
	return append([]string{"vip", "--interface", "eth0", "--vip", prefixOf(lab, labVIP),
		"--vrid", "51", "--priority", strconv.Itoa(prio), "--advert-interval", "100ms",
		"--admin-listen", "127.0.0.1:9447"}, extra...)
}

// startCluster starts one VIP daemon per node with the given priorities.
func startCluster(t *testing.T, lab *netlab.Lab, prios []int, extra ...string) map[string]*netlab.Process {
	t.Helper()
	procs := map[string]*netlab.Process{}
	dumpOnFailure(t, procs)
	for i, p := range prios {
		n := lab.Nodes[i]
		procs[n.Name] = startAppliance(t, n, vipArgs(lab, p, extra...)...)
	}
	return procs
}

func TestVIPElectsOneMasterAndFailsOver(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "vipel"})
	procs := startCluster(t, lab, []int{100, 90, 80})

	waitHolder(t, lab.Nodes, labVIP, 0, 10*time.Second, time.Second)

	// kill -9: no priority-0 advert; a backup must take over after Master_Down.
	if err := procs["n0"].Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitHolder(t, lab.Nodes[1:], labVIP, 1, 5*time.Second, 500*time.Millisecond)
	t.Logf("kill -9 failover observed within %s (incl. settle)", time.Since(start).Round(time.Millisecond))

	// The killed daemon left its VIP behind (nobody ran its cleanup); a
	// restart must remove that stale copy and then preempt as the highest
	// priority, leaving exactly one holder.
	procs["n0-restart"] = startAppliance(t, lab.Nodes[0], vipArgs(lab, 100)...)
	waitHolder(t, lab.Nodes, labVIP, 0, 10*time.Second, time.Second)
}

func TestVIPSigtermHandsOverAtOnce(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "vipterm"})
	procs := startCluster(t, lab, []int{100, 90, 80})
	waitOneHolder(t, lab.Nodes, labVIP, 10*time.Second, time.Second)

	if err := procs["n0"].Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	deadline := start.Add(3 * time.Second)
	// The leaving master holds the VIP until its successor advertises, and
	// the successor installs the VIP before advertising: at no moment may
	// nobody hold it. (Nodes are checked in order n0, n1, so a release by n0
	// between the two checks is still seen with n1 already holding.)
	for {
		h := holders(t, lab.Nodes[:2], labVIP)
		if len(h) == 0 {
			t.Fatalf("nobody held the VIP %s after SIGTERM: a planned handover must not leave a gap", time.Since(start))
		}
		if slices.Equal(h, []int{1}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n1 did not take over within 3s of SIGTERM to the master; holders %v", h)
		}
		time.Sleep(time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("planned handover took %s", took.Round(time.Millisecond))
	// Master_Down at 100 ms is ~360 ms; a priority-0 advert must beat it.
	if took > 2*time.Second {
		t.Errorf("handover took %s; the priority-0 advert should make it a few intervals at most", took)
	}
	if err := procs["n0"].Wait(); err != nil {
		t.Errorf("n0 should exit cleanly on SIGTERM: %v", err)
	}
	if holds(t, lab.Nodes[0], labVIP) {
		t.Error("n0 still holds the VIP after exiting")
	}
	waitHolder(t, lab.Nodes, labVIP, 1, 5*time.Second, 500*time.Millisecond)
}

func TestVIPPartitionHeals(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "vippart"})
	startCluster(t, lab, []int{100, 90, 80})
	waitOneHolder(t, lab.Nodes, labVIP, 10*time.Second, time.Second)

	if err := lab.Nodes[0].LinkDown(); err != nil {
		t.Fatal(err)
	}
	waitHolder(t, lab.Nodes[1:], labVIP, 1, 5*time.Second, 500*time.Millisecond)
	if err := lab.Nodes[0].LinkUp(); err != nil {
		t.Fatal(err)
	}
	// n0 comes back with the highest priority and preempts; what matters is
	// that exactly one node holds the VIP once the partition has healed.
	waitHolder(t, lab.Nodes, labVIP, 0, 10*time.Second, 2*time.Second)
}

func TestVIPNoPreempt(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "vipnop"})
	procs := map[string]*netlab.Process{}
	dumpOnFailure(t, procs)
	procs["n1"] = startAppliance(t, lab.Nodes[1], vipArgs(lab, 50, "--no-preempt")...)
	waitOneHolder(t, lab.Nodes, labVIP, 10*time.Second, 500*time.Millisecond)
	procs["n0"] = startAppliance(t, lab.Nodes[0], vipArgs(lab, 200, "--no-preempt")...)
	waitHolder(t, lab.Nodes, labVIP, 1, 10*time.Second, 2*time.Second)
}

func TestVIPTrackFailureMovesVIP(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "viptrk"})
	procs := map[string]*netlab.Process{}
	dumpOnFailure(t, procs)
	procs["http0"] = startHTTP(t, lab.Nodes[0], freePort)
	procs["http1"] = startHTTP(t, lab.Nodes[1], freePort)
	track := fmt.Sprintf("http://%s/healthz:-50", freePort)
	procs["n0"] = startAppliance(t, lab.Nodes[0], vipArgs(lab, 100, "--track-http", track)...)
	procs["n1"] = startAppliance(t, lab.Nodes[1], vipArgs(lab, 90, "--track-http", track)...)
	waitHolder(t, lab.Nodes, labVIP, 0, 10*time.Second, time.Second)
	if err := procs["http0"].Kill(); err != nil {
		t.Fatal(err)
	}
	// Fall 2 at 1 s: about 2 s to notice, then n0 advertises 50 and n1 (90) preempts.
	waitHolder(t, lab.Nodes, labVIP, 1, 15*time.Second, time.Second)
	// A weight-0 check puts a node in FAULT: it never claims the VIP, even alone.
	procs["n1"].Signal(syscall.SIGTERM)
	procs["n1"].Wait()
	procs["n0"].Signal(syscall.SIGTERM)
	procs["n0"].Wait()
	procs["n0-fault"] = startAppliance(t, lab.Nodes[0], vipArgs(lab, 100,
		"--track-http", fmt.Sprintf("http://%s/healthz:0", freePort), "--admin-listen", "127.0.0.1:9448")...)
	time.Sleep(2 * time.Second)
	if h := holders(t, lab.Nodes, labVIP); len(h) != 0 {
		t.Errorf("a node whose weight-0 check fails must stay in FAULT; holders %v", h)
	}
	status, err := nodeHTTPGet(lab.Nodes[0], "127.0.0.1:9448", "/status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(status, `"state": "FAULT"`) || !strings.Contains(status, "weight 0") {
		t.Errorf("/status should show FAULT and why:\n%s", status)
	}
}

func TestVIPIPv6(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "vip6", IPv6: netip.MustParsePrefix("fd00:126::/64")})
	vip6 := netip.MustParseAddr("fd00:126::5")
	procs := map[string]*netlab.Process{}
	dumpOnFailure(t, procs)
	for i, prio := range []int{100, 90} {
		procs[lab.Nodes[i].Name] = startAppliance(t, lab.Nodes[i], "vip", "--interface", "eth0",
			"--vip", "fd00:126::5/64", "--vrid", "51", "--priority", strconv.Itoa(prio), "--advert-interval", "100ms")
	}
	waitHolder(t, lab.Nodes, vip6, 0, 15*time.Second, time.Second)
	// A client keeps reaching the VIP across a link cut of the master
	// (unsolicited NA moves the neighbour entry).
	if err := lab.Nodes[0].LinkDown(); err != nil {
		t.Fatal(err)
	}
	waitHolder(t, lab.Nodes[1:], vip6, 1, 5*time.Second, 500*time.Millisecond)
	client, err := lab.AddNode(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if out, err := client.Run(t.Context(), "ping", "-6", "-c", "1", "-W", "2", vip6.String()); err != nil {
		t.Fatalf("client cannot reach the IPv6 VIP on its new holder: %v\n%s", err, out)
	}
}

func TestVIPUnicast(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "vipuc"})
	procs := map[string]*netlab.Process{}
	dumpOnFailure(t, procs)
	// n0 and n1 peer by unicast; n2 speaks on the same VRID but is nobody's
	// configured peer: its adverts must be dropped as unknown_peer.
	peerArgs := func(i int) []string {
		var args []string
		for j := 0; j < 2; j++ {
			if j != i {
				args = append(args, "--unicast-peer", lab.Nodes[j].IPv4.Addr().String())
			}
		}
		return args
	}
	procs["n0"] = startAppliance(t, lab.Nodes[0], vipArgs(lab, 100, peerArgs(0)...)...)
	procs["n1"] = startAppliance(t, lab.Nodes[1], vipArgs(lab, 90, peerArgs(1)...)...)
	waitHolder(t, lab.Nodes[:2], labVIP, 0, 10*time.Second, time.Second)
	procs["n2-intruder"] = startAppliance(t, lab.Nodes[2], vipArgs(lab, 200, "--unicast-peer", lab.Nodes[0].IPv4.Addr().String())...)
	time.Sleep(time.Second)
	metrics, err := nodeHTTPGet(lab.Nodes[0], "127.0.0.1:9447", "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(metrics, `appliance_vrrp_drops_total{reason="unknown_peer",vip="vrid-51"}`) {
		t.Errorf("n0 should count the intruder's adverts as unknown_peer drops:\n%s", grepLines(metrics, "drops"))
	}
	// n0 keeps the VIP: the higher-priority intruder is not a peer.
	if h := holders(t, lab.Nodes[:2], labVIP); len(h) != 1 || h[0] != 0 {
		t.Errorf("holders among the peers %v, want [0]", h)
	}
	// Failover over unicast.
	procs["n0"].Signal(syscall.SIGTERM)
	waitHolder(t, lab.Nodes[:2], labVIP, 1, 5*time.Second, 500*time.Millisecond)
}

func TestVIPCollisionIsReported(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "vipcol"})
	procs := map[string]*netlab.Process{}
	dumpOnFailure(t, procs)
	procs["n0"] = startAppliance(t, lab.Nodes[0], vipArgs(lab, 100)...)
	// Another "cluster" uses VRID 51 for another VIP on the same segment.
	procs["n1"] = startAppliance(t, lab.Nodes[1], "vip", "--interface", "eth0", "--vip", "192.168.126.77/24",
		"--vrid", "51", "--priority", "150", "--advert-interval", "100ms")
	waitHolder(t, lab.Nodes, labVIP, 0, 10*time.Second, time.Second)
	status, err := nodeHTTPGet(lab.Nodes[0], "127.0.0.1:9447", "/status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(status, "VRID 51 collision") || !strings.Contains(status, "192.168.126.11") {
		t.Errorf("/status should report the VRID collision and the peer:\n%s", status)
	}
	// `appliance status` renders the same for a person.
	out, err := lab.Nodes[0].Run(t.Context(), appliance(t), "status")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("appliance status:\n%s", out)
	if !strings.Contains(out, "MASTER") || !strings.Contains(out, "collision") {
		t.Errorf("appliance status should show MASTER and the collision:\n%s", out)
	}
	if !strings.Contains(procs["n0"].Output(), "VRID collision") {
		t.Error("the collision should be logged")
	}
	// Each keeps its own VIP: a foreign router's adverts do not demote us.
	if !holds(t, lab.Nodes[1], netip.MustParseAddr("192.168.126.77")) {
		t.Error("n1 should hold its own VIP")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
