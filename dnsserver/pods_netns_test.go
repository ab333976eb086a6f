package dnsserver

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// podsConfigYAML is a node's appliance.yaml; %s is the stand-in upstream and
// %s an optional network.clusterNetwork line.
const podsConfigYAML = `cluster:
  name: ocp4
  baseDomain: example.com
network:
  machineCIDR: 192.168.126.0/24
  apiVIPs: [192.168.126.5]
  ingressVIPs: [192.168.126.6]
  upstreamDNS: [%s]
%snodes:
  - {name: master-0, role: master, ips: [192.168.126.10]}
`

// TestPodClientsNetns is a node as OpenShift lays it out: the machine
// network on eth0 and OVN-Kubernetes' management port ovn-k8s-mp0 holding
// the node's address in the pod network, 10.128.0.2/14. A pod (10.128.0.5,
// routed through 10.128.0.2) asks the node's machine address, as the
// dns-default pods do through the node's resolv.conf: it gets api,
// api-int, *.apps, a node and its PTR, and a forwarded name. A client in no
// allowed network (10.200.0.5, behind another interface) is REFUSED. With
// network.clusterNetwork [10.132.0.0/14] the same node answers the pod from
// 10.132.0.5 and refuses it from 10.128.0.5.
func TestPodClientsNetns(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 3, Name: "dnspods"})
	node, pod, stranger := lab.Nodes[0], lab.Nodes[1], lab.Nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ip := func(n *netlab.Node, args ...string) {
		t.Helper()
		if out, err := n.Run(ctx, "ip", args...); err != nil {
			t.Fatalf("%s: ip %v: %v\n%s", n.Name, args, err, out)
		}
	}
	// veth links the node to a client namespace: ifname in the node with
	// nodeAddrs, eth1 in the client with clientAddrs and a default route
	// through the node's first address. The client's own eth0 on the
	// machine network goes down, so the veth is its only way in.
	veth := func(ifname string, nodeAddrs []string, client *netlab.Node, clientAddrs []string) {
		t.Helper()
		ip(client, "addr", "flush", "dev", client.Iface)
		ip(client, "link", "set", client.Iface, "down")
		ip(node, "link", "add", ifname, "type", "veth", "peer", "name", "eth1", "netns", client.NS)
		for _, a := range nodeAddrs {
			ip(node, "addr", "add", a, "dev", ifname)
		}
		ip(node, "link", "set", ifname, "up")
		for _, a := range clientAddrs {
			ip(client, "addr", "add", a, "dev", "eth1")
		}
		ip(client, "link", "set", "eth1", "up")
		gw := netip.MustParsePrefix(nodeAddrs[0]).Addr()
		ip(client, "route", "add", "default", "via", gw.String(), "dev", "eth1")
	}
	veth("ovn-k8s-mp0", []string{"10.128.0.2/14", "10.132.0.2/14"}, pod, []string{"10.128.0.5/14", "10.132.0.5/14"})
	veth("ext0", []string{"10.200.0.2/24"}, stranger, []string{"10.200.0.5/24"})

	// The stand-in upstream is on the test's loopback: where the forwarder
	// dials from (only the listeners are opened in the node).
	up := startUpstream(t, "192.0.2.53")
	parse := func(extra string) *cluster.Config {
		t.Helper()
		cfg, err := cluster.Parse(fmt.Appendf(nil, podsConfigYAML, up.addr, extra))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg := parse("")
	if want := []netip.Prefix{cluster.DefaultClusterNetworkV4}; !slices.Equal(cfg.Network.ClusterNetworks, want) {
		t.Fatalf("parsed clusterNetworks %v, want OpenShift's default %v", cfg.Network.ClusterNetworks, want)
	}
	srv := startLabDNS(t, node, cfg, 53)
	at := netip.AddrPortFrom(node.IPv4.Addr(), 53)

	answers := []struct {
		q    []string
		want []string
	}{
		{[]string{"api.ocp4.example.com", "A"}, []string{"A 192.168.126.5"}},
		{[]string{"api-int.ocp4.example.com", "A"}, []string{"A 192.168.126.5"}},
		{[]string{"console-openshift-console.apps.ocp4.example.com", "A"}, []string{"A 192.168.126.6"}},
		{[]string{"master-0.ocp4.example.com", "A"}, []string{"A 192.168.126.10"}},
		{[]string{"-x", "192.168.126.10"}, []string{"PTR master-0.ocp4.example.com."}},
		{[]string{"quay.example.org", "A"}, []string{"A 192.0.2.53"}},
	}
	ask := func(from string, at netip.AddrPort, proto string, q []string) (string, []string, string) {
		t.Helper()
		return digFrom(t, pod, at, append([]string{"-b", from, proto}, q...)...)
	}
	for _, proto := range []string{"+notcp", "+tcp"} {
		for _, a := range answers {
			if rcode, got, out := ask("10.128.0.5", at, proto, a.q); rcode != "NOERROR" || !slices.Equal(got, a.want) {
				t.Errorf("pod 10.128.0.5 %s %v: %s %q, want %q\n%s", proto, a.q, rcode, got, a.want, out)
			}
		}
	}
	if up.queries.Load() == 0 {
		t.Error("the pod's forwarded name never reached the upstream")
	}
	if n := testutil.ToFloat64(srv.metrics.refusedClients); n != 0 {
		t.Errorf("%v of the pod's queries refused", n)
	}
	// The pods' network is listed with where it comes from.
	if !slices.Contains(srv.Status().Clients, ClientNet{cluster.DefaultClusterNetworkV4, ClientSourceCluster}) {
		t.Errorf("status clients %v lack the pod network", srv.Status().Clients)
	}

	refused := func(n *netlab.Node, from string, at netip.AddrPort) int {
		t.Helper()
		asked := 0
		for _, proto := range []string{"+notcp", "+tcp"} {
			for _, a := range answers {
				rcode, got, out := digFrom(t, n, at, append([]string{"-b", from, proto}, a.q...)...)
				asked++
				if rcode != "REFUSED" || len(got) != 0 {
					t.Errorf("%s %s %v: %s %q, want REFUSED\n%s", from, proto, a.q, rcode, got, out)
				}
				if !strings.Contains(out, "EDE: 18 (Prohibited)") {
					t.Errorf("%s %s %v: no Extended DNS Error 18 (Prohibited)\n%s", from, proto, a.q, out)
				}
			}
		}
		return asked
	}
	forwarded := up.queries.Load()
	asked := refused(stranger, "10.200.0.5", at)
	// 10.132.0.5 is not the default pod network either.
	asked += refused(pod, "10.132.0.5", at)
	if n := testutil.ToFloat64(srv.metrics.refusedClients); n != float64(asked) {
		t.Errorf("appliance_dns_refused_queries_total = %v, want %d", n, asked)
	}

	// The cluster's own pod network replaces the default.
	cfg2 := parse("  clusterNetwork: [10.132.0.0/14]\n")
	srv2 := startLabDNS(t, node, cfg2, 54)
	at2 := netip.AddrPortFrom(node.IPv4.Addr(), 54)
	for _, a := range answers {
		if rcode, got, out := ask("10.132.0.5", at2, "+notcp", a.q); rcode != "NOERROR" || !slices.Equal(got, a.want) {
			t.Errorf("clusterNetwork 10.132.0.0/14: pod 10.132.0.5 %v: %s %q, want %q\n%s", a.q, rcode, got, a.want, out)
		}
	}
	asked2 := refused(pod, "10.128.0.5", at2)
	asked2 += refused(stranger, "10.200.0.5", at2)
	if n := testutil.ToFloat64(srv2.metrics.refusedClients); n != float64(asked2) {
		t.Errorf("clusterNetwork 10.132.0.0/14: appliance_dns_refused_queries_total = %v, want %d", n, asked2)
	}
	// Nothing a refused client asked was forwarded (the upstream answers
	// at once; a moment for a straggler).
	time.Sleep(200 * time.Millisecond)
	if n, want := up.queries.Load(), forwarded+1; n != want {
		t.Errorf("the upstream got %d queries after the pod's, want %d (the one of the 10.132.0.0/14 pod)", n-forwarded, want-forwarded)
	}
}
