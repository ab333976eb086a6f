package soak

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// dnsQuery is a DNS question that failed or was answered wrongly.
type dnsQuery struct {
	At     time.Time `json:"at"`
	Server string    `json:"server"` // the node asked
	Name   string    `json:"name"`
	Type   string    `json:"type"`
	// Class is what kind of name: "cluster" (api, api-int, *.apps),
	// "node" (a configured or Kubernetes-known node name or its PTR),
	// "forwarded" (a name only the upstream servers know), "day2".
	Class string `json:"class"`
	Err   string `json:"err,omitempty"` // unanswered: timeout, SERVFAIL, ...
	// Wrong is an answer that breaks the invariant: a node name with
	// another address than the node's (a VIP, a stranger), a cluster name
	// without its VIP.
	Wrong string `json:"wrong,omitempty"`
}

// dnsLoad asks every live node's DNS every dnsEvery: the cluster's names,
// every node's name and PTR, a forwarded name never asked before (so the
// forward cache does not hide the upstreams), and the day-2 worker's name.
type dnsLoad struct {
	ctx   context.Context
	c     *cluster
	rec   *recorder
	every time.Duration
	seq   atomic.Uint64
	day2  *day2State
	wg    sync.WaitGroup
}

const dnsTimeout = 2 * time.Second

// day2State is what the DNS may answer for the day-2 worker's name: its
// Node exists since, or is gone since.
type day2State struct {
	mu      sync.Mutex
	name    string
	present bool
	since   time.Time
}

// day2Settle is how long after a Node is created or deleted every DNS
// must answer accordingly (the informers' watch).
const day2Settle = 10 * time.Second

func (d *day2State) set(name string, present bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.name, d.present, d.since = name, present, time.Now()
}

// want says whether the name must be answered (true), must not (false),
// or either (ok false) at now.
func (d *day2State) want(now time.Time) (name string, present, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.name == "" || now.Sub(d.since) < day2Settle {
		return d.name, false, false
	}
	return d.name, d.present, true
}

func (l *dnsLoad) run() {
	for _, nd := range l.c.nodes {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			r := newResolver(l.c.client, nd.addr())
			defer r.close()
			t := time.NewTicker(l.every)
			defer t.Stop()
			for {
				select {
				case <-l.ctx.Done():
					return
				case <-t.C:
				}
				if nd.isGone() {
					return
				}
				l.round(nd, r)
			}
		}()
	}
}

func (l *dnsLoad) wait() { l.wg.Wait() }

type dnsCase struct {
	name  string
	qtype uint16
	class string
	want  []string // the exact answer set; nil: the name must not exist
	// also are answers that may come beside want: a node's bare host
	// name in its PTR (a hosts file lists it beside the full name).
	also []string
}

// matches reports whether got is want, plus any of also.
func (c dnsCase) matches(got []string) bool {
	for _, w := range c.want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	for _, g := range got {
		if !slices.Contains(c.want, g) && !slices.Contains(c.also, g) {
			return false
		}
	}
	return true
}

// cases is one round's questions.
func (l *dnsLoad) cases(now time.Time) []dnsCase {
	var cs []dnsCase
	d := "." + Domain + "."
	cs = append(cs,
		dnsCase{"api" + d, dns.TypeA, "cluster", []string{apiVIP.String()}, nil},
		dnsCase{"api-int" + d, dns.TypeA, "cluster", []string{apiVIP.String()}, nil},
		dnsCase{fmt.Sprintf("console-%d.apps%s", l.seq.Load()%7, d), dns.TypeA, "cluster", []string{ingressVIP.String()}, nil})
	for _, nd := range l.c.nodes {
		cs = append(cs, dnsCase{nd.name + d, dns.TypeA, "node", []string{nd.addr().String()}, nil})
		rev, _ := dns.ReverseAddr(nd.addr().String())
		cs = append(cs, dnsCase{rev, dns.TypePTR, "node", []string{nd.name + d}, []string{nd.name + "."}})
	}
	cs = append(cs, dnsCase{fmt.Sprintf("q%d.%s", l.seq.Add(1), upstreamZone), dns.TypeA, "forwarded", []string{forwardedA.String()}, nil})
	if name, present, ok := l.day2.want(now); ok {
		c := dnsCase{name + d, dns.TypeA, "day2", nil, nil}
		if present {
			c.want = []string{day2IP.String()}
		}
		cs = append(cs, c)
	}
	return cs
}

func (l *dnsLoad) round(nd *node, r *resolver) {
	now := time.Now()
	for _, c := range l.cases(now) {
		q := new(dns.Msg)
		q.SetQuestion(c.name, c.qtype)
		at := time.Now()
		m, err := r.ask(q, dnsTimeout)
		res := dnsQuery{At: at, Server: nd.name, Name: c.name, Type: dns.TypeToString[c.qtype], Class: c.class}
		switch {
		case err != nil:
			res.Err = err.Error()
		case m.Rcode == dns.RcodeNameError || (m.Rcode == dns.RcodeSuccess && len(answers(m)) == 0):
			if c.want != nil {
				// A name that exists answered as unknown: availability
				// for the day-2 worker (its source may be down), an
				// error otherwise.
				if c.class == "day2" {
					res.Err = "not known yet: " + dns.RcodeToString[m.Rcode]
				} else {
					res.Wrong = "no such name (" + dns.RcodeToString[m.Rcode] + ")"
				}
			}
		case m.Rcode != dns.RcodeSuccess:
			res.Err = dns.RcodeToString[m.Rcode]
		default:
			got := answers(m)
			if c.want == nil {
				res.Err = "still known: " + strings.Join(got, " ")
				if c.class == "day2" && !slices.Equal(got, []string{day2IP.String()}) {
					res.Wrong = "answered " + strings.Join(got, " ")
				}
			} else if !c.matches(got) {
				res.Wrong = fmt.Sprintf("answered %s, want %s", strings.Join(got, " "), strings.Join(c.want, " "))
			}
		}
		l.rec.addDNS(res)
		if l.ctx.Err() != nil {
			return
		}
	}
}

// answers are the A and PTR answers of m, sorted.
func answers(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch v := rr.(type) {
		case *dns.A:
			if a, ok := netip.AddrFromSlice(v.A); ok {
				out = append(out, a.Unmap().String())
			}
		case *dns.PTR:
			out = append(out, strings.ToLower(v.Ptr))
		}
	}
	slices.Sort(out)
	return out
}
