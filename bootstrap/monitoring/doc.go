// Package monitoring holds what Prometheus and the OpenShift console need to
// watch the appliance: the alerting rules (rules.yaml, shipped as a
// PrometheusRule), the Grafana dashboard (dashboard.json, shipped as the
// ConfigMap the console shows), and Metrics, the one list of the metric
// names and labels both read, which the tests hold against what the binary
// exports.
//
// It is a sub-package of bootstrap because its files are manifests that
// `appliance manifests` writes beside the node files, and it imports no
// service: the check that every name is exported lives in app/node, the
// composition that registers every service's collectors, and in e2e, which
// scrapes running nodes with a real Prometheus.
package monitoring
