package dnsserver

import (
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// Query types counted on their own; everything else is "other".
var metricQtypes = []uint16{dns.TypeA, dns.TypeAAAA, dns.TypePTR, dns.TypeSRV, dns.TypeSOA, dns.TypeNS, dns.TypeTXT, dns.TypeANY}

// Response codes counted on their own; everything else is "other".
var metricRcodes = []int{dns.RcodeSuccess, dns.RcodeNameError, dns.RcodeServerFailure, dns.RcodeRefused, dns.RcodeFormatError}

// metrics are one Server's own collectors. CoreDNS's stock plugins (cache,
// forward) register theirs in the Prometheus default registry instead.
type metrics struct {
	// Request metrics with their label values resolved up front: a label
	// lookup per query costs as much as answering it.
	requestsVec  *prometheus.CounterVec
	requests     [2][]prometheus.Counter // [tcp][qtype index]
	responsesVec *prometheus.CounterVec
	responses    []prometheus.Counter // [rcode index]
	duration     prometheus.Histogram

	answers           *prometheus.CounterVec
	answerBy          map[string]prometheus.Counter // answers resolved by result
	upstreams         prometheus.Gauge
	forwardedVec      *prometheus.CounterVec
	forwarded         map[string]prometheus.Counter // by forward result
	changes           prometheus.Counter
	refusedClients    prometheus.Counter
	fastAnswers       prometheus.Counter
	forwardHits       prometheus.Counter
	forwardPrefetches prometheus.Counter
	members           prometheus.Gauge
	mdnsSent          prometheus.Counter

	mdnsRefused      *prometheus.CounterVec
	mdnsRefusedBy    map[string]prometheus.Counter
	mdnsSocketErrors *prometheus.CounterVec
	mdnsRebinds      prometheus.Counter
	mdnsMalformed    prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		requestsVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_dns_requests_total",
			Help: "DNS requests received, by transport and query type.",
		}, []string{"proto", "type"}),
		responsesVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_dns_responses_total",
			Help: "DNS responses sent, by response code.",
		}, []string{"rcode"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "appliance_dns_request_duration_seconds",
			Help:    "Time to answer a request, including forwarding.",
			Buckets: prometheus.ExponentialBuckets(0.00003125, 4, 10), // 31µs .. 8s
		}),
		answers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_dns_cluster_queries_total",
			Help: "Questions seen by the cluster plugin, by outcome: answer, nodata, nxdomain, fallthrough (to the upstreams), mdns_answer, mdns_nxdomain (.local names).",
		}, []string{"result"}),
		upstreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "appliance_dns_upstreams",
			Help: "Upstream resolvers currently forwarded to.",
		}),
		forwardedVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_dns_forwarded_total",
			Help: "Queries sent to the upstream resolvers (after the cache), by outcome: answered (an upstream replied, whatever its rcode), failed (none replied: SERVFAIL), rejected (the forwarder refused the query: malformed, unsupported, or too many in flight).",
		}, []string{"result"}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "appliance_dns_upstream_changes_total",
			Help: "Changes of the upstream resolvers applied.",
		}),
		refusedClients: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "appliance_dns_refused_queries_total",
			Help: "Queries refused because the client is not on loopback, in a machine network or in dns.allowFrom.",
		}),
		fastAnswers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "appliance_dns_fast_answers_total",
			Help: "Queries answered by the fast path (cluster names and cached forwarded names over UDP, before the plugin chain); also counted in the request, response and cluster query metrics.",
		}),
		forwardHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "appliance_dns_forward_cache_hits_total",
			Help: "Forwarded names answered by the fast path from its cache of the chain's replies; also counted in appliance_dns_fast_answers_total.",
		}),
		forwardPrefetches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "appliance_dns_forward_cache_prefetches_total",
			Help: "Hits on a forward cache entry near its end that also sent the query through the chain to refresh it; the chain counts these queries, the hit does not.",
		}),
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "appliance_dns_mdns_members",
			Help: "Members currently known through mDNS.",
		}),
		mdnsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "appliance_dns_mdns_announcements_total",
			Help: "mDNS announcements and responses sent.",
		}),
		mdnsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_dns_mdns_refused_claims_total",
			Help: "mDNS announcements refused, by reason: name (a known node's name with other addresses), address (a known node's address under another name), outside (an address outside the machine networks), vip (a VIP).",
		}, []string{"reason"}),
		mdnsSocketErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_dns_mdns_socket_errors_total",
			Help: "mDNS sockets that failed to open or to read, by family and operation; each is opened again.",
		}, []string{"family", "op"}),
		mdnsRebinds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "appliance_dns_mdns_rebinds_total",
			Help: "Times mDNS moved its sockets to another interface, following the node's addresses.",
		}),
		mdnsMalformed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "appliance_dns_mdns_malformed_packets_total",
			Help: "mDNS packets dropped because they did not parse.",
		}),
	}
	m.mdnsRefusedBy = map[string]prometheus.Counter{}
	for _, r := range refuseReasons {
		m.mdnsRefusedBy[r] = m.mdnsRefused.WithLabelValues(r)
	}
	for i, proto := range []string{"udp", "tcp"} {
		for _, t := range metricQtypes {
			m.requests[i] = append(m.requests[i], m.requestsVec.WithLabelValues(proto, dns.TypeToString[t]))
		}
		m.requests[i] = append(m.requests[i], m.requestsVec.WithLabelValues(proto, "other"))
	}
	for _, rc := range metricRcodes {
		m.responses = append(m.responses, m.responsesVec.WithLabelValues(dns.RcodeToString[rc]))
	}
	m.responses = append(m.responses, m.responsesVec.WithLabelValues("other"))
	m.forwarded = map[string]prometheus.Counter{}
	for _, r := range []string{forwardAnswered, forwardFailed, forwardRejected} {
		m.forwarded[r] = m.forwardedVec.WithLabelValues(r)
	}
	m.answerBy = map[string]prometheus.Counter{}
	for _, r := range []string{resultAnswer, resultNoData, resultNXDomain, resultFallthrough, "mdns_" + resultAnswer, "mdns_" + resultNXDomain} {
		m.answerBy[r] = m.answers.WithLabelValues(r)
	}
	return m
}

func (m *metrics) request(tcp bool, qtype uint16) prometheus.Counter {
	i := 0
	if tcp {
		i = 1
	}
	for j, t := range metricQtypes {
		if t == qtype {
			return m.requests[i][j]
		}
	}
	return m.requests[i][len(metricQtypes)]
}

func (m *metrics) response(rcode int) prometheus.Counter {
	for j, rc := range metricRcodes {
		if rc == rcode {
			return m.responses[j]
		}
	}
	return m.responses[len(metricRcodes)]
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requestsVec, m.responsesVec, m.duration, m.answers, m.upstreams, m.forwardedVec, m.changes, m.refusedClients, m.fastAnswers, m.forwardHits, m.forwardPrefetches, m.members, m.mdnsSent,
		m.mdnsRefused, m.mdnsSocketErrors, m.mdnsRebinds, m.mdnsMalformed}
}

// answer counts one cluster plugin outcome.
func (m *metrics) answer(result string) {
	if c, ok := m.answerBy[result]; ok {
		c.Inc()
	}
}

// refused is the counter of refused mDNS claims for reason.
func (m *metrics) refused(reason string) prometheus.Counter {
	if c, ok := m.mdnsRefusedBy[reason]; ok {
		return c
	}
	return m.mdnsRefused.WithLabelValues(reason)
}

// Outcomes of a forwarded query, the label of appliance_dns_forwarded_total.
const (
	forwardAnswered = "answered"
	forwardFailed   = "failed"
	forwardRejected = "rejected"
)

// forwardResult names the outcome of the forwarder's ServeDNS: it writes
// an upstream's reply itself and returns no error, or returns SERVFAIL with
// the last upstream's error when none replied, or another code for a query
// it will not send.
func forwardResult(rcode int, err error) string {
	switch {
	case err == nil:
		return forwardAnswered
	case rcode == dns.RcodeServerFailure:
		return forwardFailed
	}
	return forwardRejected
}
