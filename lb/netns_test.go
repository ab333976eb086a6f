package lb

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// inNode returns listen and dial functions whose sockets are opened inside
// node's namespace (and may be used from any goroutine afterwards).
func inNode(n *netlab.Node) (func(string, string) (net.Listener, error), DialFunc) {
	listen := func(network, addr string) (ln net.Listener, err error) {
		derr := n.Do(func() error {
			ln, err = net.Listen(network, addr)
			return nil
		})
		if derr != nil {
			return nil, derr
		}
		return ln, err
	}
	dial := func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		derr := n.Do(func() error {
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return nil
		})
		if derr != nil {
			return nil, derr
		}
		return c, err
	}
	return listen, dial
}

// TestNetnsRedirect: n0 holds the API VIP and runs the LB and a local
// "kube-apiserver" on :6443; n1 and n2 are the masters; n3 is a client.
// Through the nftables rule a client of VIP:6443 lands on the LB (and so
// on a master); without a healthy backend the rule is gone and the client
// reaches n0's local server; on exit the table is gone.
func TestNetnsRedirect(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 4, Name: "lb", IPv6: netip.MustParsePrefix("fd00:126::/64")})
	n0, client := lab.Nodes[0], lab.Nodes[3]
	vip := netip.MustParseAddr("192.168.126.250")
	vip6 := netip.MustParseAddr("fd00:126::250")
	h, err := n0.Handle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	link, err := h.LinkByName(n0.Iface)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: vip.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatal(err)
	}
	if err := h.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: vip6.AsSlice(), Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD}); err != nil {
		t.Fatal(err)
	}

	var ips []netip.Addr
	for _, n := range lab.Nodes {
		ips = append(ips, n.IPv4.Addr())
	}
	ca := newTestCA(t, append(ips, vip, vip6)...)
	cfg := &cluster.Config{Network: cluster.Network{APIVIPs: []netip.Addr{vip, vip6}}}
	var masters []*fakeServer
	for _, n := range lab.Nodes[1:3] {
		listen, _ := inNode(n)
		f, err := startFake(t, ca, "master-"+n.Name, netip.AddrPortFrom(n.IPv4.Addr(), 6443).String(), listen)
		if err != nil {
			t.Fatal(err)
		}
		masters = append(masters, f)
		cfg.Nodes = append(cfg.Nodes, cluster.Node{Name: f.name, Role: cluster.RoleMaster, IPs: []netip.Addr{n.IPv4.Addr()}})
	}
	listen0, dial0 := inNode(n0)
	if _, err := startFake(t, ca, "local", ":6443", listen0); err != nil {
		t.Fatal(err)
	}

	// A crashed run's leftover: a table of ours with a rule to nowhere.
	if _, err := n0.Run(context.Background(), "sh", "-c",
		`nft 'add table inet appliance_lb; add chain inet appliance_lb stale { type nat hook prerouting priority -100; }; add rule inet appliance_lb stale tcp dport 6443 redirect to :1'`); err != nil {
		t.Fatal(err)
	}

	o := DefaultOptions()
	o.MCS.Disabled = true
	o.NetNS = "/run/netns/" + n0.NS
	o.Listen, o.Dial = listen0, dial0
	o.Health = HealthOptions{Interval: 100 * time.Millisecond, FastInterval: 30 * time.Millisecond, Timeout: 500 * time.Millisecond, Fall: 3, Rise: 2}
	o.DrainTimeout = 200 * time.Millisecond
	l, err := New(cfg, cluster.NewState(cfg), o, nil, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	listTable := func() string {
		out, err := n0.Run(context.Background(), "nft", "list", "table", "inet", "appliance_lb")
		if err != nil {
			return ""
		}
		return out
	}
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(listTable(), "redirect to :9445") })
	rules := listTable()
	t.Logf("installed:\n%s", rules)
	if strings.Contains(rules, "stale") {
		t.Error("the leftover chain survived start")
	}
	for _, want := range []string{"ip daddr 192.168.126.250 tcp dport 6443", "ip6 daddr fd00:126::250 tcp dport 6443", `oifname "lo"`, "hook prerouting", "hook output"} {
		if !strings.Contains(rules, want) {
			t.Errorf("table lacks %q", want)
		}
	}

	get := func(n *netlab.Node, vip netip.Addr) string {
		_, dial := inNode(n)
		c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{RootCAs: ca.pool, ServerName: "api.test"},
			DialContext:       dial,
		}}
		resp, err := c.Get(fmt.Sprintf("https://%s/whoami", netip.AddrPortFrom(vip, 6443)))
		if err != nil {
			return "error: " + err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for _, n := range []*netlab.Node{client, n0} {
		for _, v := range []netip.Addr{vip, vip6} {
			for range 2 {
				if who := get(n, v); !strings.HasPrefix(who, "master-") {
					t.Fatalf("client on %s reached %q through %s:6443, want a master via the LB", n.Name, who, v)
				}
			}
		}
	}

	for _, line := range strings.Split(listTable(), "\n") {
		if strings.Contains(line, "redirect to") && strings.Contains(line, "packets 0 ") {
			t.Errorf("a rule was never hit, so traffic did not go through it: %s", strings.TrimSpace(line))
		}
	}

	for _, m := range masters {
		m.ready.Store(false)
	}
	waitFor(t, 10*time.Second, func() bool { return listTable() == "" })
	if who := get(client, vip6); who != "local" {
		t.Errorf("without healthy backends the client reached %q, want the local server", who)
	}

	for _, m := range masters {
		m.ready.Store(true)
	}
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(listTable(), "redirect to :9445") })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil
	if tab := listTable(); tab != "" {
		t.Errorf("table left after exit:\n%s", tab)
	}
	// The root namespace's nftables were never touched.
	if out, err := exec.Command("nft", "list", "table", "inet", "appliance_lb").CombinedOutput(); err == nil {
		t.Errorf("a table appeared in the root namespace:\n%s", out)
	}
}
