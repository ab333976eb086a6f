package render

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// labConfig is a cluster config for a netlab lab: machine network and
// interface of the lab, extra appended under nodes:.
func labConfig(t *testing.T, lab *netlab.Lab, nodes string, extra string) *cluster.Config {
	t.Helper()
	y := fmt.Sprintf(`cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: %s
  interface: eth0
  gateway: 192.168.126.1
  apiVIPs: [192.168.126.5]
  ingressVIPs: [192.168.126.6]
nodes:
%s%s`, lab.Nodes[0].IPv4.Masked(), nodes, extra)
	cfg, err := cluster.Parse([]byte(y))
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	return cfg
}

// renderCfg renders cfg into a fresh folder.
func renderCfg(t *testing.T, cfg *cluster.Config) string {
	t.Helper()
	res, err := Render(cfg, Options{Source: "test", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	if err := WriteDir(out, res.Files); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDnsmasqLeasesReservation: dnsmasq started from the rendered config
// gives a node the address reserved for its MAC, with the router, DNS
// servers, host name and domain `appliance dhcp` would send, to dhclient.
func TestDnsmasqLeasesReservation(t *testing.T) {
	need(t, "dnsmasq", "dhclient")
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "rdnsmasq"})
	n0, n1 := lab.Nodes[0], lab.Nodes[1]
	const reserved = "192.168.126.51" // not n1's lab address: only the reservation can give it
	cfg := labConfig(t, lab, fmt.Sprintf(`  - {name: master-0, role: master, mac: "%s", ips: [%s]}
  - {name: worker-0, role: worker, mac: "%s", ips: [%s]}
`, n0.MAC, n0.IPv4.Addr(), n1.MAC, reserved), "")
	out := renderCfg(t, cfg)
	run := t.TempDir()
	if _, err := n1.Run(context.Background(), "ip", "addr", "flush", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	// Only where to keep its files comes from the command line here.
	if _, err := n0.Start(ctx, "dnsmasq", "--keep-in-foreground", "--log-facility=-", "--log-dhcp",
		"--user=root", "--conf-file="+filepath.Join(out, "dnsmasq", "dnsmasq.conf"),
		"--pid-file="+filepath.Join(run, "dnsmasq.pid"), "--dhcp-leasefile="+filepath.Join(run, "leases")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(run, "script.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nenv > \""+run+"/env.$$.${reason}\"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := n1.Start(ctx, "dhclient", "-d", "-1", "-v", "-sf", script,
		"-lf", filepath.Join(run, "dhclient.lease"), "-pf", filepath.Join(run, "dhclient.pid"), "eth0")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	env := waitBound(t, run, 20*time.Second)
	want := map[string]string{
		"new_ip_address":          reserved,
		"new_subnet_mask":         "255.255.255.0",
		"new_routers":             "192.168.126.1",
		"new_domain_name_servers": n0.IPv4.Addr().String(),
		"new_host_name":           "worker-0",
		"new_domain_name":         "ocp4.example.com",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
}

// waitBound waits for dhclient's script to run with reason BOUND and returns
// its environment.
func waitBound(t *testing.T, dir string, timeout time.Duration) map[string]string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ms, _ := filepath.Glob(filepath.Join(dir, "env.*.BOUND"))
		if len(ms) > 0 {
			time.Sleep(50 * time.Millisecond) // let the script finish writing
			b, err := os.ReadFile(ms[0])
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{}
			for _, line := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					env[k] = strings.Trim(v, "'")
				}
			}
			return env
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("dhclient was not BOUND within %v", timeout)
	return nil
}

// exchangeIn asks addr from inside node n's namespace.
func exchangeIn(t *testing.T, n *netlab.Node, addr string, q dns.Question) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.Question = []dns.Question{q}
	m.Id = dns.Id()
	m.RecursionDesired = true
	c := &dns.Client{Timeout: 3 * time.Second}
	var err error
	// A server just started (dnsmasq reads its config and binds a moment
	// later, longer on a loaded machine) refuses at first: try until the
	// deadline, not a fixed number of times.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var conn *dns.Conn
		if err = n.Do(func() error {
			var err error
			conn, err = c.Dial(addr)
			return err
		}); err == nil {
			var r *dns.Msg
			r, _, err = c.ExchangeWithConn(m, conn)
			conn.Close()
			if err == nil {
				return r
			}
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("%s %s to %s in %s: %v", q.Name, dns.TypeToString[q.Qtype], addr, n.Name, err)
	return nil
}

// replyText is a reply's rcode and answer records, owner names lower-cased
// and sorted: what a stub resolver acts on.
func replyText(m *dns.Msg) string {
	var s []string
	for _, rr := range m.Answer {
		s = append(s, strings.ToLower(rr.String()))
	}
	slices.Sort(s)
	return dns.RcodeToString[m.Rcode] + " [" + strings.Join(s, "; ") + "]"
}

// TestDnsmasqAnswersAsApplianceDNS asks dnsmasq, started from the rendered
// config, and `appliance dns` every cluster question, short node names
// included, and wants the same rcode and answers. dnsmasq is no zone's
// authority here, so negative replies carry no SOA; that is not compared.
func TestDnsmasqAnswersAsApplianceDNS(t *testing.T) {
	need(t, "dnsmasq")
	for _, name := range testCases {
		t.Run(name, func(t *testing.T) {
			cfg := mustCfg(t, name)
			var v4 netip.Prefix
			for _, p := range cfg.Network.MachineCIDRs {
				if p.Addr().Is4() {
					v4 = p
				}
			}
			lab := netlabtest.New(t, netlab.Options{Nodes: 1, Name: "rdnsmasqdns", IPv4: v4})
			n0 := lab.Nodes[0]
			out, _ := renderTo(t, name)
			run := t.TempDir()
			if _, err := n0.Start(context.Background(), "dnsmasq", "--keep-in-foreground", "--log-facility=-",
				"--user=root", "--conf-file="+filepath.Join(out, "dnsmasq", "dnsmasq.conf"),
				"--pid-file="+filepath.Join(run, "dnsmasq.pid"), "--dhcp-leasefile="+filepath.Join(run, "leases")); err != nil {
				t.Fatal(err)
			}
			dnsmasq := netip.AddrPortFrom(n0.IPv4.Addr(), 53).String()
			appliance := startApplianceDNS(t, cfg)
			qs := clusterQuestions(cfg)
			for _, n := range cfg.Nodes {
				qs = append(qs, dns.Question{Name: n.Name + ".", Qtype: dns.TypeA, Qclass: dns.ClassINET},
					dns.Question{Name: n.Name + ".", Qtype: dns.TypeAAAA, Qclass: dns.ClassINET})
			}
			deadline := time.Now().Add(10 * time.Second)
			for _, q := range qs {
				got := replyText(exchangeIn(t, n0, dnsmasq, q))
				for got == "REFUSED []" && time.Now().Before(deadline) { // still starting
					time.Sleep(50 * time.Millisecond)
					got = replyText(exchangeIn(t, n0, dnsmasq, q))
				}
				want, ok := dnsmasqDiffers(cfg, q)
				if !ok {
					want = replyText(exchange(t, appliance, q))
				}
				if got != want {
					t.Errorf("%s %s:\ndnsmasq:   %s\nappliance: %s", q.Name, dns.TypeToString[q.Qtype], got, want)
				}
			}
		})
	}
}

// dnsmasqDiffers gives dnsmasq's reply where it cannot say what appliance
// dns says (README, `appliance render`): it has no SOA or NS at the zone apex
// (it is no zone's authority), it answers apps.DOMAIN itself like *.apps,
// and a *.apps name of a type without an ingress VIP is NXDOMAIN instead of
// NODATA (address= holds addresses only).
func dnsmasqDiffers(cfg *cluster.Config, q dns.Question) (string, bool) {
	zone := dns.Fqdn(cfg.Cluster.Domain())
	name := strings.ToLower(q.Name)
	hasFamily := func(t uint16) bool {
		for _, v := range cfg.Network.IngressVIPs {
			if (t == dns.TypeA && v.Is4()) || (t == dns.TypeAAAA && v.Is6()) {
				return true
			}
		}
		return false
	}
	switch {
	case name == zone && (q.Qtype == dns.TypeSOA || q.Qtype == dns.TypeNS):
		return "NOERROR []", true
	case name == "apps."+zone || strings.HasSuffix(name, ".apps."+zone):
		if hasFamily(q.Qtype) {
			if name == "apps."+zone {
				var rrs []string
				for _, v := range cfg.Network.IngressVIPs {
					if hasFamily(q.Qtype) && v.Is4() == (q.Qtype == dns.TypeA) {
						rrs = append(rrs, fmt.Sprintf("%s\t%d\tin\t%s\t%s", name, 30, strings.ToLower(dns.TypeToString[q.Qtype]), v))
					}
				}
				return "NOERROR [" + strings.Join(rrs, "; ") + "]", true
			}
			return "", false
		}
		return "NXDOMAIN []", true
	}
	return "", false
}
