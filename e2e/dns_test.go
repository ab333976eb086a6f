package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// writeDNSConfig writes a one-master config, with upstream as its upstream
// DNS when given.
func writeDNSConfig(t *testing.T, upstream string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "appliance.yaml")
	y := "cluster: {name: ocp4, baseDomain: example.com}\nnetwork:\n  machineCIDR: 192.168.126.0/24\n  apiVIPs: [192.168.126.5]\n  ingressVIPs: [192.168.126.6]\n"
	if upstream != "" {
		y += "  upstreamDNS: [\"" + upstream + "\"]\n"
	}
	y += "nodes:\n  - {name: master-0, role: master, ips: [192.168.126.10]}\n"
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDNSCommand runs `appliance dns` on loopback: it answers cluster names,
// serves its metrics and readiness on the admin port, and stops on SIGTERM.
func TestDNSCommand(t *testing.T) {
	listen, adminListen := netlabtest.FreeLoopbackAddr(t), netlabtest.FreeLoopbackAddr(t)
	cfg := writeDNSConfig(t, "192.0.2.1")
	exe := appliance(t) // built before the clock starts
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "dns", "--config", cfg, "--listen", listen, "--admin-listen", adminListen, "--log-format", "text")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()

	c := &dns.Client{Timeout: 500 * time.Millisecond}
	m := new(dns.Msg)
	m.SetQuestion("x.apps.ocp4.example.com.", dns.TypeA)
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, _, err := c.Exchange(m, listen)
		if err == nil {
			if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.168.126.6" {
				t.Fatalf("answer: %v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer: %v\n%s", err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range []struct{ path, want string }{
		{"/metrics", `appliance_dns_cluster_queries_total{result="answer"} 1`},
		{"/readyz", ""},
		{"/status", `"upstreams"`},
		// Every member says where it comes from.
		{"/status", `"Source": "config"`},
	} {
		path, want := c.path, c.want
		resp, err := http.Get("http://" + adminListen + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Fatalf("GET %s: %d, want %q in\n%s", path, resp.StatusCode, want, body)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, out.String())
	}
}

// TestDNSCommandMDNS runs `appliance dns --mdns` in two lab nodes that are
// not in the config: each learns the other over mDNS (through the command's
// host.Host) and answers its name with its own address, not the API VIP the
// other node holds.
func TestDNSCommandMDNS(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "dnsmdns"})
	path := filepath.Join(t.TempDir(), "appliance.yaml")
	y := "cluster: {name: ocp4, baseDomain: example.com}\nnetwork:\n  machineCIDR: 192.168.126.0/24\n  apiVIPs: [192.168.126.5]\n  ingressVIPs: [192.168.126.6]\n  upstreamDNS: [\"192.0.2.1\"]\n"
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	appliance(t) // built before the clock starts
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// master-1 holds the API VIP, as VRRP would put it there.
	if _, err := lab.Nodes[1].Run(ctx, "ip", "addr", "add", "192.168.126.5/24", "dev", lab.Nodes[1].Iface); err != nil {
		t.Fatal(err)
	}
	for i, n := range lab.Nodes {
		startAppliance(t, n, "dns", "--config", path, "--mdns", "--node", "master-"+string(rune('0'+i)), "--role", "master",
			"--listen", n.IPv4.Addr().String()+":53", "--admin-listen", n.IPv4.Addr().String()+":9445")
	}
	want := lab.Nodes[1].IPv4.Addr().String()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := lab.Nodes[0].Run(ctx, "dig", "@"+lab.Nodes[0].IPv4.Addr().String(), "+short", "+tries=1", "+time=1", "master-1.ocp4.example.com", "A")
		if err == nil && strings.TrimSpace(out) == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("master-1.ocp4.example.com at master-0: %q %v, want %s", out, err, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// /status names the interface mDNS is bound to and each member's source.
	out, err := lab.Nodes[0].Run(ctx, "curl", "-sf", "http://"+lab.Nodes[0].IPv4.Addr().String()+":9445/status")
	if err != nil || !strings.Contains(out, `"interface": "eth0"`) || !strings.Contains(out, `"Source": "mdns"`) {
		t.Fatalf("/status on master-0: %v\n%s", err, out)
	}
}

// TestDNSBurstWhileStopped: queries that arrive while `appliance dns` does
// not run (here stopped with SIGSTOP; on a node, a stall of the machine or
// a node's pods starting at once) wait in its sockets and are all answered
// when it runs again. A socket's default buffer (net.core.rmem_default,
// 208 KiB) held a few hundred; 3,000 were sent.
func TestDNSBurstWhileStopped(t *testing.T) {
	netlabtest.RequireRoot(t) // a buffer past net.core.rmem_max takes CAP_NET_ADMIN
	listen, adminListen := netlabtest.FreeLoopbackAddr(t), netlabtest.FreeLoopbackAddr(t)
	cfg := writeDNSConfig(t, "192.0.2.1")
	cmd := exec.Command(appliance(t), "dns", "--config", cfg, "--listen", listen, "--admin-listen", adminListen, "--log-format", "text")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadBuffer(8 << 20)
	server, err := net.ResolveUDPAddr("udp", listen)
	if err != nil {
		t.Fatal(err)
	}
	query := func(id uint16) []byte {
		m := new(dns.Msg)
		m.SetQuestion("x.apps.ocp4.example.com.", dns.TypeA)
		m.Id = id
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	buf := make([]byte, 512)
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := conn.WriteToUDP(query(65535), server); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, _, err := conn.ReadFromUDP(buf); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer\n%s", out.String())
		}
	}

	const burst = 3000
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for id := range uint16(burst) {
		if _, err := conn.WriteToUDP(query(id), server); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	seen := map[uint16]bool{}
	for len(seen) < burst {
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, _, err := conn.ReadFromUDP(buf)
		if err != nil {
			break
		}
		var r dns.Msg
		if r.Unpack(buf[:n]) == nil && r.Id < burst && len(r.Answer) == 1 {
			seen[r.Id] = true
		}
	}
	if len(seen) != burst {
		t.Fatalf("%d of %d queries sent while the server was stopped were answered", len(seen), burst)
	}
}

// askDNS asks server (host:53) for name's A record from node n.
func askDNS(n *netlab.Node, server, name string, timeout time.Duration) ([]dns.RR, error) {
	conn, err := n.DialTimeout("udp", server, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	c := &dns.Client{Timeout: timeout}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	r, _, err := c.ExchangeWithConn(m, &dns.Conn{Conn: conn})
	if err != nil {
		return nil, err
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
	}
	return r.Answer, nil
}
