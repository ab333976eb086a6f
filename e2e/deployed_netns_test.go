package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

const deployedConfig = `cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: 192.168.126.0/24
  apiVIPs: [192.168.126.5]
  ingressVIPs: [192.168.126.6]
nodes:
  - {name: master-0, role: master, ips: [192.168.126.10]}
  - {name: master-1, role: master, ips: [192.168.126.11]}
  - {name: master-2, role: master, ips: [192.168.126.12]}
  - {name: worker-0, role: worker, ips: [192.168.126.13]}
`

// upstreamDNS serves forwarded.example.org (A 203.0.113.7) inside n on
// :53, UDP and TCP, as a site's resolver would.
func upstreamDNS(t *testing.T, n *netlab.Node) string {
	t.Helper()
	addr := net.JoinHostPort(n.IPv4.Addr().String(), "53")
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) == 1 && strings.EqualFold(r.Question[0].Name, "forwarded.example.org.") && r.Question[0].Qtype == dns.TypeA {
			rr, _ := dns.NewRR("forwarded.example.org. 60 IN A 203.0.113.7")
			m.Answer = append(m.Answer, rr)
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	var pc net.PacketConn
	var ln net.Listener
	if err := n.Do(func() error {
		var err error
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			return err
		}
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	udp, tcp := &dns.Server{PacketConn: pc, Handler: h}, &dns.Server{Listener: ln, Handler: h}
	go func() { _ = udp.ActivateAndServe() }()
	go func() { _ = tcp.ActivateAndServe() }()
	t.Cleanup(func() { _ = udp.Shutdown(); _ = tcp.Shutdown() })
	return n.IPv4.Addr().String()
}

// nodeFiles are the files of a node besides its MachineConfig's: what
// NetworkManager, the resolv script and the kubelet would have written.
func nodeFiles(self, upstream, kubeconfig string) map[string]string {
	f := map[string]string{
		"/run/NetworkManager/resolv.conf": "nameserver " + upstream + "\n",
		"/etc/resolv.conf":                "search ocp4.example.com\nnameserver " + self + "\nnameserver " + upstream + "\n",
	}
	if kubeconfig != "" {
		f["/var/lib/kubelet/kubeconfig"] = kubeconfig
	}
	return f
}

// TestDeployedNodes brings up a cluster whose every node runs exactly what
// `appliance manifests` deploys: the static pod's own arguments (no --node,
// no flag the manifest does not carry), the node's appliance.yaml out of the
// MachineConfig, its own host name; stand-in apiservers in front of a real
// kube-apiserver, which the nodes read through the kubelet's kubeconfig
// with the RBAC the manifests grant. It checks what a real OpenShift node
// needs of it: pods asking from the cluster network behind ovn-k8s-mp0 get
// answers (strangers do not), day-2 nodes in no nodes entry start from the
// same arguments, and a day-2 master joins the LB pool through the
// Kubernetes API.
func TestDeployedNodes(t *testing.T) {
	netlabtest.RequireRoot(t)
	exe := appliance(t)
	files, assets := manifests(t, exe, deployedConfig)
	if _, args := files["worker"].podCommand(t); strings.Join(args, " ") != "run --config /etc/appliance/appliance.yaml --role worker" {
		t.Fatalf("the worker's static pod runs %q; this test expects the deployed command line", args)
	}

	l := netlabtest.New(t, netlab.Options{Nodes: 9, Name: "deployed"})
	masters := l.Nodes[0:3]
	worker0, worker7, master3, kubeNode, upNode, collide := l.Nodes[3], l.Nodes[4], l.Nodes[5], l.Nodes[6], l.Nodes[7], l.Nodes[8]
	kube := startKubeAPI(t, kubeNode)
	// The RBAC the manifests carry, applied as the bootstrap node applies
	// the installer's manifests.
	kube.kubectl(t, "apply", "-f", filepath.Join(assets, "openshift", "99-appliance-node-reader.yaml"))
	// And what they carry for cluster monitoring: the namespace, the
	// Service and ServiceMonitor, the RBAC of the scrape endpoint.
	promToken := applyMonitoring(t, kube, assets)
	signer := newKubeletSigner(t)
	upstream := upstreamDNS(t, upNode)

	standins := func(n *netlab.Node, name string) {
		t.Helper()
		for _, args := range [][]string{
			{"lab", "apiserver", "--listen", ":6443", "--name", name, "--upstream", kube.upstream},
			{"lab", "mcs", "--listen", ":22623", "--name", name},
		} {
			if _, err := n.Start(context.Background(), exe, args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	kubeconfig := func(node string) string {
		return kube.kubeconfig("https://api-int.ocp4.example.com:6443", node)
	}
	var nodes []*deployed
	for i, n := range masters {
		name := fmt.Sprintf("master-%d", i)
		standins(n, name)
		extra := nodeFiles(n.IPv4.Addr().String(), upstream, kubeconfig(name))
		if i == 0 {
			// The kubelet's serving certificate, where the kubelet keeps
			// it; the other nodes have none yet (before the kubelet's
			// serving CSR is approved).
			extra[kubeletServingFile] = signer.servingPEM(t, name, n.IPv4.Addr().String())
		}
		nodes = append(nodes, startDeployed(t, exe, n, name, files["master"], extra))
	}
	nodes = append(nodes, startDeployed(t, exe, worker0, "worker-0", files["worker"], nodeFiles(worker0.IPv4.Addr().String(), upstream, kubeconfig("worker-0"))))
	for _, d := range nodes {
		d.waitReady(t, 60*time.Second)
	}
	m0 := nodes[0]
	apiVIP, ingressVIP, m0Addr := "192.168.126.5", "192.168.126.6", masters[0].IPv4.Addr().String()

	t.Run("pod network", func(t *testing.T) {
		pod := behind(t, l, masters[0], "pod", "ovn-k8s-mp0", []string{"10.128.0.2/14"}, []string{"10.128.0.5/14"})
		far := behind(t, l, masters[0], "far", "ens9", []string{"10.200.0.1/24"}, []string{"10.200.0.5/24"})
		for _, q := range []struct{ qtype, name, want string }{
			{"A", "api.ocp4.example.com", "NOERROR " + apiVIP},
			{"A", "api-int.ocp4.example.com", "NOERROR " + apiVIP},
			{"A", "console-openshift-console.apps.ocp4.example.com", "NOERROR " + ingressVIP},
			{"A", "master-1.ocp4.example.com", "NOERROR 192.168.126.11"},
			{"PTR", "192.168.126.11", "NOERROR master-1.ocp4.example.com."},
			{"A", "forwarded.example.org", "NOERROR 203.0.113.7"},
		} {
			if got := pod.dig(t, m0Addr, "", q.qtype, q.name); got != q.want {
				t.Errorf("pod 10.128.0.5 asks master-0 %s %s: %q, want %q", q.qtype, q.name, got, q.want)
			}
		}
		if got := far.dig(t, m0Addr, "", "A", "api.ocp4.example.com"); got != "REFUSED" {
			t.Errorf("a client in no allowed network (10.200.0.5) got %q, want REFUSED", got)
		}
	})

	t.Run("secure scrape endpoint", func(t *testing.T) {
		// Cluster monitoring's Prometheus, from another host, through the
		// Service's port, with its own token, verifying the node's
		// kubelet serving certificate: master-0 reviews the token with its
		// kubelet's credentials at its own apiserver (the stand-in in
		// front of the real one).
		addr := net.JoinHostPort(m0Addr, "9448")
		var code int
		var body string
		waitFor(t, "an authorised scrape of master-0", 30*time.Second, func() (bool, string) {
			var err error
			code, body, err = scrapeFrom(worker0, addr, signer.pool, promToken)
			return err == nil && code == http.StatusOK, fmt.Sprintf("%d %v %.300s", code, err, body)
		})
		for _, m := range []string{"appliance_vrrp_state{", "appliance_lb_pool_healthy_backends{", `appliance_scrape_requests_total{node="master-0",result="allowed"}`} {
			if !strings.Contains(body, m) {
				t.Errorf("master-0's scrape lacks %s", m)
			}
		}
		if code, body, err := scrapeFrom(worker0, addr, signer.pool, ""); err != nil || code != http.StatusUnauthorized {
			t.Errorf("no token: %d %v %.200s", code, err, body)
		}
		kube.kubectl(t, "create", "serviceaccount", "stranger")
		stranger := strings.TrimSpace(kube.kubectl(t, "create", "token", "stranger"))
		if code, body, err := scrapeFrom(worker0, addr, signer.pool, stranger); err != nil || code != http.StatusForbidden {
			t.Errorf("another service account: %d %v %.200s", code, err, body)
		}
		// Not on the VIP master-0 may hold, nor on loopback: the node's
		// machine-network address alone.
		for _, other := range []string{net.JoinHostPort(apiVIP, "9448"), "127.0.0.1:9448"} {
			n := worker0
			if other == "127.0.0.1:9448" {
				n = masters[0]
			}
			if code, _, err := scrapeFrom(n, other, signer.pool, promToken); err == nil {
				t.Errorf("%s answered %d", other, code)
			}
		}
		// A node without its serving certificate is Ready, and says why
		// it does not serve.
		w, err := nodes[3].get("/readyz")
		if err != nil || !strings.Contains(w, "not counted: scrape: not listening") || !strings.Contains(w, kubeletServingFile) {
			t.Errorf("worker-0's /readyz: %v %q", err, w)
		}
		st, err := m0.status()
		if err != nil {
			t.Fatal(err)
		}
		if sc := string(st["scrape"]); !strings.Contains(sc, `"`+addr+`"`) || strings.Contains(sc, `"problem"`) {
			t.Errorf("master-0's /status scrape section: %s", sc)
		}
	})

	t.Run("day-2 worker", func(t *testing.T) {
		d := startDeployed(t, exe, worker7, "worker-7", files["worker"], nodeFiles(worker7.IPv4.Addr().String(), upstream, kubeconfig("worker-7")))
		d.waitReady(t, 60*time.Second)
		if got := dig(t, worker7, worker7.IPv4.Addr().String(), "A", "api.ocp4.example.com"); got != "NOERROR "+apiVIP {
			t.Errorf("worker-7's own DNS: %q", got)
		}
		st, err := d.status()
		if err != nil {
			t.Fatal(err)
		}
		if node := string(st["node"]); !strings.Contains(node, `"worker-7"`) || !strings.Contains(node, `"worker"`) {
			t.Errorf("worker-7's /status node section: %s", node)
		}
	})

	t.Run("day-2 master joins the LB pool", func(t *testing.T) {
		standins(master3, "master-3")
		d := startDeployed(t, exe, master3, "master-3", files["master"], nodeFiles(master3.IPv4.Addr().String(), upstream, kubeconfig("master-3")))
		doc := filepath.Join(t.TempDir(), "master-3.yaml")
		if err := os.WriteFile(doc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Node
metadata:
  name: master-3
  labels: {node-role.kubernetes.io/master: "", node-role.kubernetes.io/control-plane: ""}
`)), 0o644); err != nil {
			t.Fatal(err)
		}
		kube.kubectl(t, "create", "-f", doc)
		kube.kubectl(t, "patch", "node", "master-3", "--subresource=status", "--type=merge", "-p",
			fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q},{"type":"Hostname","address":"master-3"}]}}`, master3.IPv4.Addr()))
		want := master3.IPv4.Addr().String() + ":6443"
		waitFor(t, "master-3 in master-0's API pool", 30*time.Second, func() (bool, string) {
			st, err := m0.status()
			if err != nil {
				return false, err.Error()
			}
			var lbs struct {
				Pools map[string][]struct{ Addr, State string } `json:"pools"`
			}
			if err := json.Unmarshal(st["lb"], &lbs); err != nil {
				return false, err.Error()
			}
			for _, b := range lbs.Pools["api"] {
				if b.Addr == want {
					return b.State == "up", fmt.Sprintf("%s is %s", want, b.State)
				}
			}
			return false, string(st["lb"])
		})
		if got := dig(t, masters[1], masters[1].IPv4.Addr().String(), "A", "master-3.ocp4.example.com"); got != "NOERROR "+master3.IPv4.Addr().String() {
			t.Errorf("master-1 answers master-3 with %q", got)
		}
		d.waitReady(t, 60*time.Second)
		if got := dig(t, master3, master3.IPv4.Addr().String(), "A", "master-0.ocp4.example.com"); got != "NOERROR "+m0Addr {
			t.Errorf("master-3's own DNS answers master-0 with %q", got)
		}
	})

	t.Run("beside OpenShift's keepalived", func(t *testing.T) {
		extra := nodeFiles(collide.IPv4.Addr().String(), upstream, "")
		extra["/etc/kubernetes/manifests/keepalived.yaml"] = "kind: Pod\nmetadata: {name: keepalived, namespace: openshift-kni-infra}\n"
		d := startDeployed(t, exe, collide, "master-4", files["master"], extra)
		select {
		case <-d.proc.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("run started on a node that runs OpenShift's keepalived")
		}
		if out := d.proc.Output(); d.proc.Wait() == nil || !strings.Contains(out, "/etc/kubernetes/manifests/keepalived.yaml") {
			t.Errorf("exit %v, output:\n%s", d.proc.Wait(), tail(out))
		}
	})
}

// TestDeployedClusterNetwork: a node deployed from an install-config whose
// networking.clusterNetwork is 10.132.0.0/14 answers pods there, and no
// longer the default 10.128.0.0/14.
func TestDeployedClusterNetwork(t *testing.T) {
	netlabtest.RequireRoot(t)
	exe := appliance(t)
	files, _ := manifests(t, exe, `apiVersion: v1
metadata: {name: ocp4}
baseDomain: example.com
networking:
  machineNetwork: [{cidr: 192.168.126.0/24}]
  clusterNetwork: [{cidr: 10.132.0.0/14, hostPrefix: 23}]
platform:
  baremetal:
    apiVIPs: [192.168.126.5]
    ingressVIPs: [192.168.126.6]
    hosts:
    - {name: master-0, role: master, bootMACAddress: "52:54:00:7e:00:10"}
`)
	l := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "podnet"})
	n, upNode := l.Nodes[0], l.Nodes[1]
	upstream := upstreamDNS(t, upNode)
	// master-0 has no address in the install-config: it finds itself by
	// its host name.
	d := startDeployed(t, exe, n, "master-0", files["master"], nodeFiles(n.IPv4.Addr().String(), upstream, ""))
	self := n.IPv4.Addr().String()
	pod := behind(t, l, n, "pod", "ovn-k8s-mp0", []string{"10.132.0.2/14", "10.128.0.2/14"}, []string{"10.132.0.5/14", "10.128.0.5/14"})
	waitFor(t, "master-0 answering the 10.132.0.0/14 pod", 30*time.Second, func() (bool, string) {
		got := pod.dig(t, self, "10.132.0.5", "A", "api.ocp4.example.com")
		return got == "NOERROR 192.168.126.5", got
	})
	if got := pod.dig(t, self, "10.128.0.5", "A", "api.ocp4.example.com"); got != "REFUSED" {
		t.Errorf("from 10.128.0.5, outside this cluster's pod network: %q, want REFUSED", got)
	}
	_ = d
}
