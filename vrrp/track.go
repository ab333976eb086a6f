package vrrp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"appliance/internal/health"
)

// Tracking defaults, applied by NewTrackSet to zero fields.
const (
	DefaultTrackInterval = time.Second
	DefaultTrackRise     = 2
	DefaultTrackFall     = 2
	// MaxTrackWeight bounds |Weight|: VRRP priorities span 1..254, so a larger
	// weight cannot mean anything more (keepalived uses the same bound).
	MaxTrackWeight = 253
)

// Probe checks one thing the node needs to serve its VIPs. It returns nil
// when healthy. It must return soon after ctx ends.
type Probe interface {
	Probe(ctx context.Context) error
}

// FuncProbe adapts a function to Probe, so another component (the load
// balancer's readiness) can be tracked without this package knowing it.
type FuncProbe func(ctx context.Context) error

// Probe calls f.
func (f FuncProbe) Probe(ctx context.Context) error { return f(ctx) }

// HTTPProbe is healthy when a GET of URL answers with the expected status.
// It is a health.HTTPCheck, the same check the load balancer runs on its
// backends: redirects are not followed, every probe opens a new connection
// so a server that died behind an open connection is noticed, the body is
// drained (up to 64 KiB) and closed, and environment proxies are ignored.
type HTTPProbe struct {
	URL string
	// ExpectStatus is the status code that means healthy; 0 accepts any 2xx.
	ExpectStatus int
	// InsecureSkipVerify skips TLS certificate verification. Health is about
	// whether the server answers, not who it is: kube-apiserver's /readyz is
	// checked this way because its serving CA is not ours.
	InsecureSkipVerify bool
	// Timeout bounds one probe; 0 leaves it to ctx (TrackSpec.Timeout).
	Timeout time.Duration
	// Client replaces the default client; InsecureSkipVerify is then ignored.
	// Requests still ask for the connection to be closed, and redirects are
	// still not followed.
	Client *http.Client
}

// Probe implements Probe.
func (p HTTPProbe) Probe(ctx context.Context) error {
	return health.HTTPCheck{
		URL:                p.URL,
		ExpectStatus:       p.ExpectStatus,
		InsecureSkipVerify: p.InsecureSkipVerify,
		Timeout:            p.Timeout,
		UserAgent:          "appliance-vrrp-track",
		Client:             p.Client,
	}.Do(ctx)
}

// TCPProbe is healthy when a TCP connection to Addr (host:port) opens.
type TCPProbe struct {
	Addr string
	// Timeout bounds one connect; 0 leaves it to ctx (TrackSpec.Timeout).
	Timeout time.Duration
}

// Probe implements Probe.
func (p TCPProbe) Probe(ctx context.Context) error {
	d := net.Dialer{Timeout: p.Timeout}
	c, err := d.DialContext(ctx, "tcp", p.Addr)
	if err != nil {
		return err // *net.OpError names the address
	}
	_ = c.Close()
	return nil
}

// TrackSpec describes one weighted check. Weight follows keepalived's
// meaning so existing configurations translate one to one: a positive weight
// is added to the base priority while the check is healthy, a negative one
// is subtracted while it fails, and weight 0 puts the instance in FAULT while
// the check fails.
type TrackSpec struct {
	Name     string
	Probe    Probe
	Interval time.Duration // between probes; 0: DefaultTrackInterval
	Timeout  time.Duration // per probe; 0: Interval
	Rise     int           // consecutive successes to become healthy; 0: DefaultTrackRise
	Fall     int           // consecutive failures to become unhealthy; 0: DefaultTrackFall
	Weight   int           // -MaxTrackWeight..MaxTrackWeight
}

// TrackResult is the current view of one check.
type TrackResult struct {
	Name    string    `json:"name"`
	Healthy bool      `json:"healthy"`
	Weight  int       `json:"weight"`
	Err     string    `json:"err,omitempty"` // the latest probe's error; empty when it succeeded
	Since   time.Time `json:"since"`         // when Healthy took its current value
}

type trackState struct {
	spec TrackSpec
	// h starts Down and needs Rise successes: a node must not claim more
	// priority (or leave FAULT) before its checks have shown it can serve.
	h     health.Hysteresis
	err   string
	since time.Time
}

func (t *trackState) healthy() bool { return t.h.State() == health.Up }

// TrackSet runs a set of checks and folds them into an effective priority.
// A nil or empty TrackSet adjusts nothing. Its methods are safe for
// concurrent use.
type TrackSet struct {
	mu      sync.Mutex
	tracks  []trackState
	running atomic.Bool
}

// NewTrackSet validates specs, fills in defaults and returns the set with
// every check unhealthy.
func NewTrackSet(specs []TrackSpec) (*TrackSet, error) {
	s := &TrackSet{tracks: make([]trackState, 0, len(specs))}
	seen := make(map[string]bool, len(specs))
	now := time.Now()
	for i, sp := range specs {
		bad := func(format string, args ...any) error {
			name := sp.Name
			if name == "" {
				name = "#" + strconv.Itoa(i)
			}
			return fmt.Errorf("vrrp: track %s: %s", name, fmt.Sprintf(format, args...))
		}
		switch {
		case sp.Name == "":
			return nil, bad("name is empty")
		case seen[sp.Name]:
			return nil, bad("defined twice; names must be unique")
		case sp.Probe == nil:
			return nil, bad("no probe")
		case sp.Interval < 0:
			return nil, bad("interval %s is negative", sp.Interval)
		case sp.Timeout < 0:
			return nil, bad("timeout %s is negative", sp.Timeout)
		case sp.Rise < 0:
			return nil, bad("rise %d must be at least 1", sp.Rise)
		case sp.Fall < 0:
			return nil, bad("fall %d must be at least 1", sp.Fall)
		case sp.Weight < -MaxTrackWeight || sp.Weight > MaxTrackWeight:
			return nil, bad("weight %d is outside -%d..%d", sp.Weight, MaxTrackWeight, MaxTrackWeight)
		}
		seen[sp.Name] = true
		if sp.Interval == 0 {
			sp.Interval = DefaultTrackInterval
		}
		if sp.Timeout == 0 {
			sp.Timeout = sp.Interval
		}
		if sp.Rise == 0 {
			sp.Rise = DefaultTrackRise
		}
		if sp.Fall == 0 {
			sp.Fall = DefaultTrackFall
		}
		s.tracks = append(s.tracks, trackState{
			spec:  sp,
			h:     health.NewHysteresis(sp.Rise, sp.Fall, health.Down),
			err:   "not checked yet",
			since: now,
		})
	}
	return s, nil
}

// Run probes every check on its interval, one goroutine per check, until ctx
// ends, then returns nil. onChange (may be nil) is called whenever a check's
// Healthy flips; calls come from one goroutine of their own, never
// concurrently, and flips that happen while onChange runs are coalesced into
// one more call, so a slow onChange delays notifications but never probes.
// onChange should read Adjust and Results. A TrackSet runs at most once at a
// time.
func (s *TrackSet) Run(ctx context.Context, onChange func()) error {
	if s == nil || len(s.tracks) == 0 {
		<-ctx.Done()
		return nil
	}
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("vrrp: track set is already running")
	}
	defer s.running.Store(false)

	notify := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for i := range s.tracks {
		wg.Go(func() { s.loop(ctx, i, notify) })
	}
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-notify:
				if onChange != nil {
					onChange()
				}
			}
		}
	})
	wg.Wait()
	return nil
}

func (s *TrackSet) loop(ctx context.Context, i int, notify chan<- struct{}) {
	s.mu.Lock()
	spec := s.tracks[i].spec
	s.mu.Unlock()
	t := time.NewTicker(spec.Interval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, spec.Timeout)
		err := spec.Probe.Probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return // a probe cut short by shutdown says nothing about health
		}
		if s.record(i, err, time.Now()) {
			select {
			case notify <- struct{}{}:
			default: // a notification is already pending
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// record stores one probe outcome and reports whether Healthy flipped.
func (s *TrackSet) record(i int, err error, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &s.tracks[i]
	t.err = ""
	if err != nil {
		t.err = err.Error()
	}
	if !t.h.Observe(err == nil) {
		return false
	}
	t.since = now
	return true
}

// Adjust returns the effective priority for base: base plus the weights of
// healthy checks with weight > 0, minus |weight| of failing checks with
// weight < 0, clamped to 1..254 so tracking can neither make a router the
// address owner nor make it send priority 0 (which means "master leaving").
// A base of 255 (address owner) is returned unchanged. fault is true when a
// check with weight 0 is failing.
func (s *TrackSet) Adjust(base uint8) (prio uint8, fault bool) {
	if base == 255 {
		return 255, s.fault()
	}
	var rs []TrackResult
	if s != nil {
		s.mu.Lock()
		rs = make([]TrackResult, len(s.tracks))
		for i, t := range s.tracks {
			rs[i] = TrackResult{Weight: t.spec.Weight, Healthy: t.healthy()}
		}
		s.mu.Unlock()
	}
	return Effective(base, rs)
}

// Effective is the priority a router of base priority advertises with
// tracks in the given health, and whether it is in FAULT, by keepalived's
// rules: a positive weight is added while healthy, a negative one while
// failing, a failing weight-0 track means FAULT; the result stays within
// 1..254 (255, the address owner, is never adjusted). It is what Adjust
// applies, for callers that reason about priorities without running checks.
func Effective(base uint8, tracks []TrackResult) (prio uint8, fault bool) {
	p := int(base)
	for _, t := range tracks {
		switch w := t.Weight; {
		case w > 0 && t.Healthy:
			p += w
		case w < 0 && !t.Healthy:
			p += w
		case w == 0 && !t.Healthy:
			fault = true
		}
	}
	if base == 255 {
		return 255, fault
	}
	return uint8(min(max(p, 1), 254)), fault
}

func (s *TrackSet) fault() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tracks {
		if t.spec.Weight == 0 && !t.healthy() {
			return true
		}
	}
	return false
}

// Results returns the state of every check, in the order of the specs.
func (s *TrackSet) Results() []TrackResult {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TrackResult, len(s.tracks))
	for i, t := range s.tracks {
		out[i] = TrackResult{Name: t.spec.Name, Healthy: t.healthy(), Weight: t.spec.Weight, Err: t.err, Since: t.since}
	}
	return out
}

// ParseTrackFlag parses the value of --track-http (kind "http": URL:WEIGHT)
// or --track-tcp (kind "tcp": HOST:PORT:WEIGHT). The weight is always
// required and is split off at the last colon, so URLs and IPv6 literals
// keep theirs: "https://[::1]:6443/readyz:-50". An https URL is probed
// without certificate verification (see HTTPProbe.InsecureSkipVerify). The
// spec's Name is the target without the weight; other fields are left to
// NewTrackSet's defaults.
func ParseTrackFlag(kind, s string) (TrackSpec, error) {
	var form, example string
	switch kind {
	case "http":
		form, example = "URL:WEIGHT", "https://127.0.0.1:6443/readyz:-50"
	case "tcp":
		form, example = "HOST:PORT:WEIGHT", "127.0.0.1:9445:-20"
	default:
		return TrackSpec{}, fmt.Errorf("vrrp: track kind %q: want http or tcp", kind)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("vrrp: --track-%s %q: %s (want %s, e.g. %s)", kind, s, fmt.Sprintf(format, args...), form, example)
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return TrackSpec{}, bad("no weight")
	}
	target, ws := s[:i], s[i+1:]
	w, err := strconv.Atoi(ws)
	if err != nil {
		return TrackSpec{}, bad("weight %q is not an integer", ws)
	}
	if w < -MaxTrackWeight || w > MaxTrackWeight {
		return TrackSpec{}, bad("weight %d is outside -%d..%d", w, MaxTrackWeight, MaxTrackWeight)
	}
	spec := TrackSpec{Name: target, Weight: w}
	switch kind {
	case "http":
		u, err := url.Parse(target)
		switch {
		case err != nil:
			return TrackSpec{}, bad("URL %q: %v", target, err)
		case u.Scheme != "http" && u.Scheme != "https":
			return TrackSpec{}, bad("URL %q: scheme must be http or https", target)
		case u.Host == "":
			return TrackSpec{}, bad("URL %q has no host", target)
		}
		spec.Probe = HTTPProbe{URL: target, InsecureSkipVerify: u.Scheme == "https"}
	case "tcp":
		host, port, err := net.SplitHostPort(target)
		if err != nil {
			return TrackSpec{}, bad("address %q: %v", target, err)
		}
		if host == "" {
			return TrackSpec{}, bad("address %q has no host", target)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return TrackSpec{}, bad("port %q is not 1..65535", port)
		}
		spec.Probe = TCPProbe{Addr: target}
	}
	return spec, nil
}
