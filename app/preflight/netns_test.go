package preflight

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"appliance/bootstrap"
	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// childEnv makes the test binary run preflight with the JSON-encoded
// childSpec it holds and print the results as JSON: the whole run, every
// goroutine of it, then lives inside the node's namespace.
const childEnv = "APPLIANCE_PREFLIGHT_TEST_CHILD"

type childSpec struct {
	Config  string
	Node    string
	Options Options
}

func TestMain(m *testing.M) {
	if s := os.Getenv(childEnv); s != "" {
		os.Exit(runChild(s))
	}
	os.Exit(m.Run())
}

func runChild(s string) int {
	var spec childSpec
	if err := json.Unmarshal([]byte(s), &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	spec.Options.Node = spec.Node
	rs := Run(context.Background(), spec.Config, spec.Options)
	if err := WriteJSON(os.Stdout, rs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_ = WriteText(os.Stderr, rs)
	return 0
}

// Short windows keep each test to a few seconds; the decisions do not
// depend on them.
var testOptions = Options{
	Timeout:    20 * time.Second,
	ProbeWait:  600 * time.Millisecond,
	DHCPWait:   time.Second, // TestNetnsRogueDHCP waits longer
	VRRPListen: 1500 * time.Millisecond,
	Listens:    Listens{DNS: ":53", DHCP: ":67", APILB: ":9445", MCSLB: ":9446"},
	// n1's address: DNS queries stay inside the lab even where no test
	// serves DNS (the machine's own resolv.conf is never used).
	Resolvers: []netip.AddrPort{netip.MustParseAddrPort("192.168.126.11:53")},
	// Never this machine's own files.
	NodeIPConf:    "/nonexistent/nodeip-configuration",
	NodeIPPrimary: "/nonexistent/primary-ip",
}

// labConfig is the cluster of the namespace tests: master-0 is lab node n0
// (where preflight runs), worker-0 exists only on paper. Other lab nodes
// play strangers, servers and the gateway.
func labConfig(lab *netlab.Lab, extra string) string {
	return labConfigOn(lab, cluster.VRRPTransportUnicast, extra)
}

// labConfigOn is labConfig with the VRRP transport given.
func labConfigOn(lab *netlab.Lab, transport, extra string) string {
	n0 := lab.Nodes[0]
	v6 := ""
	if n0.IPv6.IsValid() {
		v6 = ", fd00:126::/64"
	}
	return fmt.Sprintf(`cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDRs: [192.168.126.0/24%s]
  gateway: 192.168.126.1
  apiVIPs: [192.168.126.5%s]
  ingressVIPs: [192.168.126.6]
nodes:
  - {name: master-0, role: master, mac: "%s", ips: [%s]}
  - {name: worker-0, role: worker, mac: "52:54:00:7e:00:20", ips: [192.168.126.20]}
vrrp: {apiVRID: 10, ingressVRID: 11, transport: %s}
admin: {listen: "127.0.0.1:9447"}
%s`, v6, map[bool]string{true: ", fd00:126::5"}[v6 != ""], n0.MAC, joinAddrs(n0.Addrs()), transport, extra)
}

// runPreflight runs preflight on node with the given config and returns the
// results by ID.
func runPreflight(t *testing.T, n *netlab.Node, config string, opts Options) map[string]Result {
	t.Helper()
	path := filepath.Join(t.TempDir(), "appliance.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(childSpec{Config: path, Node: "master-0", Options: opts})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	cmd := n.Command(ctx, "env", childEnv+"="+string(spec), exe)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := netlab.StartCommand(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("preflight on %s: %v\n%s", n.Name, err, stderr.String())
	}
	t.Logf("preflight on %s took %v:\n%s", n.Name, time.Since(start).Round(time.Millisecond), stderr.String())
	var rs []Result
	if err := json.Unmarshal(stdout.Bytes(), &rs); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout.String())
	}
	byID := map[string]Result{}
	for _, r := range rs {
		byID[r.ID] = r
	}
	return byID
}

// want asserts one check's status and that its message names each word.
func want(t *testing.T, rs map[string]Result, id string, st Status, words ...string) {
	t.Helper()
	r, ok := rs[id]
	if !ok {
		t.Errorf("no check %s", id)
		return
	}
	if r.Status != st {
		t.Errorf("%s: %s (%s), want %s", id, r.Status, r.Message, st)
	}
	for _, w := range words {
		if !strings.Contains(r.Message, w) {
			t.Errorf("%s: message %q does not name %q", id, r.Message, w)
		}
	}
}

func ipIn(t *testing.T, n *netlab.Node, args ...string) {
	t.Helper()
	if _, err := n.Run(context.Background(), "ip", args...); err != nil {
		t.Fatal(err)
	}
}

func needProgram(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is not installed (make test-deps installs it): %v", name, err)
	}
}

// TestNetnsStrangerHoldsVIP: another host holds the IPv4 and IPv6 API VIPs;
// preflight names its MAC for both. The ingress VIP stays free.
func TestNetnsStrangerHoldsVIP(t *testing.T) {
	t.Parallel() // each test has its own lab; most of a run is waiting
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "pfvip", IPv6: netipPrefix("fd00:126::/64")})
	n0, stranger := lab.Nodes[0], lab.Nodes[1]
	ipIn(t, stranger, "addr", "add", "192.168.126.5/24", "dev", "eth0")
	ipIn(t, stranger, "addr", "add", "fd00:126::5/64", "dev", "eth0", "nodad")
	rs := runPreflight(t, n0, labConfig(lab, ""), testOptions)
	want(t, rs, "vip-free.api-v4", StatusFail, stranger.MAC.String(), "192.168.126.5")
	want(t, rs, "vip-free.api-v6", StatusFail, stranger.MAC.String(), "fd00:126::5")
	want(t, rs, "vip-free.ingress-v4", StatusPass)
}

// TestNetnsRogueDHCP: a dnsmasq serving a pool on the segment is named by
// its address.
func TestNetnsRogueDHCP(t *testing.T) {
	t.Parallel() // each test has its own lab; most of a run is waiting
	needProgram(t, "dnsmasq")
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "pfdhcp"})
	n0, rogue := lab.Nodes[0], lab.Nodes[1]
	dir := t.TempDir()
	p, err := rogue.Start(context.Background(), "dnsmasq", "--no-daemon", "--conf-file=/dev/null", "--port=0",
		"--interface=eth0", "--bind-interfaces", "--dhcp-range=192.168.126.100,192.168.126.150,255.255.255.0,5m",
		"--dhcp-leasefile="+filepath.Join(dir, "leases"), "--pid-file="+filepath.Join(dir, "pid"), "--log-dhcp")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	waitListening(t, rogue, "udp", 67)
	opts := testOptions
	opts.DHCPWait = 5 * time.Second // dnsmasq offers 3 s after a DISCOVER, once its ping found the address free
	rs := runPreflight(t, n0, labConfig(lab, ""), opts)
	want(t, rs, IDDHCP, StatusFail, "192.168.126.11")
}

// TestNetnsKeepalivedOnOurVRID: keepalived on our ingress VRID (IPv4) and
// our API VRID (IPv6) with other VIPs fails the VRRP check, naming each VRID,
// its source and VIP.
func TestNetnsKeepalivedOnOurVRID(t *testing.T) {
	t.Parallel() // each test has its own lab; most of a run is waiting
	needProgram(t, "keepalived")
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "pfvrrp", IPv6: netipPrefix("fd00:126::/64")})
	n0, other := lab.Nodes[0], lab.Nodes[1]
	dir := t.TempDir()
	conf := filepath.Join(dir, "keepalived.conf")
	if err := os.WriteFile(conf, []byte(`global_defs {
  router_id other
  vrrp_version 3
}
vrrp_instance other {
  state MASTER
  interface eth0
  virtual_router_id 11
  priority 150
  advert_int 0.1
  virtual_ipaddress {
    192.168.126.222/24
  }
}
vrrp_instance other6 {
  state MASTER
  interface eth0
  virtual_router_id 10
  priority 150
  advert_int 0.1
  virtual_ipaddress {
    fd00:126::222/64
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := other.Start(context.Background(), "keepalived", "--dont-fork", "--log-console", "--vrrp", "--no-syslog",
		"-f", conf, "-p", filepath.Join(dir, "keepalived.pid"), "-r", filepath.Join(dir, "vrrp.pid"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	waitFor(t, 10*time.Second, "keepalived to hold its VIP", func() bool {
		out, _ := other.Run(context.Background(), "ip", "-br", "addr", "show", "eth0")
		return strings.Contains(out, "192.168.126.222") && strings.Contains(out, "fd00:126::222")
	})
	// On multicast the stranger would compete with our routers; on unicast
	// (the default) they drop its adverts, so it only warns.
	rs := runPreflight(t, n0, labConfigOn(lab, cluster.VRRPTransportMulticast, ""), testOptions)
	want(t, rs, IDVRRP, StatusFail, "VRID 11 (our ingress VRID) is used by 192.168.126.11", "192.168.126.222",
		"VRID 10 (our api VRID) is used by fe80::", "fd00:126::222", "free here: 12, 13, 14")
	rs = runPreflight(t, n0, labConfig(lab, ""), testOptions)
	want(t, rs, IDVRRP, StatusWarn, "VRID 11 (our ingress VRID) is used by 192.168.126.11", "drop these adverts")
}

// TestNetnsPortInUse: dnsmasq holding port 53 on the node is named as the
// holder of 53/udp and 53/tcp; the other ports pass.
func TestNetnsPortInUse(t *testing.T) {
	t.Parallel() // each test has its own lab; most of a run is waiting
	needProgram(t, "dnsmasq")
	lab := netlabtest.New(t, netlab.Options{Nodes: 1, Name: "pfport"})
	n0 := lab.Nodes[0]
	dir := t.TempDir()
	p, err := n0.Start(context.Background(), "dnsmasq", "--no-daemon", "--conf-file=/dev/null", "--port=53",
		"--no-resolv", "--no-hosts", "--pid-file="+filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	waitListening(t, n0, "udp", 53)
	rs := runPreflight(t, n0, labConfig(lab, ""), testOptions)
	want(t, rs, "port.53-udp", StatusFail, "dnsmasq (pid")
	want(t, rs, "port.53-tcp", StatusFail, "dnsmasq (pid")
	want(t, rs, "port.9445-tcp", StatusPass)
	want(t, rs, "port.9447-tcp", StatusPass)
}

// dnsRecords are dnsmasq options that serve the lab cluster's names right.
var dnsRecords = []string{
	"--address=/api.ocp4.example.com/192.168.126.5",
	"--address=/api-int.ocp4.example.com/192.168.126.5",
	"--address=/apps.ocp4.example.com/192.168.126.6",
	"--host-record=master-0.ocp4.example.com,192.168.126.10",
	"--host-record=worker-0.ocp4.example.com,192.168.126.20",
	"--local=/ocp4.example.com/",
	"--local=/126.168.192.in-addr.arpa/",
}

// startDNS runs dnsmasq as the site's DNS server on n, with extra options.
func startDNS(t *testing.T, n *netlab.Node, extra ...string) {
	t.Helper()
	needProgram(t, "dnsmasq")
	dir := t.TempDir()
	args := append([]string{"--no-daemon", "--conf-file=/dev/null", "--port=53", "--no-resolv", "--no-hosts",
		"--interface=eth0", "--bind-interfaces", "--pid-file=" + filepath.Join(dir, "pid")}, dnsRecords...)
	p, err := n.Start(context.Background(), "dnsmasq", append(args, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	waitListening(t, n, "udp", 53)
}

// TestNetnsDNSWildcard: a wildcard over the whole cluster domain fails
// dns.wildcard while the configured names still pass.
func TestNetnsDNSWildcard(t *testing.T) {
	t.Parallel() // each test has its own lab; most of a run is waiting
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "pfwild"})
	n0, dns := lab.Nodes[0], lab.Nodes[1]
	startDNS(t, dns, "--address=/ocp4.example.com/192.168.126.99")
	rs := runPreflight(t, n0, labConfig(lab, "dhcp: {dns: [192.168.126.11]}\n"), testOptions)
	want(t, rs, "dns.wildcard", StatusFail, "192.168.126.99", "wildcard")
	want(t, rs, "dns.api", StatusPass)
	want(t, rs, "dns.apps", StatusPass)
}

// TestNetnsCleanSegment: with the site's DNS right, a gateway that answers
// and nothing else on the segment, every check passes.
func TestNetnsCleanSegment(t *testing.T) {
	t.Parallel() // each test has its own lab; most of a run is waiting
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "pfclean"})
	n0, site := lab.Nodes[0], lab.Nodes[1]
	ipIn(t, site, "addr", "add", "192.168.126.1/24", "dev", "eth0") // the gateway
	startDNS(t, site)
	opts := testOptions
	opts.Resolvers = nil // from dhcp.dns, as the nodes would
	rs := runPreflight(t, n0, labConfig(lab, "dhcp: {dns: [192.168.126.11]}\n"), opts)
	if len(rs) < 15 {
		t.Errorf("only %d checks ran", len(rs))
	}
	for id, r := range rs {
		if r.Status != StatusPass {
			t.Errorf("%s: %s: %s", id, r.Status, r.Message)
		}
	}
	for _, id := range []string{"config", "placement", "vip-free.api-v4", "vip-free.ingress-v4", IDDHCP, IDVRRP,
		"dns.api", "dns.api-int", "dns.apps", "dns.wildcard", "dns.node.master-0", "dns.ptr.master-0",
		"dns.node.worker-0", "dns.ptr.worker-0", "port.53-udp", "port.53-tcp", "port.67-udp", "port.9445-tcp",
		"port.9446-tcp", "port.9447-tcp", IDMTU, IDNodeIP} {
		if _, ok := rs[id]; !ok {
			t.Errorf("check %s did not run", id)
		}
	}
}

// TestNetnsMTUMismatch: the node's interface claims jumbo frames but the
// switch port (the bridge's veth) carries 1500 bytes; preflight says so.
func TestNetnsMTUMismatch(t *testing.T) {
	t.Parallel()
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "pfmtu"})
	n0, gw := lab.Nodes[0], lab.Nodes[1]
	ipIn(t, gw, "addr", "add", "192.168.126.1/24", "dev", "eth0")
	ipIn(t, n0, "link", "set", "eth0", "mtu", "9000")
	rs := runPreflight(t, n0, labConfig(lab, ""), testOptions)
	want(t, rs, IDMTU, StatusFail, "MTU 9000", "only 1500-byte", "192.168.126.1")
}

// TestNetnsNodeIP: the node has a second NIC with the default route, as
// many bare-metal nodes do. With the hint file `appliance ignition` writes,
// or before it exists with the config's hints, the kubelet gets the
// machine-network address; with a hint file that sets no hint, runtimecfg
// would take the default route's NIC, and the check fails naming it and
// the fix.
func TestNetnsNodeIP(t *testing.T) {
	t.Parallel()
	lab := netlabtest.New(t, netlab.Options{Nodes: 1, Name: "pfnodeip"})
	n0 := lab.Nodes[0]
	ipIn(t, n0, "link", "add", "ens4", "type", "veth", "peer", "name", "ens4peer")
	ipIn(t, n0, "addr", "add", "10.99.0.5/24", "dev", "ens4")
	ipIn(t, n0, "link", "set", "ens4", "up")
	ipIn(t, n0, "link", "set", "ens4peer", "up")
	ipIn(t, n0, "route", "add", "default", "via", "10.99.0.1", "dev", "ens4")
	// The API VIP is held now, listed before the node's own address, but
	// not there when nodeip-configuration runs at boot.
	ipIn(t, n0, "addr", "del", "192.168.126.10/24", "dev", "eth0")
	ipIn(t, n0, "addr", "add", "192.168.126.5/24", "dev", "eth0")
	ipIn(t, n0, "addr", "add", "192.168.126.10/24", "dev", "eth0")
	config := labConfig(lab, "")
	cfg, err := cluster.Parse([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	files, err := bootstrap.Files(cfg, cluster.RoleMaster, bootstrap.Options{
		Image:    "registry.example.com/appliance@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		Services: func(cluster.Role) bootstrap.RoleServices { return bootstrap.RoleServices{Runs: true, DNS: true} },
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	written := filepath.Join(dir, "written")
	for _, f := range files {
		if f.Path == bootstrap.NodeIPHintPath {
			os.WriteFile(written, f.Contents, 0o644)
		}
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("# no hint\n"), 0o644)

	for _, tc := range []struct {
		name, conf string
		st         Status
		words      []string
	}{
		{"the file appliance ignition writes", written, StatusPass, []string{"192.168.126.10 on eth0", "hint 192.168.126.0 from " + written}},
		{"no file yet: the config's hints", filepath.Join(dir, "absent"), StatusPass, []string{"192.168.126.10 on eth0", "network.nodeIPHint"}},
		{"a file without hint", empty, StatusFail, []string{"10.99.0.5 (ens4)", "outside the machine network", `NODEIP_HINT="192.168.126.0"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := testOptions
			opts.NodeIPConf = tc.conf
			rs := runPreflight(t, n0, config, opts)
			want(t, rs, IDNodeIP, tc.st, tc.words...)
		})
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitListening waits until something in n has a socket on port.
func waitListening(t *testing.T, n *netlab.Node, proto string, port int) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%s port %d on %s", proto, port, n.Name), func() bool {
		out, _ := n.Run(context.Background(), "ss", "-lnH", "--"+proto, fmt.Sprintf("sport = :%d", port))
		return strings.TrimSpace(out) != ""
	})
}

func netipPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
