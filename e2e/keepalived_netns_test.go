package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// keepalivedConf describes one keepalived VRRP instance the way a cluster
// would configure it.
type keepalivedConf struct {
	Version  int
	VRID     uint8
	Priority int
	Interval string // keepalived syntax: "1", "0.1"
	AuthPass string // v2 PASS; empty: none
	VIP      string // with prefix length
	// UnicastSrc and UnicastPeers switch the instance to unicast, as
	// OpenShift's templates do (unicast_src_ip, unicast_peer).
	UnicastSrc   string
	UnicastPeers []string
	// OpenShift shapes the file as MCO's templates do: their global_defs
	// and the VIP's "label vip".
	OpenShift bool
	// Track lists the vrrp_script checks the instance tracks (OpenShift's
	// chk_ocp and friends); Also, further instances in the same file.
	Track []keepalivedScript
	Also  []keepalivedConf
}

// keepalivedScript is one vrrp_script block.
type keepalivedScript struct {
	Name, Script                 string
	Interval, Weight, Rise, Fall int // 0: keepalived's default (rise, fall)
}

func (k keepalivedConf) render(router string) string {
	var b strings.Builder
	all := append([]keepalivedConf{k}, k.Also...)
	var scripts []keepalivedScript
	seen := map[string]bool{}
	for _, in := range all {
		for _, s := range in.Track {
			if !seen[s.Name] {
				seen[s.Name] = true
				scripts = append(scripts, s)
			}
		}
	}
	fmt.Fprintf(&b, "global_defs {\n  router_id %s\n  vrrp_version %d\n  vrrp_garp_master_delay 0\n", router, k.Version)
	if k.OpenShift {
		b.WriteString("  max_auto_priority -1\n  vrrp_garp_master_refresh 60\n")
	}
	if len(scripts) > 0 {
		b.WriteString("  enable_script_security\n  script_user root\n")
	}
	b.WriteString("}\n")
	for _, s := range scripts {
		fmt.Fprintf(&b, "vrrp_script %s {\n  script \"%s\"\n  interval %d\n  weight %d\n", s.Name, s.Script, s.Interval, s.Weight)
		if s.Rise > 0 {
			fmt.Fprintf(&b, "  rise %d\n", s.Rise)
		}
		if s.Fall > 0 {
			fmt.Fprintf(&b, "  fall %d\n", s.Fall)
		}
		b.WriteString("}\n")
	}
	for _, in := range all {
		fmt.Fprintf(&b, "vrrp_instance VI_%d {\n  state BACKUP\n  interface eth0\n  virtual_router_id %d\n  priority %d\n  advert_int %s\n",
			in.VRID, in.VRID, in.Priority, in.Interval)
		if in.UnicastSrc != "" {
			fmt.Fprintf(&b, "  unicast_src_ip %s\n", in.UnicastSrc)
		}
		if len(in.UnicastPeers) > 0 {
			fmt.Fprintf(&b, "  unicast_peer {\n    %s\n  }\n", strings.Join(in.UnicastPeers, "\n    "))
		}
		if in.AuthPass != "" {
			fmt.Fprintf(&b, "  authentication {\n    auth_type PASS\n    auth_pass %s\n  }\n", in.AuthPass)
		}
		label := ""
		if k.OpenShift {
			label = " label vip"
		}
		fmt.Fprintf(&b, "  virtual_ipaddress {\n    %s%s\n  }\n", in.VIP, label)
		if len(in.Track) > 0 {
			b.WriteString("  track_script {\n")
			for _, s := range in.Track {
				fmt.Fprintf(&b, "    %s\n", s.Name)
			}
			b.WriteString("  }\n")
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// startKeepalived runs keepalived (VRRP only, in the foreground) inside node.
func startKeepalived(t *testing.T, n *netlab.Node, k keepalivedConf) *netlab.Process {
	t.Helper()
	if _, err := exec.LookPath("keepalived"); err != nil {
		t.Fatalf("keepalived is not installed (make test-deps installs it): %v", err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "keepalived.conf")
	if err := writeFileAt(conf, k.render(n.NS)); err != nil {
		t.Fatal(err)
	}
	p, err := n.Start(context.Background(), "keepalived", "--dont-fork", "--log-console", "--log-detail",
		"--vrrp", "--no-syslog", "-f", conf, "-p", filepath.Join(dir, "keepalived.pid"),
		"-r", filepath.Join(dir, "vrrp.pid"))
	if err != nil {
		t.Fatalf("start keepalived on %s: %v", n.Name, err)
	}
	return p
}

// TestKeepalivedInteropV3: keepalived master + appliance backup in one VRID
// over VRRPv3, then the reverse; by unicast (each names the other as its
// peer) and by multicast.
func TestKeepalivedInteropV3(t *testing.T) {
	for _, unicast := range []bool{true, false} {
		name := "multicast"
		if unicast {
			name = "unicast"
		}
		t.Run(name, func(t *testing.T) {
			lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "kav3"})
			procs := map[string]*netlab.Process{}
			dumpOnFailure(t, procs)
			vip := prefixOf(lab, labVIP)
			ka := keepalivedConf{Version: 3, VRID: 51, Priority: 150, Interval: "0.1", VIP: vip}
			var peer []string
			if unicast {
				ka.UnicastSrc = lab.Nodes[0].IPv4.Addr().String()
				ka.UnicastPeers = []string{lab.Nodes[1].IPv4.Addr().String()}
				peer = []string{"--unicast-peer", lab.Nodes[0].IPv4.Addr().String()}
			}

			procs["keepalived"] = startKeepalived(t, lab.Nodes[0], ka)
			waitHolder(t, lab.Nodes, labVIP, 0, 10*time.Second, 500*time.Millisecond)
			procs["appliance"] = startAppliance(t, lab.Nodes[1], vipArgs(lab, 100, peer...)...)
			waitHolder(t, lab.Nodes, labVIP, 0, 10*time.Second, 2*time.Second)
			// keepalived dies without a word: the appliance takes over.
			procs["keepalived"].Kill()
			waitHolder(t, lab.Nodes[1:], labVIP, 1, 5*time.Second, 500*time.Millisecond)
			// The reverse: keepalived comes back as a lower-priority backup and must
			// stay backup to the appliance master.
			netlabtest.Run(t, lab.Nodes[0], "ip", "addr", "del", vip, "dev", "eth0") // kill -9 left its VIP
			ka.Priority = 50
			procs["keepalived-backup"] = startKeepalived(t, lab.Nodes[0], ka)
			waitHolder(t, lab.Nodes, labVIP, 1, 10*time.Second, 2*time.Second)
			// A planned handover from the appliance to keepalived.
			procs["appliance"].Signal(syscall.SIGTERM)
			waitHolder(t, lab.Nodes, labVIP, 0, 5*time.Second, 500*time.Millisecond)
			if unicast {
				assertNoDrops(t, procs["appliance"], "unknown_peer")
			}
		})
	}
}

// assertNoDrops fails when a stopped appliance logged a stranger: its
// unicast peer was heard from an address it did not expect.
func assertNoDrops(t *testing.T, p *netlab.Process, reason string) {
	t.Helper()
	if out := p.Output(); strings.Contains(out, "no unicast peer advertises") {
		t.Errorf("the appliance dropped its peer's adverts (%s):\n%s", reason, grepLines(out, "no unicast peer"))
	}
}

// TestKeepalivedOpenShiftMigration runs one node of an OpenShift-style
// keepalived pair (VRRPv2, PASS auth, Fletcher VRID, 1 s; OpenShift's
// keepalived.conf shape, unicast from the node's address to the other
// master's as OpenShift runs it) next to the appliance in
// keepalived-openshift mode from a config file, both ways round; and the
// same by multicast under vrrp.transport: multicast.
func TestKeepalivedOpenShiftMigration(t *testing.T) {
	for _, transport := range []string{"unicast", "multicast"} {
		t.Run(transport, func(t *testing.T) {
			lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "kaocp"})
			procs := map[string]*netlab.Process{}
			dumpOnFailure(t, procs)
			const name = "ocp4"
			apiVRID, _ := cluster.DeriveVRIDs(name)
			conf := fmt.Sprintf(`cluster: {name: %s, baseDomain: example.com}
network:
  machineCIDR: %s
  interface: eth0
  apiVIPs: [%s]
nodes:
  - {name: master-0, role: master, ips: [%s]}
  - {name: master-1, role: master, ips: [%s]}
vrrp: {mode: keepalived-openshift, transport: %s, priority: 100}
`, name, lab.Nodes[0].IPv4.Masked(), labVIP, lab.Nodes[0].IPv4.Addr(), lab.Nodes[1].IPv4.Addr(), transport)
			cfgPath := writeFile(t, "appliance.yaml", conf)
			ka := keepalivedConf{Version: 2, VRID: apiVRID, Priority: 150, Interval: "1",
				AuthPass: (name + "_api_vip")[:8], VIP: prefixOf(lab, labVIP), OpenShift: true}
			if transport == "unicast" {
				ka.UnicastSrc = lab.Nodes[0].IPv4.Addr().String()
				ka.UnicastPeers = []string{lab.Nodes[1].IPv4.Addr().String()}
			}

			// keepalived master, appliance backup.
			procs["keepalived"] = startKeepalived(t, lab.Nodes[0], ka)
			waitOneHolder(t, lab.Nodes, labVIP, 10*time.Second, 500*time.Millisecond)
			procs["appliance"] = startAppliance(t, lab.Nodes[1], "vip", "--config", cfgPath, "--node", "master-1")
			waitHolder(t, lab.Nodes, labVIP, 0, 15*time.Second, 4*time.Second)
			// SIGTERM: keepalived sends priority 0, the appliance takes over at once.
			procs["keepalived"].Signal(syscall.SIGTERM)
			waitHolder(t, lab.Nodes, labVIP, 1, 5*time.Second, 500*time.Millisecond)
			// Reverse: keepalived (lower priority) joins as backup and stays backup.
			ka.Priority = 50
			procs["keepalived-backup"] = startKeepalived(t, lab.Nodes[0], ka)
			waitHolder(t, lab.Nodes, labVIP, 1, 15*time.Second, 4*time.Second)
			status, err := nodeHTTPGet(lab.Nodes[1], "127.0.0.1:9447", "/status")
			if err != nil {
				t.Fatal(err)
			}
			if want := regexp.MustCompile(`"transport":\s*"` + transport + `"`); !want.MatchString(status) {
				t.Errorf("/status does not say %s:\n%s", want, status)
			}
			procs["appliance"].Signal(syscall.SIGTERM)
			waitHolder(t, lab.Nodes, labVIP, 0, 5*time.Second, 500*time.Millisecond)
			if transport == "unicast" {
				assertNoDrops(t, procs["appliance"], "unknown_peer")
			}
		})
	}
}
