package vrrp

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the VRRP counters and gauges, labelled by instance name
// (label "vip": "api-v4", "ingress-v6"; never "instance", which Prometheus
// gives every scraped series as the target's address and would rename ours
// to exported_instance). One Metrics serves every instance of a process;
// register it once.
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
	held        *prometheus.GaugeVec
}

// NewMetrics creates the VRRP metrics and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appliance_vrrp_state",
			Help: "VRRP state of the instance: 0 INIT, 1 BACKUP, 2 MASTER, 3 FAULT.",
		}, []string{"vip", "vrid"}),
		priority: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appliance_vrrp_priority",
			Help: "Effective priority (base priority adjusted by tracking).",
		}, []string{"vip"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_vrrp_transitions_total",
			Help: "State transitions, by the state entered.",
		}, []string{"vip", "to"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_vrrp_adverts_sent_total",
			Help: "Advertisements sent.",
		}, []string{"vip"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_vrrp_adverts_received_total",
			Help: "Advertisements accepted by the receive checks.",
		}, []string{"vip"}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_vrrp_drops_total",
			Help: "Received packets dropped, by reason (vrid counts adverts of other routers on the segment).",
		}, []string{"vip", "reason"}),
		collisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_vrrp_vrid_collisions_total",
			Help: "Adverts on our VRID that list other addresses: another router uses our VRID.",
		}, []string{"vip"}),
		vipErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_vrrp_vip_errors_total",
			Help: "Failures to install or remove a VIP (the instance goes to FAULT on install failure).",
		}, []string{"vip"}),
		track: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appliance_vrrp_track_healthy",
			Help: "Tracked check health: 1 healthy, 0 failing.",
		}, []string{"vip", "track"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_vrrp_repairs_total",
			Help: "Kernel state found changed under the instance and what was done: vip_restored, source_changed, source_lost (FAULT), receiver_failed (FAULT), interface_reopened.",
		}, []string{"vip", "kind"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appliance_vrrp_vip_held",
			Help: "1 while this node has the VIP address installed as master, else 0: summed over the nodes, how many hold it.",
		}, []string{"vip", "address"}),
	}
	if reg != nil {
		reg.MustRegister(m.state, m.priority, m.transitions, m.sent, m.received, m.drops,
			m.collisions, m.vipErrors, m.track, m.repairs, m.held)
	}
	return m
}

// begin shows an instance's series from its start: the state (INIT), its
// VIPs not held, and every transition, repair, collision and VIP error at
// 0, so that a rate or increase over them is defined from the first scrape
// and an alert sees the first event, not only the second.
func (m *Metrics) begin(cfg Config) {
	m.state.WithLabelValues(cfg.Name, strconv.Itoa(int(cfg.VRID))).Set(0)
	for _, s := range []State{StateBackup, StateMaster, StateFault} {
		m.transitions.WithLabelValues(cfg.Name, s.String())
	}
	for _, k := range []string{repairVIP, repairSource, repairSourceGone, repairReceiver, repairInterface} {
		m.repairs.WithLabelValues(cfg.Name, k)
	}
	m.collisions.WithLabelValues(cfg.Name)
	m.vipErrors.WithLabelValues(cfg.Name)
	m.setHeld(cfg, false)
}

// setHeld says whether cfg's VIPs are installed here.
func (m *Metrics) setHeld(cfg Config, held bool) {
	v := 0.0
	if held {
		v = 1
	}
	for _, p := range cfg.VIPs {
		m.held.WithLabelValues(cfg.Name, p.Addr().String()).Set(v)
	}
}
