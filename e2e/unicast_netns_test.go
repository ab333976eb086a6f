package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
	"appliance/platform/kubevirt/kubevirttest"
	"appliance/vrrp"
)

// vipsOf reads the virtual routers of an appliance's /status.
func vipsOf(t *testing.T, n *netlab.Node) []vrrp.Status {
	t.Helper()
	body, err := nodeHTTPGet(n, "127.0.0.1:9447", "/status")
	if err != nil {
		t.Fatalf("%s /status: %v", n.Name, err)
	}
	var doc struct {
		VIPs []vrrp.Status `json:"vips"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("%s /status: %v\n%s", n.Name, err, body)
	}
	return doc.VIPs
}

// routerOf is the status of the router called name on n.
func routerOf(t *testing.T, n *netlab.Node, name string) vrrp.Status {
	t.Helper()
	for _, s := range vipsOf(t, n) {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("%s has no router %s", n.Name, name)
	return vrrp.Status{}
}

// addrsOf lists the nodes' IPv4 addresses, sorted.
func addrsOf(nodes ...*netlab.Node) []netip.Addr {
	var out []netip.Addr
	for _, n := range nodes {
		out = append(out, n.IPv4.Addr())
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// waitPeers waits until n's API router runs unicast to exactly want.
func waitPeers(t *testing.T, n *netlab.Node, want []netip.Addr, within time.Duration) {
	t.Helper()
	var st vrrp.Status
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if st = routerOf(t, n, "api-v4"); st.Transport == vrrp.TransportUnicast && slices.Equal(st.Peers, want) {
			return
		}
	}
	t.Fatalf("%s: api-v4 runs %s to %v, want unicast to %v", n.Name, st.Transport, st.Peers, want)
}

// adminKubeAPI is a real kube-apiserver (and etcd) inside a lab node, and
// the kubeconfig the appliances read it with: as its admin, where
// deployed_test.go's kubeAPI gives each node a kubelet's own rights.
type adminKubeAPI struct {
	node       *netlab.Node
	direct     string // start.sh's kubeconfig (admin), for kubectl in that node
	url        string // the kube-apiserver's own https://IP:port
	kubeconfig string // the nodes': any server, insecure; the masters read their local stand-in
	kubectl    string
}

// startAdminKubeAPI starts etcd and kube-apiserver inside n with the shared
// tools, bound to n's address, as `make run`'s lab does. Without the
// binaries it skips (fails under CI).
func startAdminKubeAPI(t *testing.T, n *netlab.Node) *adminKubeAPI {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		kubevirttest.Skip(t, "no kube-apiserver: run KUBEBUILDER_ASSETS=$(../shared/tools/kube-apiserver/build.sh) go test ./e2e")
	}
	srv := startSharedKubeAPI(t, n, assets)
	return &adminKubeAPI{node: n, direct: srv.Kubeconfig, url: srv.URL,
		kubeconfig: writeFile(t, "kubeconfig", srv.AdminKubeconfig(srv.URL)), kubectl: filepath.Join(assets, "kubectl")}
}

// upstream is the real API's URL, for the stand-in apiservers.
func (k *adminKubeAPI) upstream(*testing.T) string { return k.url }

// createMaster creates a master Node with its InternalIP, as a kubelet
// registers.
func (k *adminKubeAPI) createMaster(t *testing.T, name string, addr netip.Addr) {
	t.Helper()
	doc := writeFile(t, name+".yaml", fmt.Sprintf(`apiVersion: v1
kind: Node
metadata:
  name: %s
  labels: {node-role.kubernetes.io/master: "", node-role.kubernetes.io/control-plane: ""}
status:
  addresses: [{type: InternalIP, address: "%s"}]
  conditions: [{type: Ready, status: "True"}]
`, name, addr))
	if out, err := k.node.Run(t.Context(), k.kubectl, "--kubeconfig", k.direct, "create", "-f", doc); err != nil {
		t.Fatalf("kubectl create %s: %v\n%s", name, err, out)
	}
}

// trafficOf captures the VRRP packets on every port of the lab's bridge
// for a while (the bridge's own device sees only what is flooded) and
// returns "src > dst" for each.
func trafficOf(t *testing.T, lab *netlab.Lab, d time.Duration) []string {
	t.Helper()
	p, err := lab.HubStart(t.Context(), "timeout", strconv.Itoa(int(d.Seconds())), "tcpdump", "-l", "-n", "-i", "any", "ip proto 112")
	if err != nil {
		t.Fatalf("tcpdump: %v", err)
	}
	<-p.Done()
	var out []string
	re := regexp.MustCompile(`IP (\S+) > (\S+): VRRP`)
	for _, l := range strings.Split(p.Output(), "\n") {
		if m := re.FindStringSubmatch(l); m != nil {
			out = append(out, m[1]+" > "+strings.TrimSuffix(m[2], ":"))
		}
	}
	if len(out) == 0 {
		t.Fatalf("tcpdump saw no VRRP packet in %s:\n%s", d, p.Output())
	}
	return out
}

// holdsThroughout polls until stop closes and counts the polls at which
// node want did not hold vip alone among nodes.
func holdsThroughout(t *testing.T, nodes []*netlab.Node, vip netip.Addr, want int, stop <-chan struct{}) (polls, misses int) {
	for {
		polls++
		if h := holders(t, nodes, vip); len(h) != 1 || h[0] != want {
			misses++
		}
		select {
		case <-stop:
			return polls, misses
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// rogueOf is a keepalived that claims the API VIP on the cluster's VRID
// with priority 255, by multicast, as a router set up by mistake (or with
// intent) on the segment would.
func rogueOf(lab *netlab.Lab) keepalivedConf {
	vrid, _ := cluster.DeriveVRIDs("ocp4")
	return keepalivedConf{Version: 3, VRID: vrid, Priority: 255, Interval: "0.1", VIP: prefixOf(lab, labVIP)}
}

// unicastClusterConfig is three masters on the lab's first nodes, VRRP
// only, with no unicastPeers: unicast is the default.
func unicastClusterConfig(t *testing.T, lab *netlab.Lab, transport string) string {
	var nodes strings.Builder
	for i := range 3 {
		fmt.Fprintf(&nodes, "  - {name: master-%d, role: master, ips: [%s]}\n", i, lab.Nodes[i].IPv4.Addr())
	}
	vrrpLine := "vrrp: {advertInterval: 100ms}"
	if transport != "" {
		vrrpLine = "vrrp: {advertInterval: 100ms, transport: " + transport + "}"
	}
	return writeFile(t, "appliance.yaml", fmt.Sprintf(`cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: %s
  apiVIPs: [%s]
  ingressVIPs: [192.168.126.6]
nodes:
%s%s
lb: {enabled: false}
dns: {enabled: false}
`, lab.Nodes[0].IPv4.Masked(), labVIP, nodes.String(), vrrpLine))
}

// A cluster whose config names no unicast peer runs unicast among its
// masters; a master that joins as a Kubernetes Node becomes everyone's
// peer without a restart; and a rogue router on the segment at priority
// 255 never takes the VIP from the masters: the holder stays MASTER with
// the VIP throughout, and counts and shows the rogue.
func TestRunUnicastCluster(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 6, Name: "ucast"})
	procs := map[string]*netlab.Process{}
	dumpOnFailure(t, procs)
	masters, day2, rogue, apiNode := lab.Nodes[:3], lab.Nodes[3], lab.Nodes[4], lab.Nodes[5]
	kube := startAdminKubeAPI(t, apiNode)
	cfg := unicastClusterConfig(t, lab, "")
	up := kube.upstream(t)
	for i, n := range masters {
		name := fmt.Sprintf("master-%d", i)
		kube.createMaster(t, name, n.IPv4.Addr())
		// The masters read the API from their own apiserver (a stand-in
		// that passes Kubernetes calls on to the real one).
		procs["apiserver-"+name] = startApplianceQuiet(t, n, "lab", "apiserver", "--listen", ":6443", "--name", name, "--upstream", up)
		procs[name] = startAppliance(t, n, "run", "--config", cfg, "--node", name, "--kubeconfig", kube.kubeconfig)
	}
	holder := waitOneHolder(t, masters, labVIP, 20*time.Second, time.Second)
	for _, n := range masters {
		others := addrsOf(slices.DeleteFunc(slices.Clone(masters), func(m *netlab.Node) bool { return m == n })...)
		waitPeers(t, n, others, 10*time.Second)
	}

	// On the wire: every advert of a master goes to a peer, none to the
	// multicast group.
	var fromMaster int
	peers := map[string]bool{}
	for _, a := range addrsOf(masters...) {
		peers[a.String()] = true
	}
	for _, pkt := range trafficOf(t, lab, 2*time.Second) {
		src, dst, _ := strings.Cut(pkt, " > ")
		if !peers[src] {
			continue
		}
		fromMaster++
		if !peers[dst] || dst == src {
			t.Errorf("advert %s: want it addressed to a peer", pkt)
		}
	}
	if fromMaster == 0 {
		t.Error("no advert of a master crossed the bridge")
	}
	t.Logf("%d adverts of the masters on the bridge in 2 s, each to a peer", fromMaster)

	// Day 2: master-3 is in no config; it registers as a Node.
	procs["apiserver-master-3"] = startApplianceQuiet(t, day2, "lab", "apiserver", "--listen", ":6443", "--name", "master-3", "--upstream", up)
	procs["master-3"] = startAppliance(t, day2, "run", "--config", cfg, "--node", "master-3", "--role", "master", "--kubeconfig", kube.kubeconfig)
	pids := map[string]int{}
	for i := range 3 {
		pids[fmt.Sprintf("master-%d", i)] = procs[fmt.Sprintf("master-%d", i)].Pid()
	}
	kube.createMaster(t, "master-3", day2.IPv4.Addr())
	all := append(slices.Clone(masters), day2)
	for _, n := range all {
		others := addrsOf(slices.DeleteFunc(slices.Clone(all), func(m *netlab.Node) bool { return m == n })...)
		waitPeers(t, n, others, 15*time.Second)
	}
	for name, pid := range pids {
		select {
		case <-procs[name].Done():
			t.Fatalf("%s exited", name)
		default:
		}
		if procs[name].Pid() != pid {
			t.Errorf("%s was restarted", name)
		}
	}
	if h := holders(t, all, labVIP); len(h) != 1 || h[0] != holder {
		t.Fatalf("holders %v after master-3 joined, want [%d]", h, holder)
	}

	// The rogue.
	stop := make(chan struct{})
	type result struct{ polls, misses int }
	done := make(chan result, 1)
	go func() {
		p, m := holdsThroughout(t, all, labVIP, holder, stop)
		done <- result{p, m}
	}()
	procs["rogue"] = startKeepalived(t, rogue, rogueOf(lab))
	time.Sleep(5 * time.Second)
	close(stop)
	r := <-done
	if r.misses > 0 {
		t.Errorf("the VIP left master-%d (or was held twice) at %d of %d polls while the rogue ran", holder, r.misses, r.polls)
	}
	if !holds(t, rogue, labVIP) {
		t.Log("the rogue does not hold the VIP itself")
	}
	h := lab.Nodes[holder]
	st := routerOf(t, h, "api-v4")
	if st.State != vrrp.StateMaster.String() {
		t.Errorf("the holder's api-v4 is %s, want MASTER", st.State)
	}
	i := slices.IndexFunc(st.Strangers, func(s vrrp.Stranger) bool { return s.Addr == rogue.IPv4.Addr() })
	if i < 0 || st.Strangers[i].Priority != 255 || st.Strangers[i].Count == 0 {
		t.Errorf("the holder's /status does not show the rogue %s at 255: %+v", rogue.IPv4.Addr(), st.Strangers)
	}
	metrics, err := nodeHTTPGet(h, "127.0.0.1:9447", "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`appliance_vrrp_drops_total\{(?:node="[^"]*",)?reason="unknown_peer",vip="api-v4"\} (\d+)`)
	if m := re.FindStringSubmatch(metrics); m == nil || m[1] == "0" {
		t.Errorf("the rogue's adverts are not counted as unknown_peer:\n%s", grepLines(metrics, "drops"))
	} else {
		t.Logf("the holder dropped %s adverts of the rogue as unknown_peer in 5 s", m[1])
	}
	if out := procs[fmt.Sprintf("master-%d", holder)].Output(); !strings.Contains(out, "no unicast peer advertises on our VRID") {
		t.Error("the rogue was not logged")
	}
}

// The control run: the same rogue against the same cluster by multicast
// takes the VIP, which is what unicast prevents above.
func TestRunRogueTakesMulticastVIP(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 4, Name: "mcast"})
	procs := map[string]*netlab.Process{}
	dumpOnFailure(t, procs)
	masters, rogue := lab.Nodes[:3], lab.Nodes[3]
	cfg := unicastClusterConfig(t, lab, "multicast")
	for i, n := range masters {
		name := fmt.Sprintf("master-%d", i)
		procs[name] = startAppliance(t, n, "run", "--config", cfg, "--node", name)
	}
	waitOneHolder(t, masters, labVIP, 20*time.Second, time.Second)
	for _, n := range masters {
		if st := routerOf(t, n, "api-v4"); st.Transport != vrrp.TransportMulticast {
			t.Fatalf("%s runs %s", n.Name, st.Transport)
		}
	}
	procs["rogue"] = startKeepalived(t, rogue, rogueOf(lab))
	waitHolder(t, lab.Nodes, labVIP, rogue.Index, 10*time.Second, time.Second)
}
