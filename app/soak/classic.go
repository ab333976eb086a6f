package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"

	clustercfg "appliance/internal/cluster"
)

// classicServices runs on each node what the appliance replaces there, as
// OpenShift's on-prem templates configure it:
//   - keepalived: the API VIP on the bootstrap and the masters, the
//     ingress VIP on the workers; VRRPv2 by unicast, 1 s adverts, the
//     templates' priorities, check scripts and weights;
//   - haproxy on the masters: :9445 to every control-plane apiserver
//     (/readyz over TLS, inter 5s fall 3 rise 1), VIP:6443 redirected to it;
//   - CoreDNS on every node: the templates' Corefile (the VIPs' templates,
//     the nodes in hosts, forward to the upstreams, cache 30, reload).
//
// runtimecfg's monitors, which keep those files and rules up to date on a
// real node, are loops of the soak doing what they do at their intervals:
// the haproxy monitor (every 6 s: the redirect and the flag file
// chk_ocp_lb reads while the API answers through haproxy; 3 good checks to
// add them, 11 bad ones to remove them), the keepalived monitor (every
// 10 s: the interface carrying the node's address; a change rewrites the
// file and reloads keepalived) and the CoreDNS monitor (every 30 s: the
// Kubernetes Nodes into the Corefile's hosts, which CoreDNS's reload plugin
// reads within its own 30 s and jitter).
//
// Left out: mdns-publisher, the MCS check (chk_mcs, weight 3), and the
// ingress instance on the masters (no router runs there, so it would sit
// in FAULT); the router's "pod Ready" check asks the router's readiness.
type classicServices struct {
	coredns string // the CoreDNS binary
	dir     string // the stack's files

	mu       sync.Mutex
	rendered map[string]string // node → interface its keepalived.conf names
	hosts    string            // the Corefile's hosts entries last written
}

// Intervals of runtimecfg's monitors (their defaults).
const (
	haproxyMonitorEvery    = 6 * time.Second
	keepalivedMonitorEvery = 10 * time.Second
	corednsMonitorEvery    = 30 * time.Second
	// The haproxy monitor adds the redirect after this many good checks
	// in a row, and removes it after that many bad ones.
	haproxyHealthyAfter, haproxyUnhealthyAfter = 3, 11
	// lbPort is where haproxy listens (VIP:6443 is redirected there) and
	// lbReadyPort its monitor-uri listener (chk_ocp_lb asks it).
	lbPort, lbReadyPort = 9445, 9444
)

func (*classicServices) name() string           { return StackClassic }
func (*classicServices) what() string           { return "keepalived, haproxy and CoreDNS" }
func (*classicServices) dhcp() bool             { return false }
func (*classicServices) metrics() bool          { return false }
func (s *classicServices) path(f string) string { return filepath.Join(s.dir, f) }

func (*classicServices) keys(nd *node) []string {
	if nd.role == roleMaster {
		return []string{"keepalived", "haproxy", "coredns"}
	}
	return []string{"keepalived", "coredns"}
}

// prepare writes the Corefile, the masters' haproxy.cfg and the check
// scripts.
func (s *classicServices) prepare(c *cluster) error {
	s.dir = filepath.Join(c.lab.Dir(), "classic")
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	if err := s.writeCorefile(c, nil); err != nil {
		return err
	}
	for _, nd := range c.byRole(roleMaster) {
		if err := writeAtomic(s.path("haproxy-"+nd.name+".cfg"), haproxyCfg(c, s.path("haproxy-"+nd.name+".sock"))); err != nil {
			return err
		}
	}
	if err := writeAtomic(s.path("redirect.nft"), redirectRules()); err != nil {
		return err
	}
	for _, nd := range c.nodes {
		for name, script := range checkScripts(nd, s.path("redirect-"+nd.name)) {
			if err := os.WriteFile(s.path(name+"-"+nd.name+".sh"), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *classicServices) start(c *cluster, nd *node) error {
	ifc, err := addrIface(nd)
	if err != nil {
		return err
	}
	if err := s.writeKeepalived(c, nd, ifc); err != nil {
		return err
	}
	// A container starts with an empty /run: no pid file of a killed
	// keepalived is left. A stale one can name a pid reused since (the
	// check scripts churn through pids), and keepalived would then exit
	// as "already running".
	pids := []string{s.path("keepalived-" + nd.name + ".pid"), s.path("vrrp-" + nd.name + ".pid")}
	for _, p := range pids {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := c.startExe(nd, "keepalived", "keepalived", "--dont-fork", "--log-console", "--log-detail", "--vrrp", "--no-syslog",
		"-f", s.path("keepalived-"+nd.name+".conf"), "-p", pids[0], "-r", pids[1]); err != nil {
		return err
	}
	if nd.role == roleMaster {
		if err := c.startExe(nd, "haproxy", "haproxy", "-db", "-f", s.path("haproxy-"+nd.name+".cfg")); err != nil {
			return err
		}
	}
	if err := c.startExe(nd, "coredns", s.coredns, "-conf", s.path("Corefile")); err != nil {
		return err
	}
	nd.markRestarted()
	return nil
}

func (s *classicServices) stop(c *cluster, nd *node, kill bool, grace time.Duration) error {
	return c.stopAll(nd, s.keys(nd), kill, grace)
}

// ready waits until nd's CoreDNS answers the API's name, its other
// processes running.
func (s *classicServices) ready(c *cluster, nd *node, within time.Duration) error {
	r := newResolver(nd.n, nd.addr())
	defer r.close()
	end := time.Now().Add(within)
	for {
		for _, k := range s.keys(nd) {
			if p := nd.proc(k); p != nil {
				select {
				case <-p.Done():
					return fmt.Errorf("soak: %s on %s exited: %v\n%s", k, nd.name, p.Wait(), tail(p.Output(), 20))
				default:
				}
			}
		}
		q := new(dns.Msg)
		q.SetQuestion("api."+Domain+".", dns.TypeA)
		if m, err := r.ask(q, time.Second); err == nil && len(m.Answer) > 0 {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("soak: CoreDNS on %s does not answer after %s\n%s", nd.name, within, tail(nd.proc("coredns").Output(), 20))
		}
		select {
		case <-c.ctx.Done():
			return c.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// loops starts runtimecfg's three monitors, as the soak's goroutines.
func (s *classicServices) loops(ctx context.Context, c *cluster, wg *sync.WaitGroup) {
	for _, nd := range c.byRole(roleMaster) {
		m := &haproxyMonitor{s: s, c: c, nd: nd}
		m.check() // the monitor's first check runs at its start
		every(ctx, wg, haproxyMonitorEvery, m.check)
	}
	for _, nd := range c.nodes {
		every(ctx, wg, keepalivedMonitorEvery, func() {
			if nd.isGone() {
				return
			}
			if err := s.followAddr(c, nd); err != nil {
				c.logf("keepalived monitor on %s: %v", nd.name, err)
			}
		})
	}
	every(ctx, wg, corednsMonitorEvery, func() {
		if c.kube == nil {
			return
		}
		nodes, err := c.kube.nodeAddrs()
		if err != nil {
			return // the API is down: keep the file, as runtimecfg does
		}
		if err := s.writeCorefile(c, nodes); err != nil {
			c.logf("CoreDNS monitor: %v", err)
		}
	})
}

// followAddr is the keepalived monitor's check: when the node's address
// moved to another interface, keepalived.conf names the new one and
// keepalived reloads.
func (s *classicServices) followAddr(c *cluster, nd *node) error {
	ifc, err := addrIface(nd)
	if err != nil {
		return err
	}
	s.mu.Lock()
	same := s.rendered[nd.name] == ifc
	s.mu.Unlock()
	if same {
		return nil
	}
	if err := s.writeKeepalived(c, nd, ifc); err != nil {
		return err
	}
	if p := nd.proc("keepalived"); p != nil {
		if err := p.Signal(syscall.SIGHUP); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return err
		}
	}
	return nil
}

// addrIface names the interface carrying nd's own address.
func addrIface(nd *node) (string, error) {
	as, err := nd.h.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return "", err
	}
	for _, a := range as {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == nd.addr() {
			l, err := nd.h.LinkByIndex(a.LinkIndex)
			if err != nil {
				return "", err
			}
			return l.Attrs().Name, nil
		}
	}
	return "", fmt.Errorf("%s carries no %s", nd.name, nd.addr())
}

// haproxyMonitor is runtimecfg's haproxy monitor on one master: the
// VIP:6443 redirect to haproxy, while the API answers through it.
type haproxyMonitor struct {
	s       *classicServices
	c       *cluster
	nd      *node
	healthy bool
	streak  int // checks in a row that disagree with healthy
}

func (m *haproxyMonitor) check() {
	if m.nd.isGone() {
		return
	}
	code, _, err := httpsGet(m.nd, fmt.Sprintf("127.0.0.1:%d", lbPort), "/readyz", 2*time.Second)
	flag := m.s.path("redirect-" + m.nd.name)
	if !m.observe(err == nil && code == 200) {
		_, _ = m.nd.n.Run(m.c.ctx, "nft", "delete", "table", "ip", classicNATTable)
		_ = os.Remove(flag)
		return
	}
	if _, err := m.nd.n.Run(m.c.ctx, "nft", "list", "table", "ip", classicNATTable); err != nil {
		if _, err := m.nd.n.Run(m.c.ctx, "nft", "-f", m.s.path("redirect.nft")); err != nil {
			m.c.logf("haproxy monitor on %s: %v", m.nd.name, err)
			return
		}
	}
	_ = os.WriteFile(flag, nil, 0o644)
}

// observe takes one check's result and returns whether the API counts as
// healthy through haproxy: a change needs haproxyHealthyAfter good checks
// in a row, or haproxyUnhealthyAfter bad ones.
func (m *haproxyMonitor) observe(ok bool) bool {
	if ok == m.healthy {
		m.streak = 0
		return m.healthy
	}
	m.streak++
	if ok && m.streak >= haproxyHealthyAfter || !ok && m.streak >= haproxyUnhealthyAfter {
		m.healthy, m.streak = ok, 0
	}
	return m.healthy
}

// classicNATTable holds the classic stack's VIP:6443 redirect.
const classicNATTable = "soak_classic_lb"

func redirectRules() string {
	return fmt.Sprintf(`table ip %[1]s {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr %[2]s tcp dport 6443 redirect to :%[3]d
	}
	chain output {
		type nat hook output priority -100; policy accept;
		ip daddr %[2]s tcp dport 6443 redirect to :%[3]d
	}
}
`, classicNATTable, apiVIP, lbPort)
}

// checkScripts are the node's keepalived check scripts by name, as the
// templates write them (chk_ocp_lb needs haproxy up and the monitor's
// redirect; chk_ocp_both takes the local apiserver instead).
func checkScripts(nd *node, flag string) map[string]string {
	curl := "/usr/bin/curl -o /dev/null -kLfs "
	router := curl + "http://127.0.0.1:1936/healthz/ready"
	switch nd.role {
	case roleBootstrap:
		return map[string]string{"chk_ocp": curl + "https://127.0.0.1:6443/readyz"}
	case roleMaster:
		lb := fmt.Sprintf("%shttp://127.0.0.1:%d/haproxy_ready && [ -e %s ]", curl, lbReadyPort, flag)
		return map[string]string{"chk_ocp_lb": lb, "chk_ocp_both": lb + " || " + curl + "https://127.0.0.1:6443/readyz"}
	}
	// The stand-in router serves only its readiness: it stands for the
	// router's health, its readiness and its pod's Ready.
	return map[string]string{"chk_ingress": router, "chk_ingress_ready": router, "chk_default_ingress": router}
}

// vrrpScript is one vrrp_script of the templates.
type vrrpScript struct {
	name                         string
	timeout                      string
	interval, weight, rise, fall int
}

// writeKeepalived writes nd's keepalived.conf naming interface ifc.
func (s *classicServices) writeKeepalived(c *cluster, nd *node, ifc string) error {
	apiVRID, ingressVRID := clustercfg.DeriveVRIDs("ocp4")
	var scripts []vrrpScript
	var peers []*node
	// The templates' passwords ("ocp4_api_vip") are cut to PASS's 8
	// characters by keepalived, with a warning; the file says them cut.
	vrid, prio, vip, pass := apiVRID, 40, apiVIP, "ocp4_api"
	switch nd.role {
	case roleBootstrap:
		scripts = []vrrpScript{{"chk_ocp", "0.9", 1, 50, 0, 0}}
	case roleMaster:
		scripts = []vrrpScript{{"chk_ocp_lb", "1.9", 2, 20, 3, 3}, {"chk_ocp_both", "1.9", 2, 5, 3, 3}}
	case roleWorker:
		vrid, prio, vip, pass = ingressVRID, 20, ingressVIP, "ocp4_ing"
		scripts = []vrrpScript{{"chk_ingress", "0.9", 1, 0, 3, 2}, {"chk_ingress_ready", "0.9", 1, 10, 3, 2}, {"chk_default_ingress", "4.9", 5, 50, 3, 2}}
	}
	for _, p := range c.nodes {
		if p != nd && p.controlPlane() == nd.controlPlane() {
			peers = append(peers, p)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "global_defs {\n    router_id %s\n    enable_script_security\n    script_user root\n    max_auto_priority -1\n    vrrp_garp_master_refresh 60\n}\n", nd.name)
	for _, sc := range scripts {
		fmt.Fprintf(&b, "\nvrrp_script %s {\n    script \"/usr/bin/timeout %s %s\"\n    interval %d\n    weight %d\n", sc.name, sc.timeout,
			s.path(sc.name+"-"+nd.name+".sh"), sc.interval, sc.weight)
		if sc.rise > 0 {
			fmt.Fprintf(&b, "    rise %d\n    fall %d\n", sc.rise, sc.fall)
		}
		b.WriteString("}\n")
	}
	fmt.Fprintf(&b, "\nvrrp_instance ocp4_VIP {\n    state BACKUP\n    interface %s\n    virtual_router_id %d\n    priority %d\n    advert_int 1\n", ifc, vrid, prio)
	fmt.Fprintf(&b, "    unicast_src_ip %s\n    unicast_peer {\n", nd.addr())
	for _, p := range peers {
		fmt.Fprintf(&b, "        %s\n", p.addr())
	}
	fmt.Fprintf(&b, "    }\n    authentication {\n        auth_type PASS\n        auth_pass %s\n    }\n", pass)
	fmt.Fprintf(&b, "    virtual_ipaddress {\n        %s/%d\n    }\n    track_script {\n", vip, nd.n.IPv4.Bits())
	for _, sc := range scripts {
		fmt.Fprintf(&b, "        %s\n", sc.name)
	}
	b.WriteString("    }\n}\n")
	if err := writeAtomic(s.path("keepalived-"+nd.name+".conf"), b.String()); err != nil {
		return err
	}
	s.mu.Lock()
	s.rendered[nd.name] = ifc
	s.mu.Unlock()
	return nil
}

// haproxyCfg is a master's haproxy.cfg: the templates' stats socket (at
// sock: the soak reads the open sessions there), defaults, the frontend on
// lbPort, the monitor-uri on lbReadyPort, and every control-plane node's
// apiserver (the bootstrap's too, as the API's endpoints list it until the
// teardown).
func haproxyCfg(c *cluster, sock string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
    stats socket %s mode 600 level admin

defaults
    maxconn 40000
    mode tcp
    option dontlognull
    retries 3
    timeout http-request 30s
    timeout queue 1m
    timeout connect 10s
    timeout client 1m
    timeout server 1m
    timeout tunnel 5m
    timeout client-fin 1s
    timeout server-fin 1s

frontend main
    bind *:%d
    default_backend masters

listen health_check_http_url
    bind *:%d
    mode http
    monitor-uri /haproxy_ready
    option dontlognull

backend masters
    timeout check 10s
    option httpchk GET /readyz HTTP/1.0
    balance roundrobin
`, sock, lbPort, lbReadyPort)
	for _, nd := range c.nodes {
		if nd.controlPlane() {
			fmt.Fprintf(&b, "    server %s %s:6443 weight 1 verify none check check-ssl inter 5s fall 3 rise 1\n", nd.name, nd.addr())
		}
	}
	return b.String()
}

// writeCorefile writes the Corefile with the configured nodes and the
// Kubernetes Nodes (name → InternalIP) in hosts, when that changed.
func (s *classicServices) writeCorefile(c *cluster, kubeNodes map[string]netip.Addr) error {
	entries := map[string]netip.Addr{}
	for _, nd := range c.nodes {
		entries[nd.name] = nd.addr()
	}
	for n, a := range kubeNodes {
		entries[n] = a
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	slices.Sort(names)
	var hosts strings.Builder
	for _, n := range names {
		fmt.Fprintf(&hosts, "        %s %s %s.%s\n", entries[n], n, n, Domain)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if hosts.String() == s.hosts {
		return nil
	}
	var ups []string
	for _, u := range c.ups {
		ups = append(ups, u.addr.String())
	}
	var b strings.Builder
	fmt.Fprintf(&b, ". {\n    errors\n    bufsize 512\n    health :18080\n    forward . %s {\n        policy sequential\n    }\n    cache 30\n    reload\n",
		strings.Join(ups, " "))
	for _, t := range []struct {
		match string
		vip   netip.Addr
	}{{`.*[.]apps.` + Domain, ingressVIP}, {`^api.` + Domain, apiVIP}, {`^api-int.` + Domain, apiVIP}} {
		fmt.Fprintf(&b, "    template IN A %s {\n        match %s\n        answer \"{{ .Name }} 60 in {{ .Type }} %s\"\n        fallthrough\n    }\n", Domain, t.match, t.vip)
		fmt.Fprintf(&b, "    template IN AAAA %s {\n        match %s\n        fallthrough\n    }\n", Domain, t.match)
	}
	fmt.Fprintf(&b, "    hosts {\n%s        fallthrough\n    }\n}\n", hosts.String())
	if err := writeAtomic(s.path("Corefile"), b.String()); err != nil {
		return err
	}
	s.hosts = hosts.String()
	return nil
}

// writeAtomic replaces path's content in one rename, so a reader (CoreDNS's
// reload, keepalived's) never sees half a file.
func writeAtomic(path, data string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// haproxySessions asks a master's haproxy for its open sessions (CurrConns
// of "show info"): each holds a client's socket and a server's.
func (s *classicServices) haproxySessions(nd *node) (float64, error) {
	c, err := net.DialTimeout("unix", s.path("haproxy-"+nd.name+".sock"), time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "show info\n"); err != nil {
		return 0, err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CurrConns: "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, errors.New("haproxy's show info has no CurrConns")
}
