//go:build bench

package node

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestBenchDay2NodeDNS repeats TestDay2NodeAnsweredByDNS's measure: a
// Node created in a real kube-apiserver, its InternalIP set, timed until
// the node's DNS answers its name (polled every millisecond); then deleted
// and timed until the name is gone. BENCH_RUNS (10) Nodes, one at a time.
//
//	KUBEBUILDER_ASSETS=$(../shared/tools/kube-apiserver/build.sh) BENCH_RUNS=10 \
//	  go test -count=1 -tags bench -run '^TestBenchDay2NodeDNS$' -v ./app/node
func TestBenchDay2NodeDNS(t *testing.T) {
	runs := 10
	if n, err := strconv.Atoi(os.Getenv("BENCH_RUNS")); err == nil && n > 0 {
		runs = n
	}
	n, api, listen := startDNSNode(t, "benchk8s")
	ctx := t.Context()
	c := &dns.Client{Timeout: 500 * time.Millisecond}
	ask := func(name string) []dns.RR {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, _, err := c.Exchange(m, listen)
		if err != nil || r.Rcode != dns.RcodeSuccess {
			return nil
		}
		return r.Answer
	}
	until := func(what string, ok func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for time.Since(start) < 30*time.Second {
			if ok() {
				return time.Since(start)
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatalf("%s: not within 30 s", what)
		return 0
	}
	until("DNS serving", func() bool { return len(ask("master-0.ocp4.example.com.")) == 1 })
	if err := waitForReady(n); err != nil {
		t.Fatal(err)
	}

	var appear, leave []time.Duration
	for i := range runs {
		name := fmt.Sprintf("worker-%d", 100+i)
		ip := fmt.Sprintf("192.168.126.%d", 100+i)
		fqdn := name + ".ocp4.example.com."
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"node-role.kubernetes.io/worker": ""}}}
		if err := api.Client.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		if err := api.Client.Status().Update(ctx, node); err != nil {
			t.Fatal(err)
		}
		// From the moment the API server accepted the address.
		appear = append(appear, until(name+" answered", func() bool {
			rr := ask(fqdn)
			return len(rr) == 1 && rr[0].(*dns.A).A.String() == ip
		}))
		if err := api.Client.Delete(ctx, node); err != nil {
			t.Fatal(err)
		}
		leave = append(leave, until(name+" gone", func() bool { return len(ask(fqdn)) == 0 }))
	}
	stats := func(s []time.Duration) string {
		c := slices.Clone(s)
		slices.Sort(c)
		f := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
		return f(c[0]) + " / " + f(c[len(c)/2]) + " / " + f(c[len(c)-1])
	}
	b, _ := os.ReadFile("/proc/loadavg")
	t.Logf("\nDay-2 Node through a real kube-apiserver, %d Nodes one at a time, min / median / max (load average %s)\n\n"+
		"| | appliance run (Node informer) |\n|---|---|\n"+
		"| Node's InternalIP set → its name answered by DNS | %s |\n"+
		"| Node deleted → its name no longer answered | %s |\n",
		runs, strings.Join(strings.Fields(string(b))[:3], " "), stats(appear), stats(leave))
}
