package node

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"appliance/dnsserver"
	"appliance/internal/host"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
	"appliance/platform/kubevirt/kubevirttest"
)

// A node that joins on day 2 through the Kubernetes API, and is in no
// appliance.yaml, is answered by the cluster DNS of a running node within
// a second, without a restart; deleting it removes it again.
func TestDay2NodeAnsweredByDNS(t *testing.T) {
	n, api, listen := startDNSNode(t, "nodek8s")
	if got := n.Plan().String(); got != "dns" {
		t.Fatalf("plan %q", got)
	}
	ctx := t.Context()
	ask := func(name string) []dns.RR {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, _, err := new(dns.Client).Exchange(m, listen)
		if err != nil || r.Rcode != dns.RcodeSuccess {
			return nil
		}
		return r.Answer
	}
	waitFor := func(what string, ok func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for time.Since(start) < 10*time.Second {
			if ok() {
				return time.Since(start)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("%s: not within 10 s", what)
		return 0
	}
	waitFor("DNS serving", func() bool { return len(ask("master-0.ocp4.example.com.")) == 1 })
	if err := waitForReady(n); err != nil {
		t.Fatal(err)
	}

	worker := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-7", Labels: map[string]string{"node-role.kubernetes.io/worker": ""}},
	}
	if err := api.Client.Create(ctx, worker); err != nil {
		t.Fatal(err)
	}
	worker.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.126.77"}}
	if err := api.Client.Status().Update(ctx, worker); err != nil {
		t.Fatal(err)
	}
	want := netip.MustParseAddr("192.168.126.77")
	took := waitFor("worker-7 answered", func() bool {
		rr := ask("worker-7.ocp4.example.com.")
		return len(rr) == 1 && rr[0].(*dns.A).A.String() == want.String()
	})
	t.Logf("a day-2 Node was answered by DNS %s after its address was set", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("took %s; the goal is under a second", took)
	}
	if m, ok := n.state.Snapshot().Member("worker-7"); !ok || m.Source != "kubernetes" || m.Role != "worker" {
		t.Errorf("member %+v", m)
	}

	if err := api.Client.Delete(ctx, worker); err != nil {
		t.Fatal(err)
	}
	waitFor("worker-7 gone", func() bool { return len(ask("worker-7.ocp4.example.com.")) == 0 })
	if _, ok := n.state.Snapshot().Member("master-0"); !ok {
		t.Error("the configured member left with the Node")
	}
}

// startDNSNode runs, in a lab node, a master whose only services are DNS
// and the Kubernetes member source, reading a real kube-apiserver: the test
// process serves DNS on its own loopback (listen) and talks to the API
// server there. The node stops when the test ends.
func startDNSNode(t *testing.T, label string) (*Node, *kubevirttest.Server, string) {
	t.Helper()
	lab := netlabtest.New(t, netlab.Options{Nodes: 1, Name: label})
	api, skip, err := kubevirttest.StartBare()
	if api != nil {
		t.Cleanup(api.Stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	if skip != "" {
		kubevirttest.Skip(t, skip)
	}
	self := lab.Nodes[0]
	cfg := parse(t, fmt.Sprintf(`
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: %s, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6], upstreamDNS: [192.168.126.1]}
nodes:
  - {name: master-0, role: master, ips: [%s]}
vrrp: {enabled: false}
lb: {enabled: false}
`, self.IPv4.Masked(), self.IPv4.Addr()))
	listen := netlabtest.FreeLoopbackAddr(t)
	var n *Node
	if err := self.Do(func() error {
		var err error
		n, err = New(Options{
			Config: cfg, Host: host.Options{Node: "master-0"}, AdminListen: "127.0.0.1:0",
			DNS:        dnsserver.Options{Listen: listen},
			Kubeconfig: api.Kubeconfig, KubeServer: api.Config.Host,
		}, slog.New(slog.DiscardHandler))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return n, api, listen
}

// waitForReady waits until the Kubernetes member source has listed once.
func waitForReady(n *Node) error {
	for range 500 {
		if n.nodes.Ready() == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("the Kubernetes member source never listed: %v", n.nodes.Status())
}
