package lb

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"appliance/internal/health"
)

// HealthOptions tune the health checks of a pool.
//
// With the defaults a backend that starts failing leaves the pool within
// Interval + Fall×Timeout + (Fall−1)×FastInterval = 1 + 3 + 0.5 = 4.5 s even
// when every probe hangs until its timeout, and within about 1.5 s when the
// probe fails at once (kube-apiserver answering /readyz with 500).
type HealthOptions struct {
	// Interval between checks while the backend's state is settled.
	Interval time.Duration
	// FastInterval between checks while a change is in progress (the last
	// result disagreed with the current state), so that Fall and Rise are
	// reached quickly once the first contrary result is seen.
	FastInterval time.Duration
	// Timeout of one probe (connect, TLS handshake and response).
	Timeout time.Duration
	// Fall consecutive failures mark an up backend down.
	Fall int
	// Rise consecutive successes mark a down backend up again.
	Rise int
	// SlowStart ramps the weight of a backend that comes back up from
	// nearly nothing to full over this long; 0 disables it.
	SlowStart time.Duration
	// KeepSessionsOnDown leaves established sessions of a backend that is
	// marked down alone; by default they are closed so clients reconnect
	// to a healthy backend at once instead of hanging on a dying one.
	KeepSessionsOnDown bool
	// DownGrace is how long the sessions of a backend marked down may
	// continue before they are closed: kube-apiserver fails /readyz while
	// it still serves, so a request in flight at that moment can finish
	// while long watches are moved off the dying server soon after.
	// 0 means the default (1 s); negative closes them at once.
	DownGrace time.Duration
}

func (h HealthOptions) closeOnDown() bool { return !h.KeepSessionsOnDown }

// DefaultHealthOptions are the defaults documented on HealthOptions.
func DefaultHealthOptions() HealthOptions {
	return HealthOptions{
		Interval:     time.Second,
		FastInterval: 250 * time.Millisecond,
		Timeout:      time.Second,
		Fall:         3,
		Rise:         3,
		SlowStart:    10 * time.Second,
		DownGrace:    time.Second,
	}
}

func (h *HealthOptions) fill() {
	d := DefaultHealthOptions()
	if h.Interval <= 0 {
		h.Interval = d.Interval
	}
	if h.FastInterval <= 0 {
		h.FastInterval = min(d.FastInterval, h.Interval)
	}
	if h.Timeout <= 0 {
		h.Timeout = d.Timeout
	}
	if h.Fall <= 0 {
		h.Fall = d.Fall
	}
	if h.Rise <= 0 {
		h.Rise = d.Rise
	}
	if h.DownGrace == 0 {
		h.DownGrace = d.DownGrace
	}
	if h.SlowStart < 0 {
		h.SlowStart = 0
	}
}

// RemovalBound is the longest a failing backend can stay in the pool.
func (h HealthOptions) RemovalBound() time.Duration {
	h.fill()
	return h.Interval + time.Duration(h.Fall)*h.Timeout + time.Duration(h.Fall-1)*h.FastInterval
}

// HealthState is a backend's health as decided by its checks: the state
// shared with VRRP tracking, so both count Fall and Rise the same way. Its
// values are those of the appliance_lb_backend_state gauge.
type HealthState = health.State

// Health states. A backend starts Unknown; its first check result decides
// Up or Down directly, so a starting LB does not wait for Rise checks.
const (
	HealthUnknown = health.Unknown
	HealthUp      = health.Up
	HealthDown    = health.Down
)

// newHysteresis is a backend's decision core: it starts Unknown so that the
// first result decides.
func (h HealthOptions) newHysteresis() health.Hysteresis {
	return health.NewHysteresis(h.Rise, h.Fall, HealthUnknown)
}

// next is how long to wait before the next probe of a backend in state hy:
// FastInterval while a change is in progress, so Fall and Rise are reached
// quickly.
func (h HealthOptions) next(hy *health.Hysteresis) time.Duration {
	if hy.Settling() {
		return h.FastInterval
	}
	return h.Interval
}

// slowStartWeight is the weight (1..full) of a backend up since upSince.
func slowStartWeight(full int, upSince, now time.Time, ramp time.Duration) int {
	if ramp <= 0 || upSince.IsZero() {
		return full
	}
	el := now.Sub(upSince)
	if el >= ramp {
		return full
	}
	if el < 0 {
		el = 0
	}
	return max(1, int(int64(full)*int64(el)/int64(ramp)))
}

// Prober checks one backend once; nil means healthy.
type Prober interface {
	Probe(ctx context.Context, addr string) error
}

// HTTPSProber GETs Path over TLS without verifying the certificate (the
// backend's serving CA is not ours to hold) and wants a 200. It is a
// health.HTTPCheck, the check VRRP tracking runs too: each probe uses a
// fresh connection so a backend that died behind a kept-alive connection
// is noticed, and redirects and environment proxies are not followed. The
// dial goes through Dial so that tests and namespaces can choose where it
// happens.
type HTTPSProber struct {
	Path string
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Probe implements Prober.
func (p *HTTPSProber) Probe(ctx context.Context, addr string) error {
	err := health.HTTPCheck{
		URL:                "https://" + addr + p.Path,
		ExpectStatus:       http.StatusOK,
		InsecureSkipVerify: true, // the backend's serving CA is not ours
		Dial:               p.Dial,
	}.Do(ctx)
	if err != nil {
		return fmt.Errorf("lb: probe: %w", err)
	}
	return nil
}
