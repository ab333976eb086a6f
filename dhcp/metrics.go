package dhcp

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics are the server's Prometheus collectors.
type Metrics struct {
	received *prometheus.CounterVec
	replies  *prometheus.CounterVec
	drops    *prometheus.CounterVec
	leases   prometheus.GaugeFunc
	flushes  prometheus.Histogram
	reopens  prometheus.Counter
	pool     []prometheus.Collector
	// Set by New: the server these metrics describe.
	store  *Store
	policy *Policy
	serve  func() bool
}

// NewMetrics registers the DHCP collectors on reg (nil: not registered).
// Leases are counted from the store the server sets with its New.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_dhcp_requests_total",
			Help: "DHCP messages received, by message type.",
		}, []string{"type"}),
		replies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_dhcp_replies_total",
			Help: "DHCP replies sent, by message type (OFFER, ACK, NAK).",
		}, []string{"type"}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_dhcp_drops_total",
			Help: "Received messages not answered, by reason.",
		}, []string{"reason"}),
		flushes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "appliance_dhcp_ack_durable_wait_seconds",
			Help:    "Time an ACK waited for its lease to reach the disk.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12),
		}),
		reopens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "appliance_dhcp_socket_reopens_total",
			Help: "Times the receive socket failed and was opened again.",
		}),
	}
	m.leases = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "appliance_dhcp_leases",
		Help: "Pool leases and declined addresses held in the lease store.",
	}, func() float64 {
		if m.store == nil {
			return 0
		}
		return float64(len(m.store.Leases()))
	})
	m.pool = []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "appliance_dhcp_pool_addresses",
			Help: "Addresses the dynamic pool may hand out (its range less excluded and reserved addresses); 0 without a pool.",
		}, func() float64 {
			if m.policy == nil {
				return 0
			}
			return float64(m.policy.PoolSize())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "appliance_dhcp_pool_free",
			Help: "Pool addresses that no live lease, offer or decline holds in this node's lease store.",
		}, func() float64 {
			if m.policy == nil || m.store == nil {
				return 0
			}
			return float64(m.policy.PoolFree(m.store.Held(), time.Now()))
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "appliance_dhcp_pool_serving",
			Help: "1 while this node hands out pool addresses (with several servers: the API VIP's holder), else 0.",
		}, func() float64 {
			if m.policy == nil || m.policy.PoolSize() == 0 || (m.serve != nil && !m.serve()) {
				return 0
			}
			return 1
		}),
	}
	// A client turned away for want of an address counts from 0, so the
	// first one shows in an increase.
	m.drops.WithLabelValues(string(DropPoolExhausted))
	if reg != nil {
		reg.MustRegister(m.received, m.replies, m.drops, m.leases, m.flushes, m.reopens)
		reg.MustRegister(m.pool...)
	}
	return m
}

// Drops returns how many messages were dropped for reason (tests, status).
func (m *Metrics) Drops(reason DropReason) float64 {
	return counterValue(m.drops.WithLabelValues(string(reason)))
}

// Replies returns how many replies of type t ("OFFER", "ACK", "NAK") left.
func (m *Metrics) Replies(t string) float64 {
	return counterValue(m.replies.WithLabelValues(t))
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil || m.Counter == nil {
		return 0
	}
	return m.Counter.GetValue()
}
