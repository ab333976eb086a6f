package monitoring

// Metric is a metric the rules or the dashboard read, with the labels they
// read of it.
type Metric struct {
	Name string
	// Labels are the labels of the series the binary exports, node
	// included (app/node adds it to every service's series).
	Labels []string
	// Histogram: the files name it with _bucket, _sum or _count.
	Histogram bool
}

// Metrics is every metric the rules and the dashboard name, and nothing
// else: TestNamesInFiles keeps it equal to what the files name, and
// app/node's TestMonitoringMetricsExported holds it against the
// collectors the services register. A renamed metric or label fails there
// first.
var Metrics = []Metric{
	{Name: "appliance_node_info", Labels: []string{"node", "role"}},
	{Name: "appliance_vrrp_vip_held", Labels: []string{"node", "vip", "address"}},
	{Name: "appliance_vrrp_transitions_total", Labels: []string{"node", "vip", "to"}},
	{Name: "appliance_vrrp_priority", Labels: []string{"node", "vip"}},
	{Name: "appliance_vrrp_vrid_collisions_total", Labels: []string{"node", "vip"}},
	{Name: "appliance_vrrp_repairs_total", Labels: []string{"node", "vip", "kind"}},
	{Name: "appliance_lb_pool_healthy_backends", Labels: []string{"node", "pool"}},
	{Name: "appliance_lb_backend_active_connections", Labels: []string{"node", "pool", "backend"}},
	{Name: "appliance_lb_backend_bytes_total", Labels: []string{"node", "pool", "backend", "direction"}},
	{Name: "appliance_lb_connections_total", Labels: []string{"node", "pool", "result"}},
	{Name: "appliance_lb_redirect_rules", Labels: []string{"node"}},
	{Name: "appliance_lb_redirect_desired_rules", Labels: []string{"node"}},
	{Name: "appliance_lb_redirect_repairs_total", Labels: []string{"node", "kind"}},
	{Name: "appliance_dns_requests_total", Labels: []string{"node", "proto", "type"}},
	{Name: "appliance_dns_responses_total", Labels: []string{"node", "rcode"}},
	{Name: "appliance_dns_cluster_queries_total", Labels: []string{"node", "result"}},
	{Name: "appliance_dns_forwarded_total", Labels: []string{"node", "result"}},
	{Name: "appliance_dns_request_duration_seconds", Labels: []string{"node"}, Histogram: true},
	{Name: "appliance_dns_mdns_refused_claims_total", Labels: []string{"node", "reason"}},
	{Name: "appliance_dhcp_pool_serving", Labels: []string{"node"}},
	{Name: "appliance_dhcp_pool_free", Labels: []string{"node"}},
	{Name: "appliance_dhcp_pool_addresses", Labels: []string{"node"}},
	{Name: "appliance_dhcp_drops_total", Labels: []string{"node", "reason"}},
}

// Scraped are the series Prometheus itself makes for each target, which the
// rules read too.
var Scraped = []string{"up"}

// TargetLabels are the labels Prometheus gives every scraped series (and
// le, a histogram bucket's bound), which the files may read besides
// Metrics' own.
var TargetLabels = []string{"job", "instance", "le"}
