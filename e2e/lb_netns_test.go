package e2e

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"testing"
	"time"

	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// dnatTargets finds where nftables rules send traffic to an IPv6 address.
var dnatTargets = regexp.MustCompile(`dnat ip6 to \[[0-9a-f:]+\]:[0-9]+`)

// TestLBStandaloneFollowsOwnAddress: `appliance lb` on a machine that is no
// node sends IPv6 VIP traffic to the machine's own address as internal/host
// finds it (never the VIP it holds), and follows that address when it
// changes; clients through the VIP are answered before and after.
func TestLBStandaloneFollowsOwnAddress(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "lbself", IPv6: netip.MustParsePrefix("fd00:12c::/64")})
	master, lbHost, client := lab.Nodes[0], lab.Nodes[1], lab.Nodes[2]
	vip6 := netip.MustParseAddr("fd00:12c::5")
	cfg := writeFile(t, "appliance.yaml", fmt.Sprintf(`cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDRs: [192.168.126.0/24, "fd00:12c::/64"]
  apiVIPs: [192.168.126.5, "%s"]
  ingressVIPs: [192.168.126.6]
nodes:
  - {name: master-0, role: master, ips: [%s, "%s"]}
lb: {mcs: false}
`, vip6, master.IPv4.Addr(), master.IPv6.Addr()))
	procs := map[string]*netlab.Process{}
	dumpOnFailure(t, procs)
	procs["apiserver"] = startApplianceQuiet(t, master, "lab", "apiserver", "--listen", ":6443", "--name", "master-0")
	procs["lb"] = startAppliance(t, lbHost, "lb", "--config", cfg)
	// The LB machine holds the IPv6 VIP, as a VRRP master would.
	netlabtest.Run(t, lbHost, "ip", "addr", "add", vip6.String()+"/128", "dev", lbHost.Iface)

	// waitTarget waits for every IPv6 redirect to go to own.
	waitTarget := func(own netip.Addr) {
		t.Helper()
		var rules string
		var got []string
		for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(100 * time.Millisecond) {
			rules = netlabtest.Run(t, lbHost, "nft", "list", "ruleset")
			got = dnatTargets.FindAllString(rules, -1)
			if len(got) > 0 && !slices.ContainsFunc(got, func(s string) bool { return s != "dnat ip6 to ["+own.String()+"]:9445" }) {
				return
			}
		}
		t.Fatalf("the IPv6 VIP is redirected to %q, want only %s:9445:\n%s", got, own, rules)
	}
	call := func(when string) {
		t.Helper()
		addr := netip.AddrPortFrom(vip6, 6443).String()
		var node string
		var err error
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(100 * time.Millisecond) {
			if node, _, err = callAPI(client, addr); err == nil {
				break
			}
		}
		if err != nil || node != "master-0" {
			t.Fatalf("%s: GET /version through %s: %q, %v; want master-0's answer", when, addr, node, err)
		}
	}

	own := lbHost.IPv6.Addr()
	waitTarget(own)
	call("at start")

	// The machine's address changes: the redirect follows it.
	moved := netip.MustParseAddr("fd00:12c::77")
	netlabtest.Run(t, lbHost, "ip", "addr", "add", moved.String()+"/64", "dev", lbHost.Iface)
	netlabtest.Run(t, lbHost, "ip", "addr", "del", lbHost.IPv6.String(), "dev", lbHost.Iface)
	waitTarget(moved)
	call("after the address changed")
}
