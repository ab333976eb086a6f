package node

import (
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"appliance/dhcp"
	"appliance/dnsserver"
	"appliance/internal/cluster"
	"appliance/internal/scrape"
	"appliance/lb"
	"appliance/vrrp"
)

// Every series registered through MetricsRegisterer names the node, and
// appliance_node_info names its role.
func TestMetricsRegistererNamesTheNode(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := MetricsRegisterer(reg, cluster.Node{Name: "master-1", Role: cluster.RoleMaster})
	if err != nil {
		t.Fatal(err)
	}
	lb.NewMetrics(r)
	want := `
# HELP appliance_node_info 1 for the node this process runs as; its role is a label.
# TYPE appliance_node_info gauge
appliance_node_info{node="master-1",role="master"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "appliance_node_info"); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == NodeLabel && l.GetValue() == "master-1")
			}
			if !found {
				t.Errorf("%s%v has no node label", mf.GetName(), m.GetLabel())
			}
		}
	}
	if _, err := MetricsRegisterer(reg, cluster.Node{Name: "master-1", Role: cluster.RoleMaster}); err == nil {
		t.Error("a second node on one registry: no error")
	}
}

// recorder is a Registerer that keeps what is registered with it.
type recorder struct{ cs []prometheus.Collector }

func (r *recorder) Register(c prometheus.Collector) error   { r.cs = append(r.cs, c); return nil }
func (r *recorder) MustRegister(cs ...prometheus.Collector) { r.cs = append(r.cs, cs...) }
func (r *recorder) Unregister(prometheus.Collector) bool    { return false }

var referenceDescRE = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// applianceMetrics are every appliance_* metric a node can serve, with
// their labels, as the services declare them.
func applianceMetrics(t *testing.T) map[string]string {
	t.Helper()
	rec := &recorder{}
	vrrp.NewMetrics(rec)
	lb.NewMetrics(rec)
	dhcp.NewMetrics(rec)
	cfg, err := cluster.Parse([]byte("cluster: {name: ocp4, baseDomain: example.com}\nnetwork: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	dns, err := dnsserver.New(cfg, cluster.NewState(cfg), dnsserver.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rec.cs = append(rec.cs, dns.Collectors()...)
	if _, err := scrape.New(scrape.Options{Kubeconfig: "k", Metrics: promhttp.Handler(), Registerer: rec}, nil); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range rec.cs {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := referenceDescRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read %s", d)
			}
			if strings.HasPrefix(m[1], "appliance_") {
				out[m[1]] = strings.ReplaceAll(m[2], " ", "")
			}
		}
	}
	return out
}

// TestMetricsReference: METRICS.md lists exactly the metrics the node
// serves, with their labels, and every name keeps Prometheus' conventions.
func TestMetricsReference(t *testing.T) {
	got := applianceMetrics(t)
	raw, err := os.ReadFile(filepath.Join("..", "..", "METRICS.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(appliance_[a-z_]+)` \\| (counter|gauge|histogram) \\| ([^|]*) \\|")
	doc := map[string]string{}
	kinds := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(raw), -1) {
		if _, dup := doc[m[1]]; dup {
			t.Errorf("METRICS.md lists %s twice", m[1])
		}
		labels := strings.Fields(strings.NewReplacer("`", " ", ",", " ", "—", " ").Replace(m[3]))
		slices.Sort(labels)
		doc[m[1]], kinds[m[1]] = strings.Join(labels, ","), m[2]
	}
	for name, labels := range got {
		l := strings.Split(labels, ",")
		if labels == "" {
			l = nil
		}
		slices.Sort(l)
		if d, ok := doc[name]; !ok {
			t.Errorf("METRICS.md lacks %s {%s}", name, labels)
		} else if d != strings.Join(l, ",") {
			t.Errorf("METRICS.md gives %s the labels %q; it has %q", name, d, strings.Join(l, ","))
		}
		for _, lab := range l {
			// Prometheus sets these on every series of a target (and the
			// ServiceMonitor adds the pod's): a metric's own would be
			// renamed exported_<label>.
			if slices.Contains([]string{"instance", "job", "namespace", "pod", "service", "endpoint", "container", "node"}, lab) {
				t.Errorf("%s has the label %s, which the scrape sets itself", name, lab)
			}
		}
	}
	for name, kind := range kinds {
		if _, ok := got[name]; !ok {
			t.Errorf("METRICS.md lists %s, which no service serves", name)
		}
		switch {
		case kind == "counter" && !strings.HasSuffix(name, "_total"):
			t.Errorf("counter %s does not end in _total", name)
		case kind != "counter" && strings.HasSuffix(name, "_total"):
			t.Errorf("%s %s ends in _total, which marks counters", kind, name)
		case kind == "histogram" && !strings.HasSuffix(name, "_seconds") && !strings.HasSuffix(name, "_bytes"):
			t.Errorf("histogram %s names no base unit", name)
		}
		for _, bad := range []string{"_count", "_sum", "_bucket", "_milliseconds", "_ms", "_kilobytes"} {
			if strings.HasSuffix(name, bad) || strings.Contains(name, bad+"_") {
				t.Errorf("%s contains %s: a histogram's series or a unit other than the base one", name, bad)
			}
		}
	}
}
