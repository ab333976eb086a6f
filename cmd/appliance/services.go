package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"appliance/dhcp"
	"appliance/dnsserver"
	"appliance/internal/host"
	"appliance/internal/service"
	"appliance/lb"
	"appliance/vrrp"
)

// The adapters below give each service package's type the one contract
// service.Run starts and stops (the packages keep their typed Status for
// their own callers).

// newRegistry is the process's metrics registry with the Go and process
// collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// vips is the node's virtual routers as one service, "vips" in /status (the
// shape `appliance status` reads). It is ready while no instance is in INIT
// or FAULT.
type vips struct{ instances []*vrrp.Instance }

func vipService(cfgs []vrrp.Config, m *vrrp.Metrics, log *slog.Logger) (*vips, error) {
	v := &vips{}
	for _, c := range cfgs {
		in, err := vrrp.New(c, m, log, nil)
		if err != nil {
			return nil, err
		}
		v.instances = append(v.instances, in)
	}
	return v, nil
}

func (v *vips) Name() string { return "vips" }

func (v *vips) Run(ctx context.Context) error {
	eg, ctx := errgroup.WithContext(ctx)
	for _, in := range v.instances {
		eg.Go(func() error { return in.Run(ctx) })
	}
	return eg.Wait()
}

func (v *vips) Ready() error {
	for _, in := range v.instances {
		if s := in.Status(); s.State == vrrp.StateInit.String() || s.State == vrrp.StateFault.String() {
			return fmt.Errorf("%s is %s %s", s.Name, s.State, s.Fault)
		}
	}
	return nil
}

func (v *vips) Status() any {
	out := make([]vrrp.Status, 0, len(v.instances))
	for _, in := range v.instances {
		out = append(out, in.Status())
	}
	return out
}

// hostService runs the node's live view and calls moved whenever the
// interface holding the node's address changes from start to another one.
func hostService(h *host.Host, start string, moved func(*host.View)) service.Service {
	return service.Func{ID: "host",
		RunFunc: func(ctx context.Context) error {
			eg, ctx := errgroup.WithContext(ctx)
			eg.Go(func() error { return h.Run(ctx) })
			eg.Go(func() error {
				current := start
				for v := range h.Subscribe(ctx) {
					if v.Interface != "" && v.Interface != current {
						current = v.Interface
						moved(v)
					}
				}
				return nil
			})
			return eg.Wait()
		},
		StatusFn: func() any { return h.View() },
	}
}

func lbService(l *lb.LB) service.Service {
	return service.Func{ID: "lb", RunFunc: l.Run,
		ReadyFn:  func() error { return l.Ready(context.Background()) },
		StatusFn: func() any { return l.Status() }}
}

func dnsService(s *dnsserver.Server) service.Service {
	return service.Func{ID: "dns", RunFunc: s.Run, ReadyFn: s.Ready, StatusFn: func() any { return s.Status() }}
}

func dhcpService(s *dhcp.Server) service.Service {
	return service.Func{ID: "dhcp", RunFunc: s.Run, StatusFn: func() any { return s.Status() }}
}
