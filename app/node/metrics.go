package node

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"appliance/internal/cluster"
)

// NodeLabel is the label every service's series carries: the node's name
// as `appliance status` shows it. The alerts and the dashboard name the node
// from it, whatever labels the scrape adds (a target's address, a pod name
// that differs from the node's).
const NodeLabel = "node"

// MetricsRegisterer wraps reg so that every series registered through it
// carries NodeLabel, and registers appliance_node_info there: 1, with the
// node's role, for as long as the process runs, so a node whose series went
// silent is still named by the last one.
func MetricsRegisterer(reg prometheus.Registerer, self cluster.Node) (prometheus.Registerer, error) {
	r := prometheus.WrapRegistererWith(prometheus.Labels{NodeLabel: self.Name}, reg)
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "appliance_node_info",
		Help:        "1 for the node this process runs as; its role is a label.",
		ConstLabels: prometheus.Labels{"role": string(self.Role)},
	})
	info.Set(1)
	if err := r.Register(info); err != nil {
		return nil, fmt.Errorf("run: node metrics: %w", err)
	}
	return r, nil
}
