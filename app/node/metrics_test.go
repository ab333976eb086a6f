package node

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"appliance/internal/cluster"
	"appliance/lb"
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
