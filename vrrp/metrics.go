package vrrp

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the VRRP counters and gauges, labelled by instance name
// (vrrp_instance: Prometheus gives every scraped series its own label
// instance, the target, and would rename ours to exported_instance). One
// Metrics serves every instance of a process; register it once.
type Metrics struct {
	state       *prometheus.GaugeVec
	priority    *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	sent        *prometheus.CounterVec
	received    *prometheus.CounterVec
	drops       *prometheus.CounterVec
	collisions  *prometheus.CounterVec
	vipErrors   *prometheus.CounterVec
	track       *prometheus.GaugeVec
	repairs     *prometheus.CounterVec
}

// NewMetrics creates the VRRP metrics and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appliance_vrrp_state",
			Help: "VRRP state of the instance: 0 INIT, 1 BACKUP, 2 MASTER, 3 FAULT.",
		}, []string{"vrrp_instance", "vrid"}),
		priority: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appliance_vrrp_priority",
			Help: "Effective priority (base priority adjusted by tracking).",
		}, []string{"vrrp_instance"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_vrrp_transitions_total",
			Help: "State transitions, by the state entered.",
		}, []string{"vrrp_instance", "to"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_vrrp_adverts_sent_total",
			Help: "Advertisements sent.",
		}, []string{"vrrp_instance"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_vrrp_adverts_received_total",
			Help: "Advertisements accepted by the receive checks.",
		}, []string{"vrrp_instance"}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_vrrp_drops_total",
			Help: "Received packets dropped, by reason (vrid counts adverts of other routers on the segment).",
		}, []string{"vrrp_instance", "reason"}),
		collisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_vrrp_vrid_collisions_total",
			Help: "Adverts on our VRID that list other addresses: another router uses our VRID.",
		}, []string{"vrrp_instance"}),
		vipErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_vrrp_vip_errors_total",
			Help: "Failures to install or remove a VIP (the instance goes to FAULT on install failure).",
		}, []string{"vrrp_instance"}),
		track: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appliance_vrrp_track_healthy",
			Help: "Tracked check health: 1 healthy, 0 failing.",
		}, []string{"vrrp_instance", "track"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_vrrp_repairs_total",
			Help: "Kernel state found changed under the instance and what was done: vip_restored, source_changed, source_lost (FAULT), receiver_failed (FAULT), interface_reopened.",
		}, []string{"vrrp_instance", "kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.state, m.priority, m.transitions, m.sent, m.received, m.drops,
			m.collisions, m.vipErrors, m.track, m.repairs)
	}
	return m
}
