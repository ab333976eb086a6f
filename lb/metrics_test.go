package lb

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetrics(t *testing.T) {
	fc := newFakeCluster(t, 2)
	o := fastOptions(fc.port)
	o.MCS.Disabled = true
	reg := prometheus.NewRegistry()
	l, err := New(fc.cfg, fc.state, o, NewMetrics(reg), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, 5*time.Second, func() bool { return l.Pool(PoolAPI).Healthy() == 3 })
	c := fc.client(l.Addr(PoolAPI).String())
	for range 4 {
		if _, err := whoami(c); err != nil {
			t.Fatal(err)
		}
	}
	fc.masters[0].ready.Store(false)
	waitFor(t, 5*time.Second, func() bool { return l.Pool(PoolAPI).Healthy() == 2 })
	get := func() map[string]float64 { return gather(t, reg) }
	var m map[string]float64
	waitFor(t, 5*time.Second, func() bool {
		m = get()
		return m["appliance_lb_backend_bytes_total,backend=master-1,direction=out,pool=api"] > 0
	})
	checks := map[string]func(float64) bool{
		"appliance_lb_backend_state,backend=master-0,pool=api":                    func(v float64) bool { return v == float64(HealthDown) },
		"appliance_lb_backend_state,backend=master-1,pool=api":                    func(v float64) bool { return v == float64(HealthUp) },
		"appliance_lb_backend_checks_total,backend=master-0,pool=api,result=fail": func(v float64) bool { return v >= 3 },
		"appliance_lb_backend_checks_total,backend=master-1,pool=api,result=ok":   func(v float64) bool { return v >= 1 },
		"appliance_lb_backend_bytes_total,backend=master-1,direction=in,pool=api": func(v float64) bool { return v > 0 },
		"appliance_lb_backend_active_connections,backend=master-1,pool=api":       func(v float64) bool { return v == 0 },
		"appliance_lb_connections_total,pool=api,result=proxied":                  func(v float64) bool { return v == 4 },
		"appliance_lb_pool_healthy_backends,pool=api":                             func(v float64) bool { return v == 2 },
		"appliance_lb_redirect_repairs_total,kind=table":                          func(v float64) bool { return v == 0 },
		"appliance_lb_redirect_repairs_total,kind=chain":                          func(v float64) bool { return v == 0 },
		"appliance_lb_redirect_repairs_total,kind=rule":                           func(v float64) bool { return v == 0 },
	}
	for k, ok := range checks {
		v, found := m[k]
		if !found || !ok(v) {
			t.Errorf("%s = %v (present %v)", k, v, found)
		}
	}
}

// gather reads reg's series as "name,label=value,..." (labels sorted by
// name) to their values.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, lp := range m.GetLabel() {
				key += "," + lp.GetName() + "=" + lp.GetValue()
			}
			out[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return out
}
