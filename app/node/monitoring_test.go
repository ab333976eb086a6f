package node

import (
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"appliance/bootstrap/monitoring"
	"appliance/dhcp"
	"appliance/dnsserver"
	"appliance/internal/cluster"
	"appliance/lb"
	"appliance/vrrp"
)

// descRE reads a collector's description: its name, constant labels
// (node, role) and variable labels.
var descRE = regexp.MustCompile(`fqName: "([^"]+)".*constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}`)

// TestMonitoringMetricsExported holds monitoring.Metrics, the one list of
// what the alerts and the dashboard read, against what `appliance run`
// registers: every service's collectors through MetricsRegisterer, as New
// does. A metric or label renamed in a service fails here.
func TestMonitoringMetricsExported(t *testing.T) {
	cfg, err := cluster.Parse([]byte(`cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: 192.168.126.0/24
  apiVIPs: [192.168.126.5]
  ingressVIPs: [192.168.126.6]
nodes:
  - {name: master-0, role: master, ips: [192.168.126.10]}
`))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := MetricsRegisterer(reg, cluster.Node{Name: "master-0", Role: cluster.RoleMaster})
	if err != nil {
		t.Fatal(err)
	}
	lb.NewMetrics(r)
	vrrp.NewMetrics(r)
	dhcp.NewMetrics(r)
	dns, err := dnsserver.New(cfg, cluster.NewState(cfg), dnsserver.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range dns.Collectors() {
		if err := r.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	descs := make(chan *prometheus.Desc)
	go func() { reg.Describe(descs); close(descs) }()
	exported := map[string][]string{}
	for d := range descs {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		var labels []string
		for _, kv := range strings.Split(m[2], ",") {
			if k, _, ok := strings.Cut(kv, "="); ok {
				labels = append(labels, strings.TrimSpace(k))
			}
		}
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		exported[m[1]] = labels
	}
	for _, m := range monitoring.Metrics {
		labels, ok := exported[m.Name]
		if !ok {
			t.Errorf("the alerts or the dashboard read %s, which appliance run does not export", m.Name)
			continue
		}
		for _, l := range m.Labels {
			if !slices.Contains(labels, l) {
				t.Errorf("%s has labels %v; the alerts or the dashboard read %q", m.Name, labels, l)
			}
		}
	}
	if len(exported) < 40 {
		t.Errorf("only %d metrics described: %v", len(exported), exported)
	}
}
