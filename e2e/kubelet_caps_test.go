//go:build kubelet

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"appliance/bootstrap"
	"appliance/internal/kubeletnode"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// capsConfig is a one-master cluster whose master runs every service that
// needs a privilege: the VIPs (VRRP, addresses, announcements), the LB's
// nftables redirect, DNS on 53, DHCP on 67.
const capsConfig = `cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: 192.168.126.0/24
  apiVIPs: [192.168.126.5]
  ingressVIPs: [192.168.126.6]
nodes:
  - {name: master-0, role: master, mac: "52:54:00:7e:00:10", ips: [192.168.126.10]}
lb: {mcs: true}
dns: {mdns: true}
dhcp: {enabled: true, leaseTime: 1h, pool: {start: 192.168.126.100, end: 192.168.126.119}}
`

// capsFeature is one thing the master does for the cluster, checked from
// outside its pod.
type capsFeature struct {
	name  string
	check func() error
}

// TestKubeletCapabilities: the pod asks for no capability it does not use.
// The master's manifest, as `appliance manifests` writes it, runs under the
// kubelet with each of its capabilities taken away in turn; each time
// something the node does for the cluster must break (or the pod fail),
// and the table of what breaks is logged. The full manifest, first, does
// everything.
func TestKubeletCapabilities(t *testing.T) {
	kubeletTools(t)
	exe := appliance(t)
	img := buildNodeImage(t, "tier-1")
	files, _ := manifestsFor(t, exe, capsConfig, img.ref)
	base := files["master"].pod(t)

	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "kcaps"})
	n, client := lab.Nodes[0], lab.Nodes[1]
	upstream := upstreamDNS(t, client)
	for _, args := range [][]string{
		{"lab", "apiserver", "--listen", ":6443", "--name", "master-0"},
		{"lab", "mcs", "--listen", ":22623", "--name", "master-0"},
	} {
		if _, err := n.Start(context.Background(), exe, args...); err != nil {
			t.Fatal(err)
		}
	}
	k := startKubelets(t, kubeletSpec{n: n, name: "master-0", files: files["master"],
		extra: nodeFiles(n.IPv4.Addr().String(), upstream, ""), images: []nodeImage{img}, configExtra: kubeletSeccomp})[0]

	vip := netip.MustParseAddr("192.168.126.5")
	features := []capsFeature{
		{"API VIP held", func() error {
			if !holds(t, n, vip) {
				return fmt.Errorf("%s not on %s", vip, n.Iface)
			}
			return nil
		}},
		{"nftables redirect", func() error {
			if tables := applianceTables(t, n); len(tables) == 0 {
				return fmt.Errorf("no appliance table")
			}
			return nil
		}},
		{"API through the VIP", func() error {
			_, _, err := callAPI(client, vip.String()+":6443")
			return err
		}},
		{"DNS on :53", func() error {
			out, _ := client.Run(context.Background(), "dig", "+tries=1", "+time=1", "@"+n.IPv4.Addr().String(), "A", "api.ocp4.example.com")
			if got := digSummary(out); got != "NOERROR "+vip.String() {
				return fmt.Errorf("%s", got)
			}
			return nil
		}},
		{"DHCP on :67", func() error { return askDHCP(client) }},
	}
	// check tries each feature; wait gives each a few seconds (a pod just
	// Ready: the VIP follows Master_Down, the redirect the LB's first
	// health check), for a pod that failed one try is enough.
	check := func(wait bool) (broken []string) {
		for _, f := range features {
			var err error
			settle := time.Duration(0)
			if wait {
				settle = 5 * time.Second
			}
			for end := time.Now().Add(settle); ; time.Sleep(250 * time.Millisecond) {
				if err = f.check(); err == nil || time.Now().After(end) {
					break
				}
			}
			if err != nil {
				broken = append(broken, fmt.Sprintf("%s (%v)", f.name, err))
			}
		}
		return broken
	}

	// The full manifest first: everything works, or the rest means nothing.
	k.put(t, files["master"][bootstrap.StaticPodPath])
	k.waitReady(t, 60*time.Second)
	if broken := check(true); len(broken) > 0 {
		t.Fatalf("with every capability the manifest asks for, broken: %v", broken)
	}
	var table strings.Builder
	table.WriteString("| capability taken away | pod | what breaks |\n|---|---|---|\n")
	for _, drop := range base.Spec.Containers[0].SecurityContext.Capabilities.Add {
		k.clear(t)

		variant := base.DeepCopy()
		sc := variant.Spec.Containers[0].SecurityContext
		sc.Capabilities.Add = slices.DeleteFunc(slices.Clone(sc.Capabilities.Add), func(c corev1.Capability) bool { return c == drop })
		raw, err := yaml.Marshal(variant)
		if err != nil {
			t.Fatal(err)
		}
		put := time.Now()
		k.put(t, raw)
		podState, broken := k.observe(t, put, check)
		if len(broken) == 0 {
			t.Errorf("without %s the pod is Ready and every feature works: the manifest asks for a capability it does not use", drop)
		}
		fmt.Fprintf(&table, "| %s | %s | %s |\n", drop, podState, strings.Join(broken, "; "))
	}
	t.Logf("the master's pod under the kubelet (seccompDefault), each capability taken away in turn:\n%s", table.String())
	k.clear(t)
}

// clear takes the manifest away and waits until the kubelet is done with
// the pod, so the next one starts at once (kubeletnode.Node.Clear).
func (k *kubeletNode) clear(t *testing.T) {
	t.Helper()
	if err := k.Clear(context.Background(), k.grace(t)+30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// observe waits for a pod put in place at put to settle (Ready, or its
// container failed) and says how it ended up and which features are
// broken.
func (k *kubeletNode) observe(t *testing.T, put time.Time, check func(wait bool) []string) (string, []string) {
	t.Helper()
	var state string
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if ok, _ := k.Ready(); ok {
			state = "Ready"
			break
		}
		all, err := k.Containers()
		if err != nil {
			t.Fatal(err)
		}
		// The earlier pods' containers (same pod name) stay listed until
		// the kubelet's garbage collection: only this pod's count.
		var cs []kubeletnode.Container
		for _, c := range all {
			if c.Created().UnixNano() >= put.UnixNano() {
				cs = append(cs, c)
			}
		}
		if n := len(cs); n > 0 && (cs[n-1].State == "CONTAINER_EXITED" || n > 1) {
			c := cs[0]
			s, err := k.Inspect(c.ID)
			if err != nil {
				t.Fatal(err)
			}
			// A failing container's log is JSON to its last line too: the
			// error it exits with is a record.
			if logs, err := k.Logs(c.ID); err == nil {
				if _, bad := jsonLines(logs); len(bad) > 0 {
					t.Errorf("%s: the failed container's log has lines that are not JSON records: %q", k.name, bad)
				}
			}
			state = fmt.Sprintf("exits %d: %s", s.Status.ExitCode, lastError(k, c.ID))
			break
		}
		if time.Now().After(end) {
			_, why := k.Ready()
			state = "runs, not Ready: " + why
			break
		}
	}
	return state, check(state == "Ready")
}

// lastError is the last error a container logged.
func lastError(k *kubeletNode, id string) string {
	logs, err := k.Logs(id)
	if err != nil {
		return err.Error()
	}
	recs, bad := jsonLines(logs)
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].str("level") == "ERROR" {
			return fmt.Sprintf("%s: %v", recs[i].str("msg"), recs[i]["err"])
		}
	}
	if len(bad) > 0 {
		return bad[len(bad)-1]
	}
	return "no error logged"
}

// askDHCP runs a DHCP exchange from n's interface and fails unless it is
// acknowledged.
func askDHCP(n *netlab.Node) error {
	return n.Do(func() error {
		c, err := nclient4.New(n.Iface, nclient4.WithTimeout(time.Second), nclient4.WithRetry(2))
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = c.Request(ctx)
		return err
	})
}
