package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// runRender runs `appliance render` and returns the output folder.
func runRender(t *testing.T, cfgPath string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	b, err := exec.Command(appliance(t), "render", "--config", cfgPath, "--out", out).CombinedOutput()
	if err != nil {
		t.Fatalf("appliance render: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), filepath.Join(out, "keepalived", "master", "keepalived.conf")) {
		t.Fatalf("appliance render did not list the master's keepalived.conf:\n%s", b)
	}
	return out
}

// startRenderedKeepalived runs keepalived (VRRP only, foreground) inside node
// from a rendered keepalived.conf, untouched, as the config's node name
// (-i: the config id that picks the file's @^NAME lines).
func startRenderedKeepalived(t *testing.T, n *netlab.Node, conf, name string) *netlab.Process {
	t.Helper()
	if _, err := exec.LookPath("keepalived"); err != nil {
		t.Fatalf("keepalived is not installed (make test-deps installs it): %v", err)
	}
	dir := t.TempDir()
	p, err := n.Start(context.Background(), "keepalived", "--dont-fork", "--log-console", "--log-detail",
		"--vrrp", "--no-syslog", "-i", name, "-f", conf, "-p", filepath.Join(dir, "keepalived.pid"),
		"-r", filepath.Join(dir, "vrrp.pid"))
	if err != nil {
		t.Fatalf("start keepalived on %s: %v", n.Name, err)
	}
	return p
}

// TestRenderedKeepalivedSharesVIPWithAppliance: two masters of one cluster,
// one running keepalived from `appliance render`'s master file, the other
// `appliance vip` from the same config. They hold the API VIP together, one
// at a time, and hand it over both ways: in native mode (VRRPv3, 100 ms, an
// IPv4 and an IPv6 VIP) by unicast, the default, and by multicast, and in
// keepalived-openshift mode (VRRPv2, 1 s, PASS auth) by unicast, with
// vrrp.unicastPeers naming the nodes' own addresses too.
func TestRenderedKeepalivedSharesVIPWithAppliance(t *testing.T) {
	const v6VIP = "fd00:126::5"
	for _, mode := range []struct {
		name, vrrp string
		settle     time.Duration
		dualStack  bool
	}{
		{"native", "vrrp: {mode: native}", 500 * time.Millisecond, true},
		{"native-multicast", "vrrp: {mode: native, transport: multicast}", 500 * time.Millisecond, true},
		// VRRPv2 carries IPv4 only: this mode is tested on IPv4.
		{"keepalived-openshift", "vrrp: {mode: keepalived-openshift, unicastPeers: [%s, %s]}", 4 * time.Second, false},
	} {
		t.Run(mode.name, func(t *testing.T) {
			opts := netlab.Options{Nodes: 2, Name: "rka"}
			vips := []netip.Addr{labVIP}
			if mode.dualStack {
				opts.IPv6 = netip.MustParsePrefix("fd00:126::/64")
				vips = append(vips, netip.MustParseAddr(v6VIP))
			}
			lab := netlabtest.New(t, opts)
			procs := map[string]*netlab.Process{}
			dumpOnFailure(t, procs)
			n0, n1 := lab.Nodes[0], lab.Nodes[1]
			vrrp := mode.vrrp
			if strings.Contains(vrrp, "%s") {
				vrrp = fmt.Sprintf(vrrp, n0.IPv4.Addr(), n1.IPv4.Addr())
			}
			cidrs, ips0, ips1 := n0.IPv4.Masked().String(), n0.IPv4.Addr().String(), n1.IPv4.Addr().String()
			apiVIPs := labVIP.String()
			if mode.dualStack {
				apiVIPs += ", " + v6VIP
				cidrs += ", " + n0.IPv6.Masked().String()
				ips0 += ", " + n0.IPv6.Addr().String()
				ips1 += ", " + n1.IPv6.Addr().String()
			}
			cfgPath := writeFile(t, "appliance.yaml", fmt.Sprintf(`cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDRs: [%s]
  interface: eth0
  apiVIPs: [%s]
nodes:
  - {name: master-0, role: master, ips: [%s]}
  - {name: master-1, role: master, ips: [%s]}
%s
`, cidrs, apiVIPs, ips0, ips1, vrrp))
			conf := filepath.Join(runRender(t, cfgPath), "keepalived", "master", "keepalived.conf")
			timeout := 4*mode.settle + 10*time.Second
			// holder waits until node want alone holds every VIP.
			holder := func(want int) {
				t.Helper()
				for _, vip := range vips {
					waitHolder(t, lab.Nodes, vip, want, timeout, mode.settle)
				}
			}

			// keepalived first: it takes the VIPs; the appliance joins as a
			// backup (equal priority: the master keeps them).
			procs["keepalived"] = startRenderedKeepalived(t, n0, conf, "master-0")
			holder(0)
			procs["appliance"] = startAppliance(t, n1, "vip", "--config", cfgPath, "--node", "master-1")
			holder(0)
			// keepalived leaves (priority 0): the appliance takes over.
			procs["keepalived"].Signal(syscall.SIGTERM)
			holder(1)
			// keepalived comes back as a backup and stays one.
			procs["keepalived-again"] = startRenderedKeepalived(t, n0, conf, "master-0")
			holder(1)
			// The appliance leaves: keepalived takes over.
			procs["appliance"].Signal(syscall.SIGTERM)
			holder(0)
			// A unicast peer list naming the node itself makes keepalived
			// hear its own adverts.
			for _, p := range []string{"keepalived", "keepalived-again"} {
				if out := procs[p].Output(); strings.Contains(out, "our IP address") {
					t.Errorf("%s heard its own adverts:\n%s", p, out)
				}
			}
			// Each side heard the other from the address it was told:
			// keepalived sends from its unicast_src_ip (for IPv6 too).
			assertNoDrops(t, procs["appliance"], "unknown_peer")
		})
	}
}
