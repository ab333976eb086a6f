package lb

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// TestNetnsHandback moves the API VIPs from a live node (n0) to another
// (n1) while a client (n3) keeps one connection per family open through
// them to the master behind (n2), as a SIGTERM'd bootstrap hands over.
// With the handback, n1 passes the packets of those connections back to n0,
// whose LB still serves them while it drains: every request on the kept
// connections is answered, and new connections go to n1's LB. The control
// (n1 master with no predecessor, as after a dead master) shows the kept
// connections break once the grace of a takeover by silence is over, so
// the test measures the handback.
func TestNetnsHandback(t *testing.T) {
	netlabtest.RequireRoot(t)
	t.Run("handed over", func(t *testing.T) { runHandback(t, "lbhb", true) })
	t.Run("dead master", func(t *testing.T) { runHandback(t, "lbhx", false) })
}

func runHandback(t *testing.T, name string, handover bool) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 4, Name: name, IPv6: netip.MustParsePrefix("fd00:128::/64")})
	n0, n1, m, client := lab.Nodes[0], lab.Nodes[1], lab.Nodes[2], lab.Nodes[3]
	vips := []netip.Addr{netip.MustParseAddr("192.168.126.250"), netip.MustParseAddr("fd00:128::250")}
	ca := newTestCA(t, m.IPv4.Addr(), vips[0], vips[1])
	listenM, _ := inNode(m)
	master, err := startFake(t, ca, "master", ":6443", listenM)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &cluster.Config{
		Network: cluster.Network{APIVIPs: vips},
		Nodes:   []cluster.Node{{Name: master.name, Role: cluster.RoleMaster, IPs: []netip.Addr{m.IPv4.Addr(), m.IPv6.Addr()}}},
	}
	// VRRP speaks from the IPv4 address and, for IPv6, from the link-local.
	speakers := map[*netlab.Node][]netip.Addr{}
	for _, n := range []*netlab.Node{n0, n1} {
		speakers[n] = []netip.Addr{n.IPv4.Addr(), linkLocal(t, n)}
	}
	setVIPs := func(st *cluster.State, state cluster.VIPState, master, pred func(i int) netip.Addr) {
		for i, v := range vips {
			st.SetVIP(cluster.VIPStatus{Name: fmt.Sprintf("api-%d", i), VIP: v, Kind: cluster.VIPAPI, LocalState: state,
				Master: master(i), Predecessor: pred(i), Since: time.Now()})
		}
	}
	none := func(int) netip.Addr { return netip.Addr{} }
	from := func(n *netlab.Node) func(int) netip.Addr { return func(i int) netip.Addr { return speakers[n][i] } }

	addVIPs(t, n0, vips, true)
	st0, stop0 := startNodeLB(t, n0, cfg, 3*time.Second, true)
	st1, _ := startNodeLB(t, n1, cfg, 3*time.Second, true)
	setVIPs(st0, cluster.VIPStateMaster, none, none)
	setVIPs(st1, cluster.VIPStateBackup, from(n0), none)
	handbackTable := func(n *netlab.Node, fam string) string {
		out, err := n.Run(context.Background(), "nft", "list", "table", fam, HandbackTable)
		if err != nil {
			return ""
		}
		return out
	}
	waitFor(t, 10*time.Second, func() bool {
		return strings.Contains(handbackTable(n1, "ip"), "dup to "+n0.IPv4.Addr().String()) &&
			strings.Contains(handbackTable(n1, "ip6"), "dup to "+speakers[n0][1].String())
	})
	if out := handbackTable(n0, "ip"); out != "" {
		t.Errorf("n0, master without predecessor, has a handback table:\n%s", out)
	}
	t.Logf("n1 while backup:\n%s%s", handbackTable(n1, "ip"), handbackTable(n1, "ip6"))

	// One kept connection per family, through n0's LB.
	waitRedirected(t, n0, vips...)
	var kept []*keptConn
	for _, v := range vips {
		kc := dialKept(t, client, ca, v)
		if got := kc.peer(); !strings.Contains(got, "master") {
			t.Fatalf("first request through %s: %q", v, got)
		}
		kept = append(kept, kc)
	}
	var wg sync.WaitGroup
	stopReq := make(chan struct{})
	var moved atomic.Bool
	results := make([]struct {
		ok, after int // answered in all, and once the move was done
		errs      []string
	}, len(kept))
	for i, kc := range kept {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopReq:
					return
				case <-time.After(5 * time.Millisecond):
				}
				after := moved.Load()
				if got := kc.peer(); strings.HasPrefix(got, "master ") {
					results[i].ok++
					if after {
						results[i].after++
					}
				} else {
					results[i].errs = append(results[i].errs, got)
					return
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)

	// The move, in VRRP's order: n1 takes the VIPs and tells the client
	// (the gratuitous ARP / unsolicited NA, here written into its
	// neighbour table), then n0 releases them and its LB drains.
	pred := none
	if handover {
		pred = from(n0)
	}
	setVIPs(st1, cluster.VIPStateMaster, none, pred)
	addVIPs(t, n1, vips, true)
	time.Sleep(50 * time.Millisecond) // as the handback table follows a real takeover: already there
	mac := n1.MAC.String()
	for _, v := range vips {
		if _, err := client.Run(context.Background(), "ip", "neigh", "replace", v.String(), "lladdr", mac, "dev", client.Iface, "nud", "reachable"); err != nil {
			t.Fatal(err)
		}
	}
	addVIPs(t, n0, vips, false)
	setVIPs(st0, cluster.VIPStateInit, none, none)
	stop0()
	moved.Store(true)

	// New connections now reach n1's LB.
	time.Sleep(100 * time.Millisecond)
	for _, v := range vips {
		kc := dialKept(t, client, ca, v)
		got := kc.peer()
		if strings.HasPrefix(got, "error") {
			time.Sleep(time.Second)
			got += " / then " + kc.peer()
			kc2 := dialKept(t, client, ca, v)
			got += " / new conn " + kc2.peer()
			kc2.close()
		}
		kc.close()
		if !strings.Contains(got, n1.IPv4.Addr().String()) && !strings.Contains(got, n1.IPv6.Addr().String()) {
			t.Errorf("new connection through %s after the move reached the master from %q, want n1's LB", v, got)
		}
	}
	// After a takeover by silence n1 still passes them back for
	// silenceGrace (n0 might be only slow), then no more.
	wait := time.Second
	if !handover {
		wait = silenceGrace + 1500*time.Millisecond
	}
	time.Sleep(wait)
	close(stopReq)
	wg.Wait()
	for _, kc := range kept {
		kc.close()
	}
	for i, v := range vips {
		r := results[i]
		t.Logf("kept connection through %s: %d requests answered (%d after the move), errors %q", v, r.ok, r.after, r.errs)
		if handover && (len(r.errs) > 0 || r.after < 5) {
			t.Errorf("kept connection through %s: %d answered after the move, errors %q; want every request answered across it", v, r.after, r.errs)
		}
		if !handover && len(r.errs) == 0 {
			t.Errorf("control: the kept connection through %s survived a move with no handback; the test does not measure it", v)
		}
	}
	if handover {
		for _, fam := range []string{"ip", "ip6"} {
			tab := handbackTable(n1, fam)
			if m := regexp.MustCompile(`counter packets (\d+) .* dup to`).FindStringSubmatch(tab); m == nil || m[1] == "0" {
				t.Errorf("n1's %s handback rule passed no packets:\n%s", fam, tab)
			}
		}
		// The window ends: DrainTimeout (3 s) + 2 s after the takeover.
		waitFor(t, 10*time.Second, func() bool { return handbackTable(n1, "ip") == "" && handbackTable(n1, "ip6") == "" })
	}
}

// TestNetnsHandbackTables: ApplyHandback writes one table per family in
// one batch (one rule passing a VIP:Port's packets to all its targets, one
// dropping what was passed back), replaces them whole and removes them, in
// its namespace only.
func TestNetnsHandbackTables(t *testing.T) {
	netlabtest.RequireRoot(t)
	lab := netlabtest.New(t, netlab.Options{Nodes: 1, Name: "lbhbt"})
	n := lab.Nodes[0]
	r, err := NewRedirector("", "/run/netns/"+n.NS)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	list := func(fam string) string {
		out, err := n.Run(context.Background(), "nft", "list", "table", fam, HandbackTable)
		if err != nil {
			return ""
		}
		return out
	}
	v4 := Handback{VIP: netip.MustParseAddr("192.0.2.250"), Port: 6443, To: netip.MustParseAddr("192.0.2.10")}
	v4b := Handback{VIP: v4.VIP, Port: v4.Port, To: netip.MustParseAddr("192.0.2.9")} // an older holder of the same VIP
	v6 := Handback{VIP: netip.MustParseAddr("2001:db8::250"), Port: 22623, To: netip.MustParseAddr("fe80::10")}
	if err := r.ApplyHandback([]Handback{v6, v4, v4b}, false); err != nil {
		t.Fatal(err)
	}
	for fam, want := range map[string][]string{
		"ip": {"ip daddr 192.0.2.250 tcp dport 6443 ip ttl > 1 ct state invalid,new tcp flags ! syn counter packets 0 bytes 0 ip ttl set 1 dup to 192.0.2.9 device iif dup to 192.0.2.10 device iif drop",
			"ip daddr 192.0.2.250 tcp dport 6443 ip ttl <= 1 ct state invalid,new tcp flags ! syn counter packets 0 bytes 0 drop"},
		"ip6": {"ip6 daddr 2001:db8::250 tcp dport 22623 ip6 hoplimit > 1 ct state invalid,new tcp flags ! syn counter packets 0 bytes 0 ip6 hoplimit set 1 dup to fe80::10 device iif drop",
			"ip6 daddr 2001:db8::250 tcp dport 22623 ip6 hoplimit <= 1 ct state invalid,new tcp flags ! syn counter packets 0 bytes 0 drop"},
	} {
		got := list(fam)
		for _, w := range want {
			if !strings.Contains(got, w) || !strings.Contains(got, "type filter hook prerouting priority mangle") {
				t.Errorf("%s table:\n%s\nwant the rule %q in a prerouting chain at priority mangle (-150)", fam, got, w)
			}
		}
	}
	if missing, err := r.HandbackMissing(); err != nil || missing {
		t.Errorf("HandbackMissing = %v, %v with both tables there", missing, err)
	}
	if _, err := n.Run(context.Background(), "nft", "delete", "table", "ip6", HandbackTable); err != nil {
		t.Fatal(err)
	}
	if missing, err := r.HandbackMissing(); err != nil || !missing {
		t.Errorf("HandbackMissing = %v, %v after the ip6 table was deleted", missing, err)
	}
	if err := r.ApplyHandback([]Handback{v4, v6}, true); err != nil {
		t.Fatal(err)
	}
	if list("ip6") == "" {
		t.Error("a forced apply did not restore the ip6 table")
	}
	if err := r.ApplyHandback([]Handback{v4}, false); err != nil {
		t.Fatal(err)
	}
	if list("ip6") != "" || list("ip") == "" {
		t.Errorf("with IPv4 only: ip table %q, ip6 table %q", list("ip"), list("ip6"))
	}
	if err := r.ApplyHandback(nil, false); err != nil {
		t.Fatal(err)
	}
	if list("ip") != "" || list("ip6") != "" {
		t.Error("tables left after applying none")
	}
}

// startNodeLB runs, in n's namespace, an LB for cfg's API VIPs (the MCS
// pool off, quick checks) and returns the State the test publishes n's VIP
// states on and what stops the LB. drain is its DrainTimeout (0: the
// default); self sends the VIPs' traffic to n's own addresses
// (Options.Self), which the IPv6 handback needs. The LB stops when the
// test ends, which fails if its Run returned an error, did not return
// within DrainTimeout and 10 s, or left a handback table behind.
func startNodeLB(t *testing.T, n *netlab.Node, cfg *cluster.Config, drain time.Duration, self bool) (*cluster.State, context.CancelFunc) {
	t.Helper()
	listen, dial := inNode(n)
	o := DefaultOptions()
	o.MCS.Disabled = true
	o.NetNS = "/run/netns/" + n.NS
	o.Listen, o.Dial = listen, dial
	o.Health = HealthOptions{Interval: 100 * time.Millisecond, FastInterval: 30 * time.Millisecond, Timeout: 500 * time.Millisecond, Fall: 2, Rise: 1}
	if drain > 0 {
		o.DrainTimeout = drain
	}
	if self {
		o.Self = func(v6 bool) (netip.Addr, bool) {
			if v6 {
				return n.IPv6.Addr(), true
			}
			return n.IPv4.Addr(), true
		}
	}
	st := cluster.NewState(cfg)
	l, err := New(cfg, st, o, NewMetrics(prometheus.NewRegistry()), testLogger(t).With("node", n.Name))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(o.DrainTimeout + 10*time.Second):
			t.Errorf("%s: LB did not stop", n.Name)
		}
		if out, err := n.Run(context.Background(), "nft", "list", "tables"); err != nil || strings.Contains(out, HandbackTable) {
			t.Errorf("%s: handback table left after exit (err %v):\n%s", n.Name, err, out)
		}
	})
	return st, cancel
}

// addVIPs adds (or removes) the VIPs on n's interface.
func addVIPs(t *testing.T, n *netlab.Node, vips []netip.Addr, add bool) {
	t.Helper()
	h, link := nodeLink(t, n)
	var err error
	for _, v := range vips {
		bits := v.BitLen()
		a := &netlink.Addr{IPNet: &net.IPNet{IP: v.AsSlice(), Mask: net.CIDRMask(bits, bits)}}
		if v.Is6() {
			// As vrrp adds them: never chosen as a source address.
			a.Flags, a.ValidLft, a.PreferedLft = unix.IFA_F_NODAD, math.MaxUint32, 0
		}
		if add {
			err = h.AddrAdd(link, a)
		} else {
			err = h.AddrDel(link, a)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func linkLocal(t *testing.T, n *netlab.Node) netip.Addr {
	t.Helper()
	h, link := nodeLink(t, n)
	addrs, err := h.AddrList(link, netlink.FAMILY_V6)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.IsLinkLocalUnicast() {
			return ip
		}
	}
	t.Fatalf("%s has no link-local address", n.Name)
	return netip.Addr{}
}

// nodeLink is a netlink handle in n (closed when the test ends) and n's
// interface.
func nodeLink(t *testing.T, n *netlab.Node) (*netlink.Handle, netlink.Link) {
	t.Helper()
	h, err := n.Handle()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	link, err := h.LinkByName(n.Iface)
	if err != nil {
		t.Fatal(err)
	}
	return h, link
}

// keptConn is one TLS connection through a VIP carrying request after
// request (HTTP keep-alive), with no transport that would quietly retry
// on a new connection.
type keptConn struct {
	c  *tls.Conn
	br *bufio.Reader
}

func dialKept(t *testing.T, n *netlab.Node, ca *testCA, vip netip.Addr) *keptConn {
	t.Helper()
	_, dial := inNode(n)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	raw, err := dial(ctx, "tcp", netip.AddrPortFrom(vip, 6443).String())
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(raw, &tls.Config{RootCAs: ca.pool, ServerName: "api.test"})
	if err := c.HandshakeContext(ctx); err != nil {
		t.Fatal(err)
	}
	return &keptConn{c: c, br: bufio.NewReader(c)}
}

// peer asks /peer on the kept connection: "master <LB's address>" or the
// error.
func (k *keptConn) peer() string {
	_ = k.c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(k.c, "GET /peer HTTP/1.1\r\nHost: api.test\r\n\r\n"); err != nil {
		return "error: " + err.Error()
	}
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "error: " + err.Error()
	}
	return string(b)
}

func (k *keptConn) close() { _ = k.c.Close() }

// TestNetnsRedirectToSelf: an IPv6 VIP's rule sends to the node's own
// address (dnat), its local twin still redirects, and the repair check
// reads the table back as installed (no spurious repair).
func TestNetnsRedirectToSelf(t *testing.T) {
	netlabtest.RequireRoot(t)
	lab := netlabtest.New(t, netlab.Options{Nodes: 1, Name: "lbself", IPv6: netip.MustParsePrefix("fd00:129::/64")})
	n := lab.Nodes[0]
	r, err := NewRedirector("", "/run/netns/"+n.NS)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rules := []Redirect{
		{VIP: netip.MustParseAddr("192.0.2.250"), Port: 6443, ToPort: 9445},
		{VIP: netip.MustParseAddr("fd00:129::250"), Port: 6443, ToPort: 9445, To: n.IPv6.Addr()},
	}
	if err := r.Apply(rules); err != nil {
		t.Fatal(err)
	}
	defer r.Remove()
	out, err := n.Run(context.Background(), "nft", "list", "table", "inet", DefaultTable)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ip6 daddr fd00:129::250 tcp dport 6443 counter packets 0 bytes 0 dnat ip6 to [" + n.IPv6.Addr().String() + "]:9445",
		`oifname "lo" ip6 daddr fd00:129::250 tcp dport 6443 counter packets 0 bytes 0 redirect to :9445`,
		"ip daddr 192.0.2.250 tcp dport 6443 counter packets 0 bytes 0 redirect to :9445",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if rep, err := r.Check("test"); err != nil || rep != nil {
		t.Errorf("the table as installed reads back as changed: %+v, %v", rep, err)
	}
}

// waitRedirected waits until n's LB redirects each of vips to itself: a
// client dialling a VIP before that is refused.
func waitRedirected(t testing.TB, n *netlab.Node, vips ...netip.Addr) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool {
		out, err := n.Run(context.Background(), "nft", "list", "table", "inet", DefaultTable)
		if err != nil {
			return false
		}
		for _, v := range vips {
			fam := "ip"
			if v.Is6() {
				fam = "ip6"
			}
			if !strings.Contains(out, fam+" daddr "+v.String()+" tcp dport ") {
				return false
			}
		}
		return true
	})
}
