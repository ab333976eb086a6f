//go:build kubelet

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"appliance/bootstrap"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// kubeletConfig is the tier's cluster: the lab's topology (a bootstrap,
// three masters, two workers; n6 is a client and the site's resolver),
// every service a node runs in production on: the MCS behind the LB, mDNS,
// DHCP with reservations.
const kubeletConfig = `cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: 192.168.126.0/24
  apiVIPs: [192.168.126.5]
  ingressVIPs: [192.168.126.6]
nodes:
  - {name: bootstrap, role: bootstrap, mac: "52:54:00:7e:00:10", ips: [192.168.126.10]}
  - {name: master-0, role: master, mac: "52:54:00:7e:00:11", ips: [192.168.126.11]}
  - {name: master-1, role: master, mac: "52:54:00:7e:00:12", ips: [192.168.126.12]}
  - {name: master-2, role: master, mac: "52:54:00:7e:00:13", ips: [192.168.126.13]}
  - {name: worker-0, role: worker, mac: "52:54:00:7e:00:14", ips: [192.168.126.14]}
  - {name: worker-1, role: worker, mac: "52:54:00:7e:00:15", ips: [192.168.126.15]}
lb: {mcs: true}
dns: {mdns: true}
dhcp: {enabled: true, leaseTime: 1h, pool: {start: 192.168.126.100, end: 192.168.126.119}}
`

var (
	kubeletAPIVIP     = netip.MustParseAddr("192.168.126.5")
	kubeletIngressVIP = netip.MustParseAddr("192.168.126.6")
)

// kubeletSeccomp runs every pod of the tier under the runtime's default
// seccomp profile, as a hardened node does (seccompDefault: true): the
// appliance must work there.
const kubeletSeccomp = "seccompDefault: true"

// kubeletCluster is the tier's one cluster, shared by the cases that can
// share it.
type kubeletCluster struct {
	lab     *netlab.Lab
	client  *netlab.Node
	all     []*kubeletNode // bootstrap, masters, workers
	boot    *kubeletNode
	masters []*kubeletNode
	workers []*kubeletNode
	// images[0] is what the cluster starts with, images[1] the upgrade:
	// the same source stamped with another version.
	images [2]nodeImage
	// files are each role's files for each image: "bootstrap" from
	// `appliance ignition`, "master" and "worker" from the MachineConfigs
	// of `appliance manifests`.
	files [2]map[string]roleFiles
	procs map[string]*netlab.Process // stand-ins, by "apiserver/master-0" etc.
	exe   string
}

// startKubeletCluster builds both images and the nodes' files, the lab,
// the stand-ins and a kubelet per node, puts every static pod in place and
// waits for all of them to be Ready.
func startKubeletCluster(t *testing.T) *kubeletCluster {
	t.Helper()
	kubeletTools(t)
	c := &kubeletCluster{exe: appliance(t), procs: map[string]*netlab.Process{}}
	t0 := time.Now()
	c.images = [2]nodeImage{buildNodeImage(t, "tier-1"), buildNodeImage(t, "tier-2")}
	for i, img := range c.images {
		files, _ := manifestsFor(t, c.exe, kubeletConfig, img.ref)
		files["bootstrap"] = bootstrapFiles(t, c.exe, kubeletConfig, img.ref)
		c.files[i] = files
	}
	t.Logf("images and node files: %s", time.Since(t0).Round(100*time.Millisecond))

	c.lab = netlabtest.New(t, netlab.Options{Nodes: 7, Name: "kubelet"})
	c.client = c.lab.Nodes[6]
	upstream := upstreamDNS(t, c.client)
	dumpOnFailure(t, c.procs)
	start := func(n *netlab.Node, key string, args ...string) {
		t.Helper()
		p, err := n.Start(context.Background(), c.exe, append([]string{"--log-format", "text"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		c.procs[key] = p
	}
	var specs []kubeletSpec
	for i, n := range c.lab.Nodes[:6] {
		name, role := "bootstrap", "bootstrap"
		switch {
		case i >= 1 && i <= 3:
			name, role = fmt.Sprintf("master-%d", i-1), "master"
		case i >= 4:
			name, role = fmt.Sprintf("worker-%d", i-4), "worker"
		}
		if role == "worker" {
			start(n, "router/"+name, "lab", "router", "--name", name)
		} else {
			start(n, "apiserver/"+name, "lab", "apiserver", "--listen", ":6443", "--name", name)
			start(n, "mcs/"+name, "lab", "mcs", "--listen", ":22623", "--name", name)
		}
		specs = append(specs, kubeletSpec{n: n, name: name, files: c.files[0][role],
			extra: nodeFiles(n.IPv4.Addr().String(), upstream, ""), images: c.images[:], configExtra: kubeletSeccomp})
	}
	t1 := time.Now()
	c.all = startKubelets(t, specs...)
	c.boot, c.masters, c.workers = c.all[0], c.all[1:4], c.all[4:6]
	t.Logf("6 kubelets started: %s", time.Since(t1).Round(100*time.Millisecond))
	t2 := time.Now()
	for _, k := range c.all {
		k.put(t, c.files[0][c.role(k)][bootstrap.StaticPodPath])
	}
	for _, k := range c.all {
		k.waitReady(t, 60*time.Second)
	}
	t.Logf("every pod Ready %s after its manifest landed", time.Since(t2).Round(100*time.Millisecond))
	return c
}

// role is k's role, from its name.
func (c *kubeletCluster) role(k *kubeletNode) string {
	return strings.TrimRight(k.name, "-0123456789")
}

// nodes are the lab nodes of ks.
func nodesOf(ks []*kubeletNode) []*netlab.Node {
	out := make([]*netlab.Node, len(ks))
	for i, k := range ks {
		out[i] = k.n
	}
	return out
}

// holder is the one node of ks holding vip, or nil with the holders' names.
func holderOf(t testing.TB, ks []*kubeletNode, vip netip.Addr) (*kubeletNode, string) {
	var names []string
	var h *kubeletNode
	for _, k := range ks {
		if holds(t, k.n, vip) {
			names = append(names, k.name)
			h = k
		}
	}
	if len(names) != 1 {
		return nil, fmt.Sprintf("holders of %s: %v", vip, names)
	}
	return h, h.name
}

// waitHolderOf waits until exactly one of ks holds vip for settle.
func waitHolderOf(t *testing.T, ks []*kubeletNode, vip netip.Addr, within, settle time.Duration) *kubeletNode {
	t.Helper()
	i := waitOneHolder(t, nodesOf(ks), vip, within, settle)
	for _, k := range ks {
		if k.n.Index == i {
			return k
		}
	}
	t.Fatalf("holder n%d is none of the nodes", i)
	return nil
}

// TestKubelet runs the appliance only as a node runs it: a kubelet per node
// of the lab's cluster, the static pods and node files `appliance
// manifests` and `appliance ignition` write, the image `make image`
// builds, every pod under the runtime's default seccomp profile. The cases
// share the cluster and run in order: each leaves it as the next expects.
func TestKubelet(t *testing.T) {
	c := startKubeletCluster(t)

	t.Run("start", func(t *testing.T) { c.testStart(t) })
	t.Run("logs", func(t *testing.T) { c.testLogs(t) })
	t.Run("security", func(t *testing.T) { c.testSecurity(t) })
	t.Run("kubelet restart", func(t *testing.T) { c.testKubeletRestart(t) })
	t.Run("bootstrap teardown", func(t *testing.T) { c.testBootstrapTeardown(t) })
	t.Run("grace period", func(t *testing.T) { c.testGracePeriod(t) })
	t.Run("upgrade", func(t *testing.T) { c.testUpgrade(t) })
	t.Run("hung appliance", func(t *testing.T) { c.testHung(t) })
	t.Run("resources", func(t *testing.T) { c.testResources(t) })
	t.Run("logs after", func(t *testing.T) { c.testLogs(t) })
}

// testStart: every pod Ready (checked by startKubeletCluster), one holder
// per VIP, and a client outside reaches DNS, the API and the MCS through
// the API VIP and a router through the ingress VIP.
func (c *kubeletCluster) testStart(t *testing.T) {
	api := waitHolderOf(t, c.all, kubeletAPIVIP, 30*time.Second, time.Second)
	if api != c.boot {
		t.Errorf("the API VIP is on %s; the bootstrap outranks the masters while its apiserver answers", api.name)
	}
	ing := waitHolderOf(t, c.all, kubeletIngressVIP, 30*time.Second, time.Second)
	if c.role(ing) != "worker" {
		t.Errorf("the ingress VIP is on %s; the workers run the routers", ing.name)
	}
	if got := dig(t, c.client, kubeletAPIVIP.String(), "A", "api.ocp4.example.com"); got != "NOERROR "+kubeletAPIVIP.String() {
		t.Errorf("DNS through the API VIP: api.ocp4.example.com: %q", got)
	}
	if got := dig(t, c.client, kubeletAPIVIP.String(), "A", "forwarded.example.org"); got != "NOERROR 203.0.113.7" {
		t.Errorf("DNS through the API VIP, forwarded to the node's upstream: %q", got)
	}
	node, _, err := callAPI(c.client, kubeletAPIVIP.String()+":6443")
	if err != nil || node == "" {
		t.Errorf("API through the VIP: %q, %v", node, err)
	}
	body, err := nodeHTTPGet(c.client, kubeletIngressVIP.String()+":80", "/")
	if err != nil || !strings.Contains(body, `"router":"worker-`) {
		t.Errorf("ingress through its VIP: %q, %v", body, err)
	}
	out, err := api.n.Run(context.Background(), "nft", "list", "tables")
	if err != nil || !strings.Contains(out, "appliance") {
		t.Errorf("%s's nftables: %q, %v", api.name, out, err)
	}
	t.Logf("API VIP on %s (API answered by %s), ingress VIP on %s; %s's tables: %s", api.name, node, ing.name,
		api.name, strings.Join(strings.Fields(out), " "))
}
