package lb

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the load balancer's counters and gauges, labelled by pool and
// backend (the member name). A nil *Metrics records nothing.
type Metrics struct {
	state    *prometheus.GaugeVec
	active   *prometheus.GaugeVec
	checks   *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	conns    *prometheus.CounterVec
	healthy  *prometheus.GaugeVec
	redirect prometheus.Gauge
	desired  prometheus.Gauge
	repairs  *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appliance_lb_backend_state",
			Help: "Backend health: 0 unknown, 1 up, 2 down.",
		}, []string{"pool", "backend"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appliance_lb_backend_active_connections",
			Help: "Proxied connections open to the backend.",
		}, []string{"pool", "backend"}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_lb_backend_checks_total",
			Help: "Health checks of the backend, by result (ok, fail).",
		}, []string{"pool", "backend", "result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_lb_backend_bytes_total",
			Help: "Bytes proxied; direction in is client to backend, out is backend to client.",
		}, []string{"pool", "backend", "direction"}),
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_lb_connections_total",
			Help: "Accepted client connections by outcome: proxied, limit (over the connection limit), no_backend, dial_failed.",
		}, []string{"pool", "result"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appliance_lb_pool_healthy_backends",
			Help: "Backends of the pool currently up (backups included).",
		}, []string{"pool"}),
		redirect: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "appliance_lb_redirect_rules",
			Help: "nftables redirect rules installed (VIP and port pairs); 0 after a repair of the table failed.",
		}),
		desired: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "appliance_lb_redirect_desired_rules",
			Help: "nftables redirect rules the pools' health calls for (a VIP and port pair per pool with a healthy backend); more than appliance_lb_redirect_rules while they cannot be installed.",
		}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_lb_redirect_repairs_total",
			Help: "Repairs of the nftables redirect table after someone else changed it, by what was wrong: table (gone), chain (gone, changed or added), rule (missing or foreign).",
		}, []string{"kind"}),
	}
	// Every kind shows from the start, at 0, so a rate over it is defined.
	for _, k := range []string{RepairTable, RepairChain, RepairRule} {
		m.repairs.WithLabelValues(k)
	}
	if reg != nil {
		reg.MustRegister(m.state, m.active, m.checks, m.bytes, m.conns, m.healthy, m.redirect, m.desired, m.repairs)
	}
	return m
}

func (m *Metrics) setState(pool, backend string, s HealthState) {
	if m != nil {
		m.state.WithLabelValues(pool, backend).Set(float64(s))
	}
}

func (m *Metrics) check(pool, backend string, ok bool) {
	if m != nil {
		r := "fail"
		if ok {
			r = "ok"
		}
		m.checks.WithLabelValues(pool, backend, r).Inc()
	}
}

// connCounters are one pool's connection outcomes, resolved once so that
// accepting a connection does no label lookup.
type connCounters struct {
	proxied, limit, noBackend, dialFailed prometheus.Counter
}

func (m *Metrics) connCounters(pool string) connCounters {
	if m == nil {
		return connCounters{}
	}
	return connCounters{
		proxied:    m.conns.WithLabelValues(pool, "proxied"),
		limit:      m.conns.WithLabelValues(pool, "limit"),
		noBackend:  m.conns.WithLabelValues(pool, "no_backend"),
		dialFailed: m.conns.WithLabelValues(pool, "dial_failed"),
	}
}

// inc counts one connection on c, which is nil without metrics.
func inc(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}

func (m *Metrics) setHealthy(pool string, n int) {
	if m != nil {
		m.healthy.WithLabelValues(pool).Set(float64(n))
	}
}

func (m *Metrics) setRedirect(n int) {
	if m != nil {
		m.redirect.Set(float64(n))
	}
}

func (m *Metrics) setDesired(n int) {
	if m != nil {
		m.desired.Set(float64(n))
	}
}

func (m *Metrics) repaired(kind string) {
	if m != nil {
		m.repairs.WithLabelValues(kind).Inc()
	}
}

// forget drops a removed backend's series so they do not linger.
func (m *Metrics) forget(pool, backend string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"pool": pool, "backend": backend}
	m.state.DeletePartialMatch(l)
	m.active.DeletePartialMatch(l)
	m.checks.DeletePartialMatch(l)
	m.bytes.DeletePartialMatch(l)
}

// backendMetrics are one backend's per-connection series, resolved once so
// that the connection path does no label lookups.
type backendMetrics struct {
	active  prometheus.Gauge
	in, out prometheus.Counter
}

func (m *Metrics) backend(pool, backend string) backendMetrics {
	if m == nil {
		return backendMetrics{}
	}
	return backendMetrics{
		active: m.active.WithLabelValues(pool, backend),
		in:     m.bytes.WithLabelValues(pool, backend, "in"),
		out:    m.bytes.WithLabelValues(pool, backend, "out"),
	}
}

func (b backendMetrics) addActive(d float64) {
	if b.active != nil {
		b.active.Add(d)
	}
}

func (b backendMetrics) addBytes(dir string, n int64) {
	if b.in == nil || n <= 0 {
		return
	}
	if dir == "in" {
		b.in.Add(float64(n))
	} else {
		b.out.Add(float64(n))
	}
}
