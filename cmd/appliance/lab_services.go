package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"appliance/internal/netlab"
)

const labDomain = "ocp4.example.com"

// labDHCPScript is what udhcpc runs on each event: it applies the lease the
// way a distribution's script would and prints it for the lab to show.
const labDHCPScript = `#!/bin/sh
# Called by udhcpc with $1 = deconfig, bound, renew or nak; the lease is in the environment.
case "$1" in
deconfig)
	ip -4 addr flush dev "$interface"
	;;
bound|renew)
	ip addr replace "$ip/${mask:-24}" dev "$interface"
	for r in $router; do ip route replace default via "$r" dev "$interface"; break; done
	echo "LAB ip=$ip"
	echo "LAB mask=$mask"
	echo "LAB router=$router"
	echo "LAB dns=$dns"
	echo "LAB hostname=$hostname"
	echo "LAB domain=$domain"
	echo "LAB lease=$lease"
	echo "LAB serverid=$serverid"
	;;
esac
exit 0
`

// writeFiles writes appliance.yaml and the DHCP client script into the lab's
// directory, which Close removes.
func (l *labRun) writeFiles() (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, `cluster:
  name: ocp4
  baseDomain: example.com
network:
  machineCIDR: 192.168.126.0/24
  interface: eth0
  gateway: 192.168.126.1       # nobody holds it: the lab has no way out
  apiVIPs: [%s]
  ingressVIPs: [%s]
  upstreamDNS: [192.168.126.1] # names outside the cluster go nowhere in the lab
nodes:
`, l.vip, l.ingress)
	for i, n := range l.masters {
		fmt.Fprintf(&b, "  - {name: master-%d, role: master, mac: %q, ips: [%s]}   # lab node %s\n",
			i, n.MAC, n.IPv4.Addr(), n.Name)
	}
	fmt.Fprintf(&b, "  - {name: worker-0, role: worker, mac: %q, ips: [%s]}   # lab node %s, the client\n",
		l.client.MAC, l.workerIP, l.client.Name)
	fmt.Fprintf(&b, "vrrp:\n  advertInterval: %s\nadmin:\n  listen: %s\n", l.f.interval, labAdminVIP)
	l.cfgPath = filepath.Join(l.lab.Dir(), "appliance.yaml")
	if err := os.WriteFile(l.cfgPath, []byte(b.String()), 0o644); err != nil {
		return "", fmt.Errorf("lab: %w", err)
	}
	l.script = filepath.Join(l.lab.Dir(), "udhcpc.sh")
	if err := os.WriteFile(l.script, []byte(labDHCPScript), 0o755); err != nil {
		return "", fmt.Errorf("lab: %w", err)
	}
	return b.String(), nil
}

// startApp starts the appliance binary with args inside n.
func (l *labRun) startApp(n *netlab.Node, args ...string) (*netlab.Process, error) {
	full := append([]string{"--log-level", l.g.logLevel, "--log-format", "text"}, args...)
	return n.Start(l.ctx, l.exe, full...)
}

func (l *labRun) startVIP(i int) error {
	p, err := l.startApp(l.masters[i], "vip", "--config", l.cfgPath, "--node", fmt.Sprintf("master-%d", i),
		"--admin-listen", labAdminVIP)
	l.vipProcs[i] = p
	return err
}

func (l *labRun) startAPIServer(i int) error {
	name := fmt.Sprintf("master-%d", i)
	p, err := l.startApp(l.masters[i], "lab", "apiserver", "--listen", ":6443", "--name", name,
		"--fail-file", l.failFile(i))
	l.apiProcs[i] = p
	return err
}

func (l *labRun) failFile(i int) string {
	return filepath.Join(l.lab.Dir(), fmt.Sprintf("fail-readyz-master-%d", i))
}

func (l *labRun) setup() error {
	l.header("1. Setup: a cluster in network namespaces",
		fmt.Sprintf("Namespaces %s-n0..n%d hang on one bridge (192.168.126.0/24); nothing in the host's network changes.",
			l.lab.Prefix(), len(l.masters)),
		fmt.Sprintf("n0..n%d are the control plane (master-0..%d), %s is a client that will become worker-0.",
			len(l.masters)-1, len(l.masters)-1, l.client.Name),
		"Every service reads the same appliance.yaml:")
	cfg, err := l.writeFiles()
	if err != nil {
		return err
	}
	fmt.Fprintf(l.out, "\n    # %s\n", l.cfgPath)
	for _, line := range strings.Split(strings.TrimRight(cfg, "\n"), "\n") {
		fmt.Fprintf(l.out, "    %s\n", line)
	}
	fmt.Fprintln(l.out)
	l.vipProcs = make([]*netlab.Process, len(l.masters))
	l.apiProcs = make([]*netlab.Process, len(l.masters))
	for i, n := range l.masters {
		ip := n.IPv4.Addr().String()
		if err := l.startVIP(i); err != nil {
			return err
		}
		if _, err := l.startApp(n, "dns", "--config", l.cfgPath, "--listen", ip+":53", "--admin-listen", labAdminDNS); err != nil {
			return err
		}
		if err := l.startAPIServer(i); err != nil {
			return err
		}
		if _, err := l.startApp(n, "lb", "--config", l.cfgPath, "--no-mcs", "--admin-listen", labAdminLB); err != nil {
			return err
		}
		svc := "vip, dns (" + ip + ":53), lb (VIP:6443 -> :9445), stand-in API server (:6443)"
		if i == 0 {
			if _, err := l.startApp(n, "dhcp", "--config", l.cfgPath, "--interface", n.Iface,
				"--leases", filepath.Join(l.lab.Dir(), "dhcp-leases.json"), "--admin-listen", labAdminDHCP); err != nil {
				return err
			}
			svc += ", dhcp"
		}
		l.say("%s master-%d %s: %s", n.Name, i, ip, svc)
	}
	// Wait until every service answers on its admin listener.
	for i, n := range l.masters {
		checks := [][2]string{{"dns", labAdminDNS}, {"lb", labAdminLB}, {"vip", labAdminVIP}}
		if i == 0 {
			checks = append(checks, [2]string{"dhcp", labAdminDHCP})
		}
		for _, c := range checks {
			if err := l.waitReady(n, c[1], 15*time.Second); err != nil {
				return fmt.Errorf("lab: %s on %s not ready: %w (logs in %s)", c[0], n.Name, err, l.lab.Dir())
			}
		}
	}
	// The LBs are ready with one healthy backend; the demo wants all of them
	// (a backend probed before its API server listened needs 3 good checks).
	for _, n := range l.masters {
		if err := l.waitPool(n, 10*time.Second); err != nil {
			return fmt.Errorf("lab: lb on %s: %w (logs in %s)", n.Name, err, l.lab.Dir())
		}
	}
	l.say("all services ready (admin listeners inside each node: vip %s, dns %s, lb %s, dhcp %s); every LB sees all masters up",
		labAdminVIP, labAdminDNS, labAdminLB, labAdminDHCP)
	return nil
}

// waitPool waits until the LB on n sees every master up.
func (l *labRun) waitPool(n *netlab.Node, timeout time.Duration) error {
	end := time.Now().Add(timeout)
	for {
		p, err := lbPool(n)
		up := 0
		for _, st := range p {
			if st == "up" {
				up++
			}
		}
		if err == nil && up == len(l.masters) {
			return nil
		}
		if time.Now().After(end) {
			if err == nil {
				err = fmt.Errorf("API pool: %s", poolString(p))
			}
			return err
		}
		select {
		case <-l.ctx.Done():
			return l.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// labHTTPGet fetches http://addr/path from inside n: the connection is dialled
// inside the node's namespace and then used from this goroutine.
func labHTTPGet(n *netlab.Node, addr, path string) (int, string, error) {
	var c net.Conn
	if err := n.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, 2*time.Second)
		return err
	}); err != nil {
		return 0, "", err
	}
	tr := &http.Transport{
		DialContext:       func(context.Context, string, string) (net.Conn, error) { return c, nil },
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 3 * time.Second}).Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func (l *labRun) waitReady(n *netlab.Node, addr string, timeout time.Duration) error {
	end := time.Now().Add(timeout)
	for {
		code, body, err := labHTTPGet(n, addr, "/readyz")
		if err == nil && code == http.StatusOK {
			return nil
		}
		if time.Now().After(end) {
			if err == nil {
				err = fmt.Errorf("/readyz: %d %s", code, strings.TrimSpace(body))
			}
			return err
		}
		select {
		case <-l.ctx.Done():
			return l.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (l *labRun) dhcpSection() error {
	l.header("2. DHCP: the client gets its address from the appliance",
		fmt.Sprintf("appliance.yaml reserves %s for worker-0, whose MAC is the client's (%s).", l.workerIP, l.client.MAC),
		fmt.Sprintf("appliance dhcp runs on n0; the client drops its static address %s and runs udhcpc.", l.client.IPv4))
	if !l.have["udhcpc"] {
		l.say("udhcpc is missing (apt-get install udhcpc): the client keeps its static address %s", l.client.IPv4)
		return nil
	}
	if _, err := l.client.Run(l.ctx, "ip", "-4", "addr", "flush", "dev", l.client.Iface); err != nil {
		return err
	}
	out, _ := l.client.Run(l.ctx, "ip", "-4", "-br", "addr", "show", "dev", l.client.Iface)
	if !strings.Contains(out, ".") {
		out = "no IPv4 address left"
	}
	l.say("client: ip -4 addr flush dev eth0 -> %s", strings.Join(strings.Fields(out), " "))
	l.say("client: udhcpc -f -q -n -i eth0 -s %s", filepath.Base(l.script))
	t0 := time.Now()
	out, err := l.client.Run(l.ctx, "udhcpc", "-f", "-q", "-n", "-i", l.client.Iface, "-s", l.script, "-t", "5", "-T", "1")
	if err != nil {
		return fmt.Errorf("lab: udhcpc: %w", err)
	}
	lease := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimPrefix(line, "LAB "), "="); ok && strings.HasPrefix(line, "LAB ") {
			lease[k] = v
		}
	}
	if lease["ip"] == "" {
		return fmt.Errorf("lab: udhcpc got no lease:\n%s", out)
	}
	l.say("lease after %s from server %s:", time.Since(t0).Round(time.Millisecond), lease["serverid"])
	for _, k := range [][2]string{{"address", "ip"}, {"prefix", "mask"}, {"router", "router"}, {"DNS", "dns"},
		{"hostname", "hostname"}, {"domain", "domain"}, {"lease (s)", "lease"}} {
		v := lease[k[1]]
		if v == "" {
			v = "(none)"
		}
		fmt.Fprintf(l.out, "           %-10s %s\n", k[0], v)
	}
	out, _ = l.client.Run(l.ctx, "ip", "-4", "-br", "addr", "show", "dev", l.client.Iface)
	l.say("client: %s", strings.Join(strings.Fields(out), " "))
	return nil
}

// dig asks server for name (or the PTR of an address when ptr) from the client.
func (l *labRun) dig(server netip.Addr, name string, ptr bool) string {
	args := []string{"@" + server.String(), "+short", "+time=2", "+tries=1"}
	if ptr {
		args = append(args, "-x")
	}
	out, err := l.client.Run(l.ctx, "dig", append(args, name)...)
	if err != nil {
		return "error: " + strings.TrimSpace(out)
	}
	ans := strings.Fields(out)
	if len(ans) == 0 {
		return "(no answer)"
	}
	return strings.Join(ans, " ")
}

func (l *labRun) dnsSection() error {
	l.header("3. DNS: the cluster's names, served by appliance dns on every master",
		"api/api-int -> API VIP, *.apps -> ingress VIP, node names -> node addresses (with PTR).")
	if !l.have["dig"] {
		l.say("dig is missing (apt-get install bind9-dnsutils): skipping the queries")
		return nil
	}
	srv := l.masters[0].IPv4.Addr()
	for _, name := range []string{"api." + labDomain, "api-int." + labDomain, "foo.apps." + labDomain,
		"master-1." + labDomain, "worker-0." + labDomain} {
		l.say("client: dig @%s %-28s -> %s", srv, name, l.dig(srv, name, false))
	}
	l.say("client: dig @%s -x %-25s -> %s", srv, l.masters[1].IPv4.Addr(), l.dig(srv, l.masters[1].IPv4.Addr().String(), true))
	for _, n := range l.masters[1:] {
		a := n.IPv4.Addr()
		l.say("client: dig @%s %-28s -> %s", a, "api."+labDomain, l.dig(a, "api."+labDomain, false))
	}
	return nil
}

// lbPool reads the API pool from the LB on n: backend name -> state.
func lbPool(n *netlab.Node) (map[string]string, error) {
	code, body, err := labHTTPGet(n, labAdminLB, "/status")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("lb /status: %d", code)
	}
	var st struct {
		LB struct {
			Pools map[string][]struct {
				Name  string `json:"name"`
				State string `json:"state"`
			} `json:"pools"`
		} `json:"lb"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return nil, fmt.Errorf("lb /status: %w", err)
	}
	pool := map[string]string{}
	for _, b := range st.LB.Pools["api"] {
		pool[b.Name] = b.State
	}
	return pool, nil
}

func poolString(p map[string]string) string {
	names := make([]string, 0, len(p))
	for n := range p {
		names = append(names, n)
	}
	sort.Strings(names)
	var s []string
	for _, n := range names {
		s = append(s, n+" "+p[n])
	}
	return strings.Join(s, ", ")
}

// apiClient calls the API through the VIP from the client in the background
// and counts who answered.
type apiClient struct {
	mu     sync.Mutex
	sent   int
	ok     int
	by     map[string]int
	errs   []string
	cancel context.CancelFunc
	done   chan struct{}
}

func (l *labRun) curlArgs(path string) []string {
	return []string{"-sk", "--max-time", "3", "--resolve", "api." + labDomain + ":6443:" + l.vip.String(),
		"https://api." + labDomain + ":6443" + path}
}

func (l *labRun) startAPIClient(every time.Duration) *apiClient {
	ctx, cancel := context.WithCancel(l.ctx)
	c := &apiClient{by: map[string]int{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			out, err := l.client.Run(ctx, "curl", append(l.curlArgs("/version"), "-w", " %{http_code}")...)
			if ctx.Err() != nil {
				return
			}
			var st struct {
				Node string `json:"node"`
			}
			c.mu.Lock()
			c.sent++
			if body, code, _ := strings.Cut(strings.TrimSpace(out), " "); err == nil && code == "200" &&
				json.Unmarshal([]byte(body), &st) == nil {
				c.ok++
				c.by[st.Node]++
			} else {
				c.errs = append(c.errs, strings.TrimSpace(out))
			}
			c.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return c
}

func (c *apiClient) stop() { c.cancel(); <-c.done }

func (c *apiClient) summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.by))
	for n := range c.by {
		names = append(names, n)
	}
	sort.Strings(names)
	var s []string
	for _, n := range names {
		s = append(s, n+" "+strconv.Itoa(c.by[n]))
	}
	if len(s) == 0 {
		return fmt.Sprintf("%d of %d requests answered", c.ok, c.sent)
	}
	return fmt.Sprintf("%d of %d requests answered (%s)", c.ok, c.sent, strings.Join(s, ", "))
}

// watchPool prints the LB pool on n whenever it changes, until done says so
// or max passes.
func (l *labRun) watchPool(n *netlab.Node, c *apiClient, max time.Duration, done func(map[string]string) bool) error {
	end := time.Now().Add(max)
	last := ""
	for time.Now().Before(end) {
		p, err := lbPool(n)
		if err == nil {
			if s := poolString(p); s != last {
				l.say("  %s's LB pool: %s   [client: %s]", n.Name, s, c.summary())
				last = s
			}
			if done(p) {
				end = time.Now()
			}
		}
		select {
		case <-l.ctx.Done():
			return l.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func (l *labRun) lbSection() error {
	l.header("4. Load balancer: API calls through VIP -> appliance lb -> a master's API server",
		"Each master runs a stand-in API server (HTTPS :6443, /readyz) and appliance lb, which checks",
		"every master's /readyz and redirects VIP:6443 with nftables to its proxy on :9445.")
	hs := l.holders(l.vip)
	if len(hs) == 0 {
		return fmt.Errorf("lab: nobody holds the API VIP %s", l.vip)
	}
	holder := l.masters[hs[0]]
	p, err := lbPool(holder)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	l.say("the API VIP is on %s; its LB pool: %s", holder.Name, poolString(p))
	out, err := holder.Run(l.ctx, "nft", "list", "table", "inet", "appliance_lb")
	if err == nil {
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "redirect") {
				l.say("  nft on %s: %s", holder.Name, strings.TrimSpace(line))
			}
		}
	}
	if !l.have["curl"] {
		l.say("curl is missing (apt-get install curl): skipping the client's calls")
		return nil
	}
	vip, how := l.vip.String(), "the VIP from appliance.yaml"
	if l.have["dig"] {
		vip, how = l.dig(l.masters[0].IPv4.Addr(), "api."+labDomain, false), "from appliance dns"
	}
	for range 3 {
		out, err := l.client.Run(l.ctx, "curl", l.curlArgs("/readyz")...)
		if err != nil {
			out = "error: " + out
		}
		l.say("client: curl -sk https://api.%s:6443/readyz (api = %s, %s) -> %s",
			labDomain, vip, how, strings.TrimSpace(out))
	}
	l.say("client: now calling https://api.%s:6443/version every 100 ms in the background", labDomain)
	c := l.startAPIClient(100 * time.Millisecond)
	defer c.stop()
	state := func(i int) func(map[string]string) string {
		return func(p map[string]string) string { return p[fmt.Sprintf("master-%d", i)] }
	}
	m1, m2 := state(1), state(2)

	l.say("-- master-1's API server starts failing /readyz (like one shutting down; it still answers requests)")
	if err := os.WriteFile(l.failFile(1), nil, 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := l.watchPool(holder, c, 6*time.Second, func(p map[string]string) bool { return m1(p) == "down" }); err != nil {
		return err
	}
	l.say("-- kill -9 master-2's API server (connections refused; the LB retries on another backend)")
	if err := l.apiProcs[2].Kill(); err != nil {
		return err
	}
	if err := l.watchPool(holder, c, 6*time.Second, func(p map[string]string) bool { return m2(p) == "down" }); err != nil {
		return err
	}
	l.say("-- master-1 ready again, master-2's API server restarted (3 good checks in a row bring them back)")
	if err := os.Remove(l.failFile(1)); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := l.startAPIServer(2); err != nil {
		return err
	}
	if err := l.watchPool(holder, c, 8*time.Second, func(p map[string]string) bool { return m1(p) == "up" && m2(p) == "up" }); err != nil {
		return err
	}
	// Returning backends ramp their weight up over the LB's slow start (10 s),
	// so they win only a few of the next requests.
	select {
	case <-l.ctx.Done():
		return l.ctx.Err()
	case <-time.After(time.Second):
	}
	c.stop()
	l.say("client: %s", c.summary())
	c.mu.Lock()
	for i, e := range c.errs {
		if i == 3 {
			l.say("  ... %d more failures", len(c.errs)-3)
			break
		}
		l.say("  failed request: %q", e)
	}
	c.mu.Unlock()
	return nil
}
