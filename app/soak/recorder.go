package soak

import (
	"sync"
	"time"
)

// recorder keeps what the load and the monitors saw, for the report. Every
// API call and stream is kept (tens of thousands in half an hour); DNS and
// DHCP keep counts and what went wrong.
type recorder struct {
	mu      sync.Mutex
	calls   []call
	streams []stream

	dnsAsked int
	dnsBad   []dnsQuery // failed or wrong

	dhcp []dhcpEvent

	holders []holderChange
	samples []procSample
	// heldMismatch are times a node's appliance_vrrp_vip_held and its
	// kernel disagreed.
	heldMismatch []string
}

// add appends v to the recorder's list *to.
func add[T any](r *recorder, to *[]T, v T) {
	r.mu.Lock()
	*to = append(*to, v)
	r.mu.Unlock()
}

func (r *recorder) addCall(c call)            { add(r, &r.calls, c) }
func (r *recorder) addStream(s stream)        { add(r, &r.streams, s) }
func (r *recorder) addDHCP(e dhcpEvent)       { add(r, &r.dhcp, e) }
func (r *recorder) addHolders(h holderChange) { add(r, &r.holders, h) }
func (r *recorder) addSample(s procSample)    { add(r, &r.samples, s) }

func (r *recorder) addDNS(q dnsQuery) {
	r.mu.Lock()
	r.dnsAsked++
	if q.Err != "" || q.Wrong != "" {
		r.dnsBad = append(r.dnsBad, q)
	}
	r.mu.Unlock()
}

// counts are running totals for the live lines.
type counts struct {
	calls, failedCalls, streams, brokenStreams, dns, dnsBad, dhcp, dhcpBad int
}

func (r *recorder) counts(since time.Time) counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	var c counts
	for _, cl := range r.calls {
		if cl.Start.Before(since) {
			continue
		}
		c.calls++
		if !cl.ok() {
			c.failedCalls++
		}
	}
	for _, s := range r.streams {
		if s.Ended.Before(since) {
			continue
		}
		c.streams++
		if s.End != "eof" && s.End != "open" {
			c.brokenStreams++
		}
	}
	c.dns = r.dnsAsked
	c.dnsBad = len(r.dnsBad)
	for _, e := range r.dhcp {
		c.dhcp++
		if e.Err != "" || e.Violation != "" {
			c.dhcpBad++
		}
	}
	return c
}
