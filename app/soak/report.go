package soak

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Bounds the invariants hold the cluster to.
const (
	// plannedGap is how long a VIP may have no holder in a planned move
	// (a priority-0 handover waits the backup's skew: tens of ms), and
	// plannedOverlap how long two nodes may hold it (a preemption: the old
	// master steps back on the new one's first advert).
	plannedGap, plannedOverlap = time.Second, time.Second
	// recoveryBound is how long after an unplanned fault ends its outage
	// may last: the appliance's start, Master_Down, the LB's checks (4.5 s
	// when every probe hangs), with room for a loaded machine.
	recoveryBound = 15 * time.Second
	// unplannedGapBound is how long a VIP may have no holder while a node
	// that may hold it is hit by no fault: Master_Down (about 0.35 s at the
	// lab's 100 ms adverts) with room for a loaded machine. A longer gap
	// means that node did not take over when it should have.
	unplannedGapBound = 3 * time.Second
)

// Slope bounds: a process's growth over the soak, per hour, above which it
// leaks. A leak of one goroutine or descriptor per fault (about 250 an
// hour) or of a kilobyte per API call (25 a second: 90 MB an hour) is far
// above them; the steady churn of connections and GC is far below, once a
// process has run long enough to judge (slopeMinSpan, after its first
// slopeWarmup).
const (
	slopeMaxGoroutines = 60.0 // per hour
	slopeMaxFDs        = 60.0 // per hour
	slopeMaxRSSMiB     = 32.0 // MiB per hour
	// slopeNoiseGoroutines and slopeNoiseFDs are the growth over the
	// judged span below which no slope counts: at any instant a few DNS
	// exchanges, scrapes, upstream and Kubernetes connections are under
	// way, so two samples differ by that much with nothing leaking. Over
	// 30 minutes the rate bounds are the tighter ones; over 3 these.
	slopeNoiseGoroutines = 20.0
	slopeNoiseFDs        = 10.0
	slopeWarmup          = time.Minute
	slopeMinSpan         = 90 * time.Second
	// slopeMinSpanRSS is longer: the heap's level settles slowly (GC
	// pacing, the scavenger), and a few minutes of it say nothing.
	slopeMinSpanRSS = 10 * time.Minute
)

// tailOf is how long after a fault of kind ends it may still explain a
// failure: its recovery.
func tailOf(k Kind) time.Duration {
	switch k {
	case KindKubeRestart:
		return 40 * time.Second // the informers' relist backs off
	case KindSigtermHolder, KindBootstrapTeardown:
		return 20 * time.Second
	}
	return recoveryBound
}

// Report is what a soak found. Passed is true only when every invariant
// held.
type Report struct {
	Seed        uint64        `json:"seed"`
	Duration    time.Duration `json:"duration"`
	Stack       string        `json:"stack"`
	Kube        string        `json:"kube"`
	Started     time.Time     `json:"started"`
	Interrupted bool          `json:"interrupted,omitempty"`

	Faults []*faultRun `json:"faults"`

	Calls                int       `json:"calls"`
	FailedCalls          int       `json:"failed_calls"`
	UnattributedFailures int       `json:"unattributed_failures"`
	Failures             []failure `json:"failures,omitempty"` // every failed call, with its fault

	Streams streamTotals `json:"streams"`
	DNS     dnsTotals    `json:"dns"`
	DHCP    dhcpTotals   `json:"dhcp"`

	Invariants []invariant `json:"invariants"`
	Slopes     []slope     `json:"slopes"`

	Passed bool   `json:"passed"`
	Logs   string `json:"logs"`
}

type failure struct {
	At    time.Time `json:"at"`
	Err   string    `json:"err"`
	Fault int       `json:"fault,omitempty"` // 0: no fault explains it
}

type streamTotals struct {
	Opened       int            `json:"opened"`
	Ends         map[string]int `json:"ends"`
	Unattributed []stream       `json:"unattributed,omitempty"` // broken with no unplanned fault to explain it
}

type dnsTotals struct {
	Queries      int        `json:"queries"`
	Failed       int        `json:"failed"`
	Wrong        []dnsQuery `json:"wrong,omitempty"`
	Unattributed []dnsQuery `json:"unattributed,omitempty"`
}

type dhcpTotals struct {
	Exchanges    int         `json:"exchanges"`
	Failed       int         `json:"failed"`
	Violations   []dhcpEvent `json:"violations,omitempty"`
	Unattributed []dhcpEvent `json:"unattributed,omitempty"`
}

type invariant struct {
	// Key names the invariant for programs (compare) whatever its Name's
	// wording; Name is for people.
	Key  string `json:"key,omitempty"`
	Name string `json:"name"`
	Held bool   `json:"held"`
	// NA says why the invariant does not apply to the stack (it has no
	// DHCP server, no such metric); it then holds trivially.
	NA         string   `json:"not_applicable,omitempty"`
	Checks     int      `json:"checks"`
	Violations []string `json:"violations,omitempty"`
}

type slope struct {
	Node          string        `json:"node"`
	Pid           int           `json:"pid"`
	Span          time.Duration `json:"span"`
	Samples       int           `json:"samples"`
	RSSMiBPerHour float64       `json:"rss_mib_per_hour"`
	GoroutinesPH  float64       `json:"goroutines_per_hour"`
	FDsPerHour    float64       `json:"fds_per_hour"`
	First, Last   procSample    `json:"-"`
	Verdict       string        `json:"verdict"` // "flat", "leak: ...", "too short to judge ..."
}

// explains reports whether fault r may explain a failure of class for
// target (a node's name, or "" for the API).
func (s *soak) explains(r *faultRun, class, target string) bool {
	if r.Skipped != "" || r.Start.IsZero() {
		return false
	}
	nd := s.c.node(r.Node)
	cp := nd != nil && nd.controlPlane()
	onTarget := r.Node == target
	switch r.Kind {
	case KindKill9, KindLinkFlap, KindPacketLoss, KindBrEx:
		switch class {
		case "api", "stream", "api-gap", "dhcp":
			return cp || (class == "dhcp" && onTarget)
		case "ingress-gap":
			return nd != nil && nd.role != roleBootstrap
		case "dual":
			return true
		case "dns", "dns-forwarded", "day2":
			return onTarget
		}
	case KindVIPDelete:
		switch class {
		case "api", "stream", "api-gap", "dhcp":
			return strings.HasPrefix(r.Note, "API")
		case "ingress-gap":
			return strings.HasPrefix(r.Note, "ingress")
		}
	case KindNftFlush, KindAPIServerKill:
		return class == "api" || class == "stream"
	case KindSigtermHolder, KindBootstrapTeardown:
		// Planned: the node's own DNS and DHCP restart, its streams end
		// cleanly; no call may fail.
		return (class == "dns" || class == "dns-forwarded" || class == "day2") && onTarget || class == "dhcp"
	case KindUpstreamBlackhole:
		return class == "dns-forwarded"
	case KindKubeRestart:
		return class == "day2"
	}
	return false
}

// window is the time a fault may explain failures in.
func window(r *faultRun) (time.Time, time.Time) {
	return r.Start.Add(-500 * time.Millisecond), r.End.Add(tailOf(r.Kind))
}

// attribute finds the first fault explaining a failure of class for
// target between from and to.
func (s *soak) attribute(runs []*faultRun, class, target string, from, to time.Time) *faultRun {
	for _, r := range runs {
		a, b := window(r)
		if to.Before(a) || from.After(b) {
			continue
		}
		if s.explains(r, class, target) {
			return r
		}
	}
	return nil
}

// analyse turns what was recorded into the report.
func (s *soak) analyse(inj *injector, loadEnd time.Time) *Report {
	rec := s.rec
	rec.mu.Lock()
	defer rec.mu.Unlock()
	inj.mu.Lock()
	runs := append([]*faultRun(nil), inj.runs...)
	inj.mu.Unlock()
	sort.Slice(runs, func(i, j int) bool { return runs[i].ID < runs[j].ID })
	rep := &Report{Seed: s.o.Seed, Duration: s.o.Duration, Stack: s.c.svc.name(), Started: s.loadStart, Faults: runs}

	// API calls: every failure explained, each fault's longest outage.
	calls := rec.calls
	sort.Slice(calls, func(i, j int) bool { return calls[i].Start.Before(calls[j].Start) })
	rep.Calls = len(calls)
	var outStart time.Time
	closeOutage := func(end time.Time) {
		for _, r := range runs {
			a, b := window(r)
			if r.Skipped == "" && !end.Before(a) && !outStart.After(b) {
				r.APIOutage = max(r.APIOutage, end.Sub(outStart))
			}
		}
		outStart = time.Time{}
	}
	for _, cl := range calls {
		if cl.ok() {
			if !outStart.IsZero() {
				closeOutage(cl.Start)
			}
			continue
		}
		rep.FailedCalls++
		f := failure{At: cl.Start, Err: cl.Stage + ": " + cl.Err}
		if r := s.attribute(runs, "api", "", cl.Start, cl.End); r != nil {
			f.Fault = r.ID
			r.FailedCalls++
		} else {
			rep.UnattributedFailures++
		}
		rep.Failures = append(rep.Failures, f)
		if outStart.IsZero() {
			outStart = cl.Start
		}
	}
	if !outStart.IsZero() {
		closeOutage(loadEnd)
	}
	callInv := invariant{Name: "every failed API call is in flight on a node a fault hit", Checks: rep.Calls}
	for _, f := range rep.Failures {
		if f.Fault == 0 && len(callInv.Violations) < 50 {
			callInv.Violations = append(callInv.Violations, fmt.Sprintf("%s %s", s.at(f.At), f.Err))
		}
	}

	// Streams: an end other than a clean one needs an unplanned fault.
	rep.Streams.Ends = map[string]int{}
	streamInv := invariant{Name: "no stream is reset, stalled or cut but by an unplanned fault (a planned move ends them cleanly)"}
	for _, st := range rec.streams {
		rep.Streams.Opened++
		rep.Streams.Ends[st.End]++
		streamInv.Checks++
		if st.End == "eof" || st.End == "open" {
			continue
		}
		if r := s.attribute(runs, "stream", "", st.Opened, st.Ended); r != nil {
			r.BrokenStrms++
			continue
		}
		rep.Streams.Unattributed = append(rep.Streams.Unattributed, st)
		streamInv.Violations = append(streamInv.Violations, fmt.Sprintf("stream %d (%s, opened %s) ended %s at %s: %s",
			st.ID, st.Node, s.at(st.Opened), st.End, s.at(st.Ended), st.Err))
	}

	// DNS: wrong answers never; failures explained.
	rep.DNS.Queries = rec.dnsAsked
	dnsWrong := invariant{Name: "every configured and Kubernetes-known name answers with its node's address only, cluster names with their VIP", Checks: rec.dnsAsked}
	dnsUp := invariant{Name: "every live node's DNS answers but while a fault hits it (or the upstreams, for forwarded names)", Checks: rec.dnsAsked}
	for _, q := range rec.dnsBad {
		if q.Wrong != "" {
			rep.DNS.Wrong = append(rep.DNS.Wrong, q)
			if len(dnsWrong.Violations) < 50 {
				dnsWrong.Violations = append(dnsWrong.Violations, fmt.Sprintf("%s %s asked %s %s: %s", s.at(q.At), q.Server, q.Name, q.Type, q.Wrong))
			}
			continue
		}
		rep.DNS.Failed++
		class := "dns"
		switch q.Class {
		case "forwarded":
			class = "dns-forwarded"
		case "day2":
			class = "day2"
		}
		if r := s.attribute(runs, class, q.Server, q.At, q.At.Add(dnsTimeout)); r != nil {
			r.DNSFailures++
			continue
		}
		rep.DNS.Unattributed = append(rep.DNS.Unattributed, q)
		if len(dnsUp.Violations) < 50 {
			dnsUp.Violations = append(dnsUp.Violations, fmt.Sprintf("%s %s asked %s %s: %s", s.at(q.At), q.Server, q.Name, q.Type, q.Err))
		}
	}

	// DHCP.
	dhcpInv := invariant{Name: "DHCP gives no reserved address to another MAC and loses no acknowledged lease"}
	dhcpUp := invariant{Name: "DHCP answers every client but while a fault explains it", Checks: len(rec.dhcp)}
	for _, e := range rec.dhcp {
		rep.DHCP.Exchanges++
		dhcpInv.Checks++
		if e.Violation != "" {
			rep.DHCP.Violations = append(rep.DHCP.Violations, e)
			dhcpInv.Violations = append(dhcpInv.Violations, fmt.Sprintf("%s %s (%s) %s: %s", s.at(e.At), e.Client, e.MAC, e.Op, e.Violation))
		}
		if e.Err != "" && e.Violation == "" {
			rep.DHCP.Failed++
			target := e.Client
			if s.attribute(runs, "dhcp", target, e.At, e.At.Add(10*time.Second)) == nil {
				rep.DHCP.Unattributed = append(rep.DHCP.Unattributed, e)
				dhcpUp.Violations = append(dhcpUp.Violations, fmt.Sprintf("%s %s (%s) %s: %s", s.at(e.At), e.Client, e.MAC, e.Op, e.Err))
			}
		}
	}

	// VIP holders.
	single, present := s.holderInvariants(runs, loadEnd)

	// Each fault's outage is bounded.
	bounded := invariant{Name: "each fault's outage is bounded: none for a planned one, its duration and " + recoveryBound.String() + " for an unplanned one"}
	for _, r := range runs {
		if r.Skipped != "" || r.Start.IsZero() {
			continue
		}
		bounded.Checks++
		limit := r.End.Sub(r.Start) + recoveryBound
		switch {
		case r.Planned && r.FailedCalls > 0:
			bounded.Violations = append(bounded.Violations, fmt.Sprintf("#%d %s on %s (planned) failed %d calls", r.ID, r.Kind, r.Node, r.FailedCalls))
		case !r.Planned && (r.APIOutage > limit || r.VIPGap > limit || r.IngressGap > limit):
			bounded.Violations = append(bounded.Violations, fmt.Sprintf("#%d %s on %s: API outage %s, API VIP gap %s, ingress VIP gap %s; bound %s",
				r.ID, r.Kind, r.Node, r.APIOutage.Round(time.Millisecond), r.VIPGap.Round(time.Millisecond), r.IngressGap.Round(time.Millisecond), limit))
		}
		if r.Err != "" {
			bounded.Violations = append(bounded.Violations, fmt.Sprintf("#%d %s could not be injected: %s", r.ID, r.Kind, r.Err))
		}
	}

	held := invariant{Name: "appliance_vrrp_vip_held agrees with the kernel", Checks: len(rec.samples), Violations: rec.heldMismatch}
	if !s.c.svc.metrics() {
		held = invariant{Name: held.Name, NA: "the stack exports no such metric"}
	}
	if !s.c.svc.dhcp() {
		dhcpInv = invariant{Name: dhcpInv.Name, NA: "the stack has no DHCP server"}
		dhcpUp = invariant{Name: dhcpUp.Name, NA: dhcpInv.NA}
	}
	slopes, slopeInv := slopes(rec.samples)
	rep.Slopes = slopes

	exits := s.c.unplannedExits()

	rep.Invariants = []invariant{single, present, callInv, streamInv, dnsWrong, dnsUp, dhcpInv, dhcpUp, bounded, held, slopeInv, exits}
	for i, k := range []string{"one-holder", "a-holder", "calls", "streams", "dns-right", "dns-up", "dhcp-right", "dhcp-up",
		"outage-bounded", "vip-held-metric", "slopes", "no-unplanned-exit"} {
		rep.Invariants[i].Key = k
	}
	rep.Passed = true
	for i := range rep.Invariants {
		rep.Invariants[i].Held = rep.Invariants[i].NA != "" || len(rep.Invariants[i].Violations) == 0
		rep.Passed = rep.Passed && rep.Invariants[i].Held
	}
	return rep
}

// at is a time as seconds since the load began, as the live lines say it.
func (s *soak) at(t time.Time) string {
	return fmt.Sprintf("%.3fs", t.Sub(s.loadStart).Seconds())
}

// holderInvariants checks the VIPs' holder timeline: never two holders
// beyond a planned overlap unless a fault explains it; a holder at every
// moment but for an unplanned fault's bounded gap; and each fault's gaps.
func (s *soak) holderInvariants(runs []*faultRun, loadEnd time.Time) (single, present invariant) {
	single = invariant{Name: "never two holders of a VIP beyond a planned move's overlap (" + plannedOverlap.String() + ") but while a fault explains it"}
	present = invariant{Name: "a holder for every VIP but for an unplanned fault's gap (a planned move: at most " + plannedGap.String() + ")"}
	byVIP := map[string][]holderChange{}
	for _, h := range s.rec.holders {
		byVIP[h.VIP] = append(byVIP[h.VIP], h)
	}
	for _, v := range vipNames {
		ch := byVIP[v.name]
		for i, h := range ch {
			end := loadEnd
			if i+1 < len(ch) {
				end = ch[i+1].At
			}
			d := end.Sub(h.At)
			switch len(h.Holders) {
			case 1:
				single.Checks++
				present.Checks++
			case 0:
				present.Checks++
				for _, r := range runs {
					a, b := window(r)
					if r.Skipped == "" && !end.Before(a) && !h.At.After(b) && s.explains(r, v.name+"-gap", "") {
						if v.name == "api" {
							r.VIPGap = max(r.VIPGap, d)
						} else {
							r.IngressGap = max(r.IngressGap, d)
						}
					}
				}
				switch {
				case d > plannedGap && s.attribute(runs, v.name+"-gap", "", h.At, end) == nil:
					present.Violations = append(present.Violations, fmt.Sprintf("%s VIP had no holder for %s from %s, with no unplanned fault to explain it",
						v.name, d.Round(time.Millisecond), s.at(h.At)))
				case d > unplannedGapBound:
					if idle := idleCandidate(s.candidates(v.name, runs, h.At), runs, h.At, end); idle != "" {
						present.Violations = append(present.Violations, fmt.Sprintf("%s VIP had no holder for %s from %s, though %s, hit by no fault, could hold it",
							v.name, d.Round(time.Millisecond), s.at(h.At), idle))
					}
				}
			default:
				single.Checks++
				if d > plannedOverlap && s.attribute(runs, "dual", "", h.At, end) == nil {
					single.Violations = append(single.Violations, fmt.Sprintf("%s VIP held by %s for %s from %s",
						v.name, strings.Join(h.Holders, "+"), d.Round(time.Millisecond), s.at(h.At)))
				}
			}
		}
	}
	return single, present
}

// candidates names the nodes that may hold VIP vip ("api" or "ingress")
// at a time: the masters, and the bootstrap until its teardown; the
// workers.
func (s *soak) candidates(vip string, runs []*faultRun, at time.Time) []string {
	var out []string
	if vip == "ingress" {
		for _, nd := range s.c.byRole(roleWorker) {
			out = append(out, nd.name)
		}
		return out
	}
	tornDown := slices.ContainsFunc(runs, func(r *faultRun) bool {
		return r.Kind == KindBootstrapTeardown && r.Skipped == "" && !r.Start.IsZero() && r.Start.Before(at)
	})
	for _, nd := range s.c.nodes {
		if nd.role == roleMaster || nd.role == roleBootstrap && !tornDown {
			out = append(out, nd.name)
		}
	}
	return out
}

// idleCandidate names a node of cands that no fault touched between from
// and to (a fault's window: its run and its recovery), "" when every one
// was: while one such node lives, a VIP must not stay without a holder
// longer than a Master_Down.
func idleCandidate(cands []string, runs []*faultRun, from, to time.Time) string {
	for _, c := range cands {
		hit := slices.ContainsFunc(runs, func(r *faultRun) bool {
			if r.Node != c || r.Skipped != "" || r.Start.IsZero() {
				return false
			}
			a, b := window(r)
			return !to.Before(a) && !from.After(b)
		})
		if !hit {
			return c
		}
	}
	return ""
}

// slopes fits a line to each process's samples after its warm-up.
func slopes(samples []procSample) ([]slope, invariant) {
	inv := invariant{Name: fmt.Sprintf("each service process's RSS (%.0f MiB/h), goroutines (%.0f/h, %.0f in all) and descriptors (%.0f/h, %.0f in all) stay flat",
		slopeMaxRSSMiB, slopeMaxGoroutines, slopeNoiseGoroutines, slopeMaxFDs, slopeNoiseFDs)}
	type key struct {
		node string
		pid  int
	}
	groups := map[key][]procSample{}
	var order []key
	for _, s := range samples {
		k := key{s.Node, s.Pid}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], s)
	}
	var out []slope
	for _, k := range order {
		ss := groups[k]
		var use []procSample
		for _, s := range ss {
			if s.At.Sub(s.Since) >= slopeWarmup {
				use = append(use, s)
			}
		}
		sl := slope{Node: k.node, Pid: k.pid, Samples: len(use)}
		if len(use) < 3 {
			sl.Verdict = "too short to judge"
			out = append(out, sl)
			continue
		}
		sl.First, sl.Last = use[0], use[len(use)-1]
		sl.Span = sl.Last.At.Sub(sl.First.At)
		x := make([]float64, len(use))
		for i, s := range use {
			x[i] = s.At.Sub(use[0].At).Hours()
		}
		fit := func(y func(procSample) float64) float64 {
			ys := make([]float64, len(use))
			for i, s := range use {
				ys[i] = y(s)
			}
			return lsSlope(x, ys)
		}
		sl.RSSMiBPerHour = fit(func(s procSample) float64 { return s.RSSKiB / 1024 })
		sl.GoroutinesPH = fit(func(s procSample) float64 { return s.Goroutines })
		sl.FDsPerHour = fit(procSample.otherFDs)
		inv.Checks++
		var bad []string
		if sl.Span < slopeMinSpan {
			sl.Verdict = fmt.Sprintf("too short to judge (%s of samples after its first %s)", sl.Span.Round(time.Second), slopeWarmup)
			out = append(out, sl)
			continue
		}
		grown := func(perHour float64) float64 { return perHour * sl.Span.Hours() }
		if sl.GoroutinesPH > slopeMaxGoroutines && grown(sl.GoroutinesPH) > slopeNoiseGoroutines {
			bad = append(bad, fmt.Sprintf("goroutines +%.0f/h (%.0f to %.0f)", sl.GoroutinesPH, sl.First.Goroutines, sl.Last.Goroutines))
		}
		if sl.FDsPerHour > slopeMaxFDs && grown(sl.FDsPerHour) > slopeNoiseFDs {
			bad = append(bad, fmt.Sprintf("descriptors but the LB's pipes and sessions +%.0f/h (%.0f to %.0f; all: %.0f to %.0f)",
				sl.FDsPerHour, sl.First.otherFDs(), sl.Last.otherFDs(), sl.First.FDs, sl.Last.FDs))
		}
		if sl.Span >= slopeMinSpanRSS && sl.RSSMiBPerHour > slopeMaxRSSMiB {
			bad = append(bad, fmt.Sprintf("RSS +%.1f MiB/h (%.1f to %.1f MiB)", sl.RSSMiBPerHour, sl.First.RSSKiB/1024, sl.Last.RSSKiB/1024))
		}
		switch {
		case len(bad) > 0:
			sl.Verdict = "leak: " + strings.Join(bad, ", ")
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s (pid %d, %s): %s", sl.Node, sl.Pid, sl.Span.Round(time.Second), sl.Verdict))
		case sl.Span < slopeMinSpanRSS:
			sl.Verdict = "flat (RSS: too short to judge)"
		default:
			sl.Verdict = "flat"
		}
		out = append(out, sl)
	}
	return out, inv
}

// lsSlope is the least-squares slope of y over x.
func lsSlope(x, y []float64) float64 {
	var sx, sy, sxx, sxy float64
	n := float64(len(x))
	for i := range x {
		sx += x[i]
		sy += y[i]
		sxx += x[i] * x[i]
		sxy += x[i] * y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// write writes report.json into dir and returns its path.
func (rep *Report) write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("soak: %w", err)
	}
	p := filepath.Join(dir, "report.json")
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return "", fmt.Errorf("soak: %w", err)
	}
	if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("soak: %w", err)
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return p, nil
}

// KindSummary is one row of the summary table: a kind's faults and the
// worst they cost.
type KindSummary struct {
	Kind          Kind
	Injected      int
	Skipped       int
	WorstOutage   time.Duration // API calls
	WorstVIPGap   time.Duration // API VIP, or the ingress VIP's for faults that hit it
	FailedCalls   int
	BrokenStreams int
	DNSFailures   int
}

// ByKind sums the faults by kind, in the schedule's order of kinds.
func (rep *Report) ByKind() []KindSummary {
	m := map[Kind]*KindSummary{}
	for _, r := range rep.Faults {
		k := m[r.Kind]
		if k == nil {
			k = &KindSummary{Kind: r.Kind}
			m[r.Kind] = k
		}
		if r.Skipped != "" {
			k.Skipped++
			continue
		}
		k.Injected++
		k.WorstOutage = max(k.WorstOutage, r.APIOutage)
		k.WorstVIPGap = max(k.WorstVIPGap, r.VIPGap, r.IngressGap)
		k.FailedCalls += r.FailedCalls
		k.BrokenStreams += r.BrokenStrms
		k.DNSFailures += r.DNSFailures
	}
	var out []KindSummary
	for _, k := range Kinds() {
		if m[k] != nil {
			out = append(out, *m[k])
		}
	}
	return out
}

// print writes the summary tables.
func (rep *Report) print(w io.Writer) {
	fmt.Fprintf(w, "\n=== Soak summary (seed %d, %s, %s)\n\n", rep.Seed, rep.Duration, rep.Stack)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tinjected\tskipped\tworst API outage\tworst VIP gap\tfailed calls\tbroken streams\tDNS failures")
	for _, k := range rep.ByKind() {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%d\t%d\n", k.Kind, k.Injected, k.Skipped, dur(k.WorstOutage), dur(k.WorstVIPGap),
			k.FailedCalls, k.BrokenStreams, k.DNSFailures)
	}
	tw.Flush()
	fmt.Fprintf(w, "\ncalls %d, failed %d, unattributed %d; streams %d %v; DNS %d, failed %d, wrong %d; DHCP %d, failed %d, violations %d\n",
		rep.Calls, rep.FailedCalls, rep.UnattributedFailures, rep.Streams.Opened, rep.Streams.Ends, rep.DNS.Queries, rep.DNS.Failed,
		len(rep.DNS.Wrong), rep.DHCP.Exchanges, rep.DHCP.Failed, len(rep.DHCP.Violations))
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "invariant\theld\tchecks\tfirst violation")
	for _, inv := range rep.Invariants {
		first := ""
		if len(inv.Violations) > 0 {
			first = fmt.Sprintf("%s (%d in all)", inv.Violations[0], len(inv.Violations))
		}
		held := yes(inv.Held)
		if inv.NA != "" {
			held, first = "n/a", inv.NA
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", inv.Name, held, inv.Checks, first)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "process\tpid\tjudged over\tRSS MiB/h\tgoroutines/h\tfds/h\tverdict")
	for _, sl := range rep.Slopes {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%+.1f\t%+.0f\t%+.0f\t%s\n", sl.Node, sl.Pid, sl.Span.Round(time.Second), sl.RSSMiBPerHour,
			sl.GoroutinesPH, sl.FDsPerHour, sl.Verdict)
	}
	tw.Flush()
	verdict := "PASSED: every invariant held"
	if !rep.Passed {
		verdict = "FAILED: an invariant broke"
		if rep.Interrupted {
			verdict = "INTERRUPTED"
		}
	}
	fmt.Fprintf(w, "\n%s\n", verdict)
}

func dur(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}
