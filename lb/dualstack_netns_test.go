package lb

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// TestNetnsDualStack: n0 holds an IPv4 and an IPv6 API VIP and runs the
// LB; the masters n1 and n2 serve the API on both their addresses, each
// address a server of its own; n3 is a client. Through the redirect a
// client of the IPv4 VIP is proxied to a master over IPv4 and one of the
// IPv6 VIP over IPv6. A master whose IPv6 server fails /readyz serves IPv4
// clients only; with no master up over IPv6 the IPv6 VIP's rule is gone
// (its clients reach n0's own server) while the IPv4 VIP's stays.
func TestNetnsDualStack(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 4, Name: "lbdual", IPv6: netip.MustParsePrefix("fd00:126::/64")})
	n0, client := lab.Nodes[0], lab.Nodes[3]
	vip4, vip6 := netip.MustParseAddr("192.168.126.250"), netip.MustParseAddr("fd00:126::250")
	h, err := n0.Handle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	link, err := h.LinkByName(n0.Iface)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []netip.Addr{vip4, vip6} {
		bits := v.BitLen()
		if err := h.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: v.AsSlice(), Mask: net.CIDRMask(bits, bits)}, Flags: unix.IFA_F_NODAD}); err != nil {
			t.Fatal(err)
		}
	}

	ca := newTestCA(t, vip4, vip6)
	cfg := &cluster.Config{Network: cluster.Network{APIVIPs: []netip.Addr{vip4, vip6}}}
	v6 := map[string]*fakeServer{} // each master's IPv6 server
	for _, n := range lab.Nodes[1:3] {
		listen, _ := inNode(n)
		name := "master-" + n.Name
		for _, a := range []netip.Addr{n.IPv4.Addr(), n.IPv6.Addr()} {
			f, err := startFake(t, ca, name, netip.AddrPortFrom(a, 6443).String(), listen)
			if err != nil {
				t.Fatal(err)
			}
			if a.Is6() {
				v6[name] = f
			}
		}
		cfg.Nodes = append(cfg.Nodes, cluster.Node{Name: name, Role: cluster.RoleMaster, IPs: []netip.Addr{n.IPv4.Addr(), n.IPv6.Addr()}})
	}
	listen0, dial0 := inNode(n0)
	if _, err := startFake(t, ca, "local", ":6443", listen0); err != nil {
		t.Fatal(err)
	}

	o := DefaultOptions() // the proxy on ":9445", one socket for both families
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

	table := func() string {
		out, err := n0.Run(context.Background(), "nft", "list", "table", "inet", DefaultTable)
		if err != nil {
			return ""
		}
		return out
	}
	waitFor(t, 10*time.Second, func() bool {
		return l.Pool(PoolAPI).Healthy() == 4 && strings.Count(table(), "redirect to :9445") == 4
	})

	// peer asks VIP:6443 from node n who answered and from which family
	// the answering server saw the connection come.
	peer := func(n *netlab.Node, vip netip.Addr) (name string, fam Family) {
		t.Helper()
		_, dial := inNode(n)
		c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{RootCAs: ca.pool, ServerName: "api.test"},
			DialContext:       dial,
		}}
		resp, err := c.Get(fmt.Sprintf("https://%s/peer", netip.AddrPortFrom(vip, 6443)))
		if err != nil {
			t.Fatalf("client on %s through %s: %v", n.Name, vip, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		name, from, _ := strings.Cut(string(b), " ")
		ap, err := netip.ParseAddrPort(from)
		if err != nil {
			t.Fatalf("client on %s through %s: answer %q", n.Name, vip, b)
		}
		return name, familyOf(ap.Addr())
	}
	// spread sends 4 clients from each of the client node and n0 (the
	// prerouting and the output chain) to vip; it returns who answered,
	// failing any answer that came over the other family.
	spread := func(vip netip.Addr) map[string]int {
		t.Helper()
		seen := map[string]int{}
		for _, n := range []*netlab.Node{client, n0} {
			for range 4 {
				name, fam := peer(n, vip)
				if name != "local" && fam != familyOf(vip) {
					t.Errorf("client on %s through %s reached %s over %s", n.Name, vip, name, fam)
				}
				seen[name]++
			}
		}
		return seen
	}
	for _, v := range []netip.Addr{vip4, vip6} {
		if got := spread(v); got["master-n1"] != 4 || got["master-n2"] != 4 {
			t.Errorf("clients of %s reached %v, want both masters in turn", v, got)
		}
	}
	for _, line := range strings.Split(table(), "\n") {
		if strings.Contains(line, "redirect to") && strings.Contains(line, "packets 0 ") {
			t.Errorf("a rule was never hit: %s", strings.TrimSpace(line))
		}
	}

	// master-n1 fails /readyz over IPv6 alone: it serves IPv4 clients only.
	v6["master-n1"].ready.Store(false)
	down := func(name string) bool {
		for _, b := range l.Pool(PoolAPI).Status() {
			if b.Name == name {
				return b.State == HealthDown.String()
			}
		}
		return false
	}
	waitFor(t, 10*time.Second, func() bool { return down("master-n1/v6") })
	if got := spread(vip6); got["master-n2"] != 8 {
		t.Errorf("with master-n1 down over IPv6, IPv6 clients reached %v, want master-n2 only", got)
	}
	if got := spread(vip4); got["master-n1"] != 4 || got["master-n2"] != 4 {
		t.Errorf("with master-n1 down over IPv6, IPv4 clients reached %v, want both masters", got)
	}
	if err := l.ServingVIP(vip6); err != nil {
		t.Errorf("IPv6 VIP with one master up over IPv6: %v", err)
	}

	// No master up over IPv6: the IPv6 VIP's rule goes, the IPv4 VIP's stays.
	v6["master-n2"].ready.Store(false)
	waitFor(t, 10*time.Second, func() bool { return !strings.Contains(table(), "ip6 daddr") })
	if tab := table(); strings.Count(tab, "ip daddr 192.168.126.250 tcp dport 6443") != 2 {
		t.Errorf("the IPv4 VIP's rules went with IPv6's backends:\n%s", tab)
	}
	if err := l.ServingVIP(vip6); err == nil {
		t.Error("serving the IPv6 VIP with no master up over IPv6")
	}
	if err := l.ServingVIP(vip4); err != nil {
		t.Errorf("IPv4 VIP: %v", err)
	}
	if name, _ := peer(client, vip6); name != "local" {
		t.Errorf("with no master up over IPv6 the IPv6 VIP reached %q, want n0's own server", name)
	}
	if got := spread(vip4); got["master-n1"] != 4 || got["master-n2"] != 4 {
		t.Errorf("IPv4 clients reached %v, want both masters", got)
	}

	for _, f := range v6 {
		f.ready.Store(true)
	}
	waitFor(t, 10*time.Second, func() bool {
		return l.Pool(PoolAPI).HealthyFor(FamilyIPv6) == 2 && strings.Count(table(), "redirect to :9445") == 4
	})
	if got := spread(vip6); got["master-n1"] != 4 || got["master-n2"] != 4 {
		t.Errorf("back over IPv6, clients reached %v", got)
	}
}
