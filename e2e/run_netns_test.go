package e2e

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// Whole-cluster tests of `appliance run`: bootstrap and masters each run the
// all-in-one process next to a stand-in API server, and a client calls the
// API through the VIP the whole time.

// runCluster writes the config of a bootstrap node and masters on the lab's
// first nodes, and starts a stand-in API server and `appliance run` on each.
type runCluster struct {
	lab   *netlab.Lab
	names []string
	procs map[string]*netlab.Process
	cfg   string
}

func startRunCluster(t *testing.T, lab *netlab.Lab, masters int) *runCluster {
	return startRunClusterVIPs(t, lab, masters, netip.Addr{})
}

// startRunClusterVIPs is startRunCluster, dual-stack when vip6 is set: the
// lab's IPv6 network is a machine network too, every node lists both
// addresses and vip6 is the second API VIP.
func startRunClusterVIPs(t *testing.T, lab *netlab.Lab, masters int, vip6 netip.Addr) *runCluster {
	t.Helper()
	rc := &runCluster{lab: lab, procs: map[string]*netlab.Process{}}
	dumpOnFailure(t, rc.procs)
	var nodes strings.Builder
	for i := 0; i <= masters; i++ {
		name, role := fmt.Sprintf("master-%d", i-1), "master"
		if i == 0 {
			name, role = "bootstrap", "bootstrap"
		}
		rc.names = append(rc.names, name)
		ips := lab.Nodes[i].IPv4.Addr().String()
		if vip6.IsValid() {
			ips += ", " + lab.Nodes[i].IPv6.Addr().String()
		}
		fmt.Fprintf(&nodes, "  - {name: %s, role: %s, ips: [%s]}\n", name, role, ips)
	}
	cidrs, vips := lab.Nodes[0].IPv4.Masked().String(), labVIP.String()
	if vip6.IsValid() {
		cidrs += ", " + lab.Nodes[0].IPv6.Masked().String()
		vips += ", " + vip6.String()
	}
	rc.cfg = writeFile(t, "appliance.yaml", fmt.Sprintf(`cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDRs: [%s]
  apiVIPs: [%s]
  ingressVIPs: [192.168.126.6]
  upstreamDNS: [192.168.126.1]
nodes:
%svrrp: {advertInterval: 100ms}
lb: {mcs: false}
`, cidrs, vips, nodes.String()))
	for i, name := range rc.names {
		n := lab.Nodes[i]
		rc.procs["apiserver-"+name] = startApplianceQuiet(t, n, "lab", "apiserver", "--listen", ":6443",
			"--name", name, "--fail-file", rc.failFile(name))
		rc.procs[name] = startApplianceQuiet(t, n, "run", "--config", rc.cfg, "--node", name)
	}
	return rc
}

// watchMoves counts how often the holder of vip changes among nodes until
// the test ends; the returned function reads the count so far.
func watchMoves(t *testing.T, nodes []*netlab.Node, vip netip.Addr) func() int {
	var mu sync.Mutex
	moves := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := -1
		for {
			if h := holders(t, nodes, vip); len(h) == 1 && h[0] != last {
				if last >= 0 {
					mu.Lock()
					moves++
					mu.Unlock()
				}
				last = h[0]
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return moves
	}
}

func (rc *runCluster) failFile(name string) string {
	return filepath.Join(rc.lab.Dir(), "fail-readyz-"+name)
}

func TestRunBootstrapHandover(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 5, Name: "runho"})
	rc := startRunCluster(t, lab, 3)
	client := lab.Nodes[4]

	// The bootstrap outranks the masters while its own apiserver and LB serve.
	waitHolder(t, lab.Nodes[:4], labVIP, 0, 30*time.Second, 2*time.Second)
	caller := startAPICaller(t, client, labVIP.String()+":6443", 20*time.Millisecond)
	// One connection opened through the bootstrap's LB and kept: the
	// masters pass it back to the bootstrap after each move (lb.Handback)
	// while its LB serves and then drains.
	kept := startKeptCaller(t, client, labVIP.String()+":6443", 20*time.Millisecond)
	moves := watchMoves(t, lab.Nodes[:4], labVIP)
	time.Sleep(time.Second)

	// The bootstrap's apiserver stops answering /readyz for good: a master
	// takes the API VIP.
	if err := writeFileAt(rc.failFile("bootstrap"), "failing"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	master := -1
	for time.Since(start) < 15*time.Second {
		if h := holders(t, lab.Nodes[:4], labVIP); len(h) == 1 && h[0] != 0 {
			master = h[0]
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if master < 0 {
		t.Fatalf("the bootstrap kept the API VIP for 15 s after its apiserver stopped answering /readyz; holders %v",
			holders(t, lab.Nodes[:4], labVIP))
	}
	t.Logf("%s took the API VIP from the bootstrap %s after its /readyz failed", rc.names[master], time.Since(start).Round(time.Millisecond))
	waitHolder(t, lab.Nodes[:4], labVIP, master, 5*time.Second, time.Second)

	// The bootstrap is torn down: its appliance gets SIGTERM. Its LB
	// drains while the kept connection lives; the client ends it a second
	// into the drain, as a client that reconnects would.
	kept.mark()
	rc.procs["bootstrap"].Signal(syscall.SIGTERM)
	time.Sleep(time.Second)
	kept.close()
	if err := rc.procs["bootstrap"].Wait(); err != nil {
		t.Errorf("the bootstrap's appliance should exit cleanly on SIGTERM: %v", err)
	}
	keptOK, keptSince, keptErrs := kept.result()
	t.Logf("kept connection: %d calls answered, %d of them after the SIGTERM; errors %q", keptOK, keptSince, keptErrs)
	if len(keptErrs) > 0 || keptSince == 0 {
		t.Errorf("the connection kept through the bootstrap's LB broke when the VIP moved: %d answered, %d after the SIGTERM, errors %q",
			keptOK, keptSince, keptErrs)
	}
	time.Sleep(time.Second)
	caller.close()
	ok, by, failed, broken := caller.snapshot()
	t.Logf("%d calls answered through the handover, by %v; %d broken in flight", ok, by, len(broken))
	if len(failed) > 0 {
		t.Errorf("%d calls failed through the handover (the VIP must never be unowned):\n%s", len(failed), strings.Join(failed, "\n"))
	}
	// A call in flight when the VIP moves is passed back to the old holder
	// (lb.Handback), so none breaks when it leaves alive. On a loaded
	// machine late adverts can move the VIP again among the masters by
	// Master_Down, which the new holder cannot tell from a dead master's
	// silence: those moves are not passed back and may reset a call each.
	// More resets than moves mean something else.
	n := moves()
	t.Logf("the VIP moved %d time(s)", n)
	if len(broken) > n {
		t.Errorf("%d calls broke in flight, more than the %d VIP move(s) can explain:\n%s", len(broken), n, strings.Join(broken, "\n"))
	}
	if ok < 50 {
		t.Errorf("only %d calls answered; the caller did not run", ok)
	}
	if by["bootstrap"] > 0 {
		// The bootstrap is the LB's backup: it serves only while no master does.
		t.Errorf("the bootstrap's apiserver answered %d calls while masters were healthy", by["bootstrap"])
	}
}

// TestRunDualStackHandover: a dual-stack cluster's bootstrap holds both API
// VIPs and is torn down while it does; a connection kept through each VIP
// answers every call across the move (IPv6 traffic goes to the node's own
// address, so its sessions can be handed back), and new connections over
// IPv6 never fail.
func TestRunDualStackHandover(t *testing.T) {
	vip6 := netip.MustParseAddr("fd00:12b::5")
	lab := netlabtest.New(t, netlab.Options{Nodes: 4, Name: "rundual", IPv6: netip.MustParsePrefix("fd00:12b::/64")})
	rc := startRunClusterVIPs(t, lab, 2, vip6)
	client, cp := lab.Nodes[3], lab.Nodes[:3]
	for _, v := range []netip.Addr{labVIP, vip6} {
		waitHolder(t, cp, v, 0, 30*time.Second, time.Second)
	}
	addr6 := netip.AddrPortFrom(vip6, 6443).String()
	caller := startAPICaller(t, client, addr6, 20*time.Millisecond)
	kept := map[string]*keptCaller{}
	for _, a := range []string{labVIP.String() + ":6443", addr6} {
		kept[a] = startKeptCaller(t, client, a, 20*time.Millisecond)
		kept[a].mark()
	}
	time.Sleep(500 * time.Millisecond)
	if err := rc.procs["bootstrap"].Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for _, v := range []netip.Addr{labVIP, vip6} {
		start := time.Now()
		for h := holders(t, cp, v); len(h) != 1 || h[0] == 0; h = holders(t, cp, v) {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("no master took %s within 10 s of the bootstrap's SIGTERM; holders %v", v, h)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(time.Second)
	for a, k := range kept {
		k.close()
		ok, since, errs := k.result()
		t.Logf("kept connection through %s: %d answered, %d since the SIGTERM's mark; errors %q", a, ok, since, errs)
		if len(errs) > 0 || since < 10 {
			t.Errorf("the connection kept through %s broke when the VIP moved: %d answered, errors %q", a, since, errs)
		}
	}
	if err := rc.procs["bootstrap"].Wait(); err != nil {
		t.Errorf("the bootstrap's appliance should exit cleanly on SIGTERM: %v", err)
	}
	caller.close()
	ok, _, failed, broken := caller.snapshot()
	t.Logf("%d new IPv6 connections answered through the handover; %d failed, %d broken in flight", ok, len(failed), len(broken))
	if len(failed) > 0 || len(broken) > 0 {
		t.Errorf("new connections through %s failed across the handover:\n%s", addr6, strings.Join(append(failed, broken...), "\n"))
	}
}

// kill -9 of `appliance run` on the VIP holder, then a restart: the stale VIP
// and nftables table the killed process left are cleaned up, exactly one
// node holds the VIP again, and the API answers through it.
func TestRunKill9AndRestart(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 4, Name: "runk9"})
	rc := startRunCluster(t, lab, 2)
	client := lab.Nodes[3]
	cp := lab.Nodes[:3]
	holder := waitOneHolder(t, cp, labVIP, 30*time.Second, 2*time.Second)
	name := rc.names[holder]

	if err := rc.procs[name].Kill(); err != nil {
		t.Fatal(err)
	}
	// Nobody removed the killed node's VIP; another node takes over beside
	// that stale copy.
	start := time.Now()
	for {
		h := holders(t, cp, labVIP)
		if len(h) >= 1 && (len(h) > 1 || h[0] != holder) {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("nobody took over after kill -9 of %s; holders %v", name, h)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("a peer took over %s after kill -9", time.Since(start).Round(time.Millisecond))

	rc.procs[name+"-restart"] = startApplianceQuiet(t, lab.Nodes[holder], "run", "--config", rc.cfg, "--node", name)
	after := waitOneHolder(t, cp, labVIP, 30*time.Second, 2*time.Second)
	t.Logf("after the restart %s alone holds the VIP", rc.names[after])
	// The restarted node's redirect is its own again: one table, rules
	// present while its LB serves (the backends are up).
	out := netlabtest.Run(t, lab.Nodes[holder], "nft", "list", "tables")
	if strings.Count(out, "table inet appliance_lb\n") != 1 {
		t.Errorf("nftables tables on the restarted node:\n%s", out)
	}
	for i := range 20 {
		if _, _, err := callAPI(client, labVIP.String()+":6443"); err != nil {
			t.Fatalf("call %d through the VIP after the restart: %v", i, err)
		}
	}
	// Every node is ready: no master runs an ingress router here, so its
	// ingress VIP steps aside (FAULT by design), which is no malfunction.
	for i, n := range cp {
		var body string
		var err error
		for range 100 {
			if body, err = nodeHTTPGet(n, "127.0.0.1:9447", "/readyz"); err == nil && strings.TrimSpace(body) == "ok" {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if strings.TrimSpace(body) != "ok" {
			t.Errorf("%s /readyz: %q %v", rc.names[i], body, err)
		}
	}
}
