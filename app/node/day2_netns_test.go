package node

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"appliance/bootstrap"
	"appliance/internal/apptest"
	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
	"appliance/lb"
)

// day2Config lists a whole cluster, none of whose nodes is a lab node: the
// lab's worker-7 and master-3 join it on day 2.
const day2Config = `cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: 192.168.126.0/24
  apiVIPs: [192.168.126.5]
  ingressVIPs: [192.168.126.6]
  upstreamDNS: [192.168.126.1]
nodes:
  - {name: bootstrap, role: bootstrap, ips: [192.168.126.30]}
  - {name: master-0, role: master, ips: [192.168.126.31]}
  - {name: master-1, role: master, ips: [192.168.126.32]}
  - {name: master-2, role: master, ips: [192.168.126.33]}
  - {name: worker-0, role: worker, ips: [192.168.126.40]}
  - {name: worker-1, role: worker, ips: [192.168.126.41]}
`

// TestDay2NodesStartFromStaticPod: a new worker and a replacement master,
// in no nodes entry, each in its own network and UTS namespace with its own
// host name, start `appliance run` with exactly the static pod's command
// line (no --node) and the node config Ignition writes, find themselves by
// host name and --role, and serve the cluster's DNS on their own addresses.
func TestDay2NodesStartFromStaticPod(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "day2"})
	bin := apptest.Build(t)
	cfg, err := cluster.Parse([]byte(day2Config))
	if err != nil {
		t.Fatal(err)
	}
	conf, err := bootstrap.NodeConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(t.TempDir(), "appliance.yaml")
	if err := os.WriteFile(confPath, conf, bootstrap.NodeConfigMode); err != nil {
		t.Fatal(err)
	}
	client := lab.Nodes[2]
	nodes := []struct {
		name string
		role cluster.Role
		lab  *netlab.Node
		plan string
	}{
		{"worker-7", cluster.RoleWorker, lab.Nodes[0], "ingress-vip"},
		{"master-3", cluster.RoleMaster, lab.Nodes[1], "api-vip"},
	}
	procs := map[string]*netlab.Process{}
	for _, n := range nodes {
		argv := staticPodArgv(t, cfg, n.role, bin, confPath)
		t.Logf("%s (%s): %s", n.name, n.lab.IPv4.Addr(), strings.Join(argv, " "))
		// A UTS namespace of its own gives the process the node's host
		// name; the shell then becomes the appliance (same pid).
		p, err := n.lab.Start(t.Context(), "unshare", append([]string{"--uts", "sh", "-c", `hostname "$0" && exec "$@"`, n.name}, argv...)...)
		if err != nil {
			t.Fatal(err)
		}
		procs[n.name] = p
	}

	for _, n := range nodes {
		server := n.lab.IPv4.Addr()
		var got []netip.Addr
		var lastErr error
		start := time.Now()
		for time.Since(start) < 30*time.Second {
			if got, lastErr = askA(client, server, "api.ocp4.example.com"); lastErr == nil && len(got) > 0 {
				break
			}
			select {
			case <-procs[n.name].Done():
				t.Fatalf("%s: appliance run exited: %v\n%s", n.name, procs[n.name].Wait(), procs[n.name].Output())
			case <-time.After(100 * time.Millisecond):
			}
		}
		if !slices.Equal(got, cfg.Network.APIVIPs) {
			t.Fatalf("%s: api.ocp4.example.com from %s: %v (err %v), want the API VIP %v\n%s",
				n.name, server, got, lastErr, cfg.Network.APIVIPs, procs[n.name].Output())
		}
		t.Logf("%s answers api.ocp4.example.com on %s after %v", n.name, server, time.Since(start).Round(time.Millisecond))

		// Who it took itself for, as its admin endpoint says.
		var st struct {
			Node struct{ Name, Role, Plan string }
			Host struct {
				Name       string
				Role       string
				Configured bool
				By         string
				Interface  string
			}
		}
		out := netlabtest.Run(t, n.lab, bin, "status", "--json")
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("%s: status: %v\n%s", n.name, err, out)
		}
		if st.Node.Name != n.name || st.Node.Role != string(n.role) || !strings.Contains(st.Node.Plan, n.plan) ||
			st.Host.Name != n.name || st.Host.Configured || st.Host.By != "host name and --role" || st.Host.Interface != "eth0" {
			t.Errorf("%s: identified as %+v, host view %+v; want %s, role %s (plan with %s), a day-2 node found by host name and --role on eth0",
				n.name, st.Node, st.Host, n.name, n.role, n.plan)
		}
	}

	for _, n := range nodes {
		if err := procs[n.name].Stop(30 * time.Second); err != nil {
			t.Errorf("%s: appliance run did not exit cleanly on SIGTERM: %v\n%s", n.name, err, procs[n.name].Output())
		}
	}
}

// staticPodArgv is the static pod's command line for role, with the binary
// at bin and the node config at conf in place of the node's paths.
func staticPodArgv(t *testing.T, cfg *cluster.Config, role cluster.Role, bin, conf string) []string {
	t.Helper()
	pod, err := bootstrap.StaticPod(cfg, bootstrap.PodOptions{
		Role: role, Image: "localhost/appliance@sha256:" + strings.Repeat("ab", 32), Drain: lb.DefaultOptions().DrainTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	argv := append(slices.Clone(c.Command), c.Args...)
	if slices.Contains(argv, "--node") || !slices.Contains(argv, "--role") {
		t.Fatalf("the static pod's command line %q should pass --role and not --node: this test is about that", argv)
	}
	argv[0] = bin
	i := slices.Index(argv, bootstrap.NodeConfigPath)
	if i < 0 {
		t.Fatalf("the static pod's command line %q does not name %s", argv, bootstrap.NodeConfigPath)
	}
	argv[i] = conf
	return argv
}

// askA asks server (port 53) for name's A records from inside node from.
func askA(from *netlab.Node, server netip.Addr, name string) ([]netip.Addr, error) {
	var c net.Conn
	// The socket is made inside the node; it stays there whatever thread
	// uses it afterwards.
	if err := from.Do(func() error {
		var err error
		c, err = net.Dial("udp", netip.AddrPortFrom(server, 53).String())
		return err
	}); err != nil {
		return nil, err
	}
	co := &dns.Conn{Conn: c}
	defer co.Close()
	_ = co.SetDeadline(time.Now().Add(time.Second))
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	if err := co.WriteMsg(m); err != nil {
		return nil, err
	}
	r, err := co.ReadMsg()
	if err != nil {
		return nil, err
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("%s: %s", name, dns.RcodeToString[r.Rcode])
	}
	var out []netip.Addr
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			ip, _ := netip.AddrFromSlice(a.A)
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}
