package dnsserver

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// mdnsNode is one appliance DNS server with mDNS, running in a lab node.
type mdnsNode struct {
	node   *netlab.Node
	state  *cluster.State
	srv    *Server
	cancel context.CancelFunc
	done   chan error
}

func startMDNSNode(t *testing.T, n *netlab.Node, clusterName, nodeName string, ttl time.Duration) *mdnsNode {
	t.Helper()
	return startMDNS(t, n, mdnsConfig(clusterName, nil), MDNSOptions{Node: nodeName, Role: cluster.RoleMaster, TTL: ttl})
}

// mdnsConfig is the lab's cluster: machine networks, VIPs and nodes.
func mdnsConfig(clusterName string, nodes []cluster.Node) *cluster.Config {
	return &cluster.Config{
		Cluster: cluster.Cluster{Name: clusterName, BaseDomain: "example.com"},
		Network: cluster.Network{
			MachineCIDRs: []netip.Prefix{netlab.DefaultIPv4, netip.MustParsePrefix("fd00:126::/64")},
			APIVIPs:      []netip.Addr{netip.MustParseAddr("192.168.126.5")},
			IngressVIPs:  []netip.Addr{netip.MustParseAddr("192.168.126.6")},
			// Never queried here; set so nothing reads resolv.conf.
			UpstreamDNS: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:53")},
		},
		Nodes: nodes,
	}
}

// startMDNS runs a DNS server with mDNS in lab node n until the test ends.
func startMDNS(t *testing.T, n *netlab.Node, cfg *cluster.Config, mo MDNSOptions) *mdnsNode {
	t.Helper()
	mo.Enabled, mo.NetNS = true, nsPath(n)
	state := cluster.NewState(cfg)
	srv, err := New(cfg, state, Options{
		Listen: netip.AddrPortFrom(n.IPv4.Addr(), 53).String(),
		MDNS:   mo,
	}, testLogger(t).With("node", n.Name))
	if err != nil {
		t.Fatal(err)
	}
	// The DNS listeners must be opened inside the node's namespace; mDNS
	// opens its sockets there itself (MDNSOptions.NetNS).
	if err := n.Do(srv.Start); err != nil {
		t.Fatalf("%s: start: %v", n.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &mdnsNode{node: n, state: state, srv: srv, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- srv.Run(ctx) }()
	t.Cleanup(m.stop)
	return m
}

// nsPath is the path of a lab node's network namespace.
func nsPath(n *netlab.Node) string { return filepath.Join("/run/netns", n.NS) }

func (m *mdnsNode) stop() {
	if m.cancel != nil {
		m.cancel()
		<-m.done
		m.cancel = nil
	}
}

func memberNames(s *cluster.State) []string {
	var out []string
	for _, m := range s.Snapshot().Members {
		out = append(out, m.Name)
	}
	return out
}

func waitMembers(t *testing.T, m *mdnsNode, want []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !slices.Equal(memberNames(m.state), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: members %v, want %v", m.node.Name, memberNames(m.state), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMDNSDiscovery: three nodes of one cluster find each other and answer
// each other's names; a fourth node of another cluster on the same bridge
// stays invisible; a node that goes silent is dropped after its TTL, one
// that stops cleanly at once.
func TestMDNSDiscovery(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 4, Name: "mdns", IPv6: netip.MustParsePrefix("fd00:126::/64")})
	const ttl = 3 * time.Second
	nodes := []*mdnsNode{
		startMDNSNode(t, lab.Nodes[0], "ocp4", "master-0", ttl),
		startMDNSNode(t, lab.Nodes[1], "ocp4", "master-1", ttl),
		startMDNSNode(t, lab.Nodes[2], "ocp4", "master-2", ttl),
	}
	// Same node name, other cluster: must never show up in ocp4.
	other := startMDNSNode(t, lab.Nodes[3], "other", "master-1", ttl)

	all := []string{"master-0", "master-1", "master-2"}
	for i, n := range nodes {
		want := slices.Delete(slices.Clone(all), i, i+1)
		waitMembers(t, n, want, 10*time.Second)
	}
	waitMembers(t, other, nil, time.Millisecond)

	for _, n := range nodes {
		if m, _ := n.state.Snapshot().Member("master-1"); slices.Contains(m.IPs, lab.Nodes[3].IPv4.Addr()) {
			t.Fatalf("%s took the other cluster's master-1: %+v", n.node.Name, m)
		}
	}
	// Both addresses of a node, IPv4 and IPv6, are learned.
	m1, _ := nodes[0].state.Snapshot().Member("master-1")
	if !slices.Equal(m1.IPs, lab.Nodes[1].Addrs()) || m1.Source != cluster.SourceMDNS || m1.Role != cluster.RoleMaster {
		t.Fatalf("master-1 as seen by master-0: %+v, want IPs %v", m1, lab.Nodes[1].Addrs())
	}

	// Each node's DNS answers the others' names, queried with dig from inside.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []struct{ name, qtype, want string }{
		{"master-1.ocp4.example.com", "A", lab.Nodes[1].IPv4.Addr().String()},
		{"master-2", "AAAA", lab.Nodes[2].IPv6.Addr().String()},
	} {
		out, err := lab.Nodes[0].Run(ctx, "dig", "@"+lab.Nodes[0].IPv4.Addr().String(), "+short", "+tries=1", c.name, c.qtype)
		if err != nil || strings.TrimSpace(out) != c.want {
			t.Fatalf("dig %s %s on master-0: %q %v, want %s", c.name, c.qtype, out, err, c.want)
		}
	}
	// Legacy unicast mDNS query (from an ephemeral port, as dig would send
	// it) straight to the group; the reply comes unicast from the node.
	if got := mdnsQuery(t, lab.Nodes[3], "master-2.local.", dns.TypeA); !slices.Contains(got, lab.Nodes[2].IPv4.Addr().String()) {
		t.Fatalf("mDNS query for master-2.local: %v", got)
	}

	// A node that goes silent (link down, no goodbye) leaves after its TTL.
	if err := lab.Nodes[2].LinkDown(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitMembers(t, nodes[0], []string{"master-1"}, 3*ttl)
	if m, _ := nodes[0].state.Snapshot().Member("master-1"); !slices.Equal(m.IPs, lab.Nodes[1].Addrs()) {
		t.Fatalf("master-1 after a while: %+v", m)
	}
	t.Logf("silent node dropped after %v (TTL %v)", time.Since(start).Round(100*time.Millisecond), ttl)
	if time.Since(start) < ttl/2 {
		t.Fatalf("silent node dropped after %v, before its TTL %v", time.Since(start), ttl)
	}

	// A node that stops cleanly says goodbye: dropped well before its TTL.
	start = time.Now()
	nodes[1].stop()
	waitMembers(t, nodes[0], nil, ttl)
	t.Logf("stopped node dropped after %v", time.Since(start).Round(10*time.Millisecond))
}

// TestMDNSAvahi checks interop with avahi both ways: avahi-browse (on a
// private D-Bus, as the lab has no system bus) resolves our service with its
// TXT, and our browser ignores what avahi publishes for itself.
func TestMDNSAvahi(t *testing.T) {
	for _, tool := range []string{"avahi-daemon", "avahi-browse", "dbus-daemon"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (make test installs it): %v", tool, err)
		}
	}
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "avahi"})
	n := startMDNSNode(t, lab.Nodes[0], "ocp4", "master-0", 30*time.Second)

	dir := t.TempDir()
	bus := filepath.Join(dir, "bus")
	busConf := filepath.Join(dir, "bus.conf")
	writeFile(t, busConf, fmt.Sprintf(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`, bus))
	avahiConf := filepath.Join(dir, "avahi-daemon.conf")
	writeFile(t, avahiConf, "[server]\nhost-name=avahipeer\ndomain-name=local\nuse-ipv4=yes\nuse-ipv6=no\nallow-interfaces=eth0\nenable-dbus=yes\n[publish]\npublish-addresses=yes\npublish-workstation=yes\n[reflector]\n[rlimits]\n")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	peer := lab.Nodes[1]
	if _, err := peer.Start(ctx, "dbus-daemon", "--config-file="+busConf, "--nofork", "--nopidfile"); err != nil {
		t.Fatal(err)
	}
	waitFile(t, bus, 5*time.Second)
	addr := "unix:path=" + bus
	avahi, err := peer.Start(ctx, "env", "DBUS_SYSTEM_BUS_ADDRESS="+addr, "avahi-daemon", "--no-drop-root", "--no-chroot", "--no-rlimits", "-f", avahiConf)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err = peer.Run(ctx, "env", "DBUS_SYSTEM_BUS_ADDRESS="+addr, "avahi-browse", "-rtp", "_appliance._udp")
		if strings.Contains(out, "=;eth0;IPv4;ocp4-master-0;_appliance._udp;local;master-0.local;"+lab.Nodes[0].IPv4.Addr().String()+";53;") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("avahi-browse did not resolve our service: %q %v\navahi-daemon: %s", out, err, avahi.Output())
		}
		time.Sleep(300 * time.Millisecond)
	}
	if !strings.Contains(out, `"cluster=ocp4.example.com"`) || !strings.Contains(out, `"role=master"`) {
		t.Fatalf("TXT record not seen by avahi: %s", out)
	}
	t.Logf("avahi-browse: %s", strings.TrimSpace(out))
	// avahi's own host announcements are no appliance members.
	if names := memberNames(n.state); len(names) != 0 {
		t.Fatalf("members from avahi: %v", names)
	}
	// avahi resolves the host name we publish.
	res, err := peer.Run(ctx, "env", "DBUS_SYSTEM_BUS_ADDRESS="+addr, "avahi-resolve", "-4", "-n", "master-0.local")
	if err != nil || !strings.Contains(res, lab.Nodes[0].IPv4.Addr().String()) {
		t.Fatalf("avahi-resolve master-0.local: %q %v", res, err)
	}
	// A name avahi publishes resolves through our DNS server (over mDNS).
	res, err = lab.Nodes[0].Run(ctx, "dig", "@"+lab.Nodes[0].IPv4.Addr().String(), "+short", "+tries=1", "avahipeer.local", "A")
	if err != nil || strings.TrimSpace(res) != peer.IPv4.Addr().String() {
		t.Fatalf("avahipeer.local through our DNS: %q %v", res, err)
	}
	res, err = lab.Nodes[0].Run(ctx, "dig", "@"+lab.Nodes[0].IPv4.Addr().String(), "+tries=1", "nobody-here.local", "A")
	if err != nil || !strings.Contains(res, "status: NXDOMAIN") {
		t.Fatalf("nobody-here.local through our DNS: %q %v", res, err)
	}
	// And avahi's own name answers a query from our node's segment.
	if got := mdnsQuery(t, lab.Nodes[0], "avahipeer.local.", dns.TypeA); !slices.Contains(got, peer.IPv4.Addr().String()) {
		t.Fatalf("mDNS query for avahipeer.local: %v", got)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func waitFile(t *testing.T, path string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mdnsQuery sends a one-shot (legacy unicast) mDNS query from inside node n
// and returns the addresses in the first answer.
func mdnsQuery(t *testing.T, n *netlab.Node, name string, qtype uint16) []string {
	t.Helper()
	var got []string
	err := n.Do(func() error {
		ifi, err := net.InterfaceByName(n.Iface)
		if err != nil {
			return err
		}
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: n.IPv4.Addr().AsSlice()})
		if err != nil {
			return err
		}
		defer c.Close()
		if err := ipv4.NewPacketConn(c).SetMulticastInterface(ifi); err != nil {
			return err
		}
		q := new(dns.Msg)
		q.SetQuestion(name, qtype)
		q.RecursionDesired = false
		b, err := q.Pack()
		if err != nil {
			return err
		}
		buf := make([]byte, 9000)
		for range 3 {
			if _, err := c.WriteTo(b, mdnsGroup4); err != nil {
				return err
			}
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			k, _, err := c.ReadFrom(buf)
			if err != nil {
				continue
			}
			r := new(dns.Msg)
			if r.Unpack(buf[:k]) != nil || r.Id != q.Id {
				continue
			}
			for _, rr := range r.Answer {
				if a, ok := rr.(*dns.A); ok {
					got = append(got, a.A.String())
				}
			}
			return nil
		}
		return fmt.Errorf("no answer")
	})
	if err != nil {
		t.Fatalf("mDNS query %s from %s: %v", name, n.Name, err)
	}
	return got
}
