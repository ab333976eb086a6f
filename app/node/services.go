package node

import (
	"context"
	"fmt"
	"log/slog"

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

// VIPs is the node's virtual routers as one service, "vips" in /status (the
// shape `appliance status` reads). It is ready while no instance is in INIT
// or FAULT.
type VIPs struct{ instances []*vrrp.Instance }

// NewVIPs builds one instance per config; onChange (may be nil) hears every
// instance's status changes.
func NewVIPs(cfgs []vrrp.Config, m *vrrp.Metrics, log *slog.Logger, onChange func(vrrp.Status)) (*VIPs, error) {
	v := &VIPs{}
	for _, c := range cfgs {
		in, err := vrrp.New(c, m, log, onChange)
		if err != nil {
			return nil, err
		}
		v.instances = append(v.instances, in)
	}
	return v, nil
}

// Instances are the virtual routers, e.g. to move them to another interface.
func (v *VIPs) Instances() []*vrrp.Instance { return v.instances }

// Name implements service.Service.
func (v *VIPs) Name() string { return "vips" }

// Run runs every instance until ctx ends or one fails.
func (v *VIPs) Run(ctx context.Context) error {
	eg, ctx := errgroup.WithContext(ctx)
	for _, in := range v.instances {
		eg.Go(func() error { return in.Run(ctx) })
	}
	return eg.Wait()
}

// Ready is nil while no instance is in INIT or FAULT. An instance in
// FAULT because a weight-0 track fails is doing its job (a master without a
// router leaves the ingress VIP to the workers) and does not count.
func (v *VIPs) Ready() error {
	for _, in := range v.instances {
		s := in.Status()
		if s.State == vrrp.StateFault.String() && s.Fault == vrrp.FaultTrack {
			continue
		}
		if s.State == vrrp.StateInit.String() || s.State == vrrp.StateFault.String() {
			return fmt.Errorf("%s is %s %s", s.Name, s.State, s.Fault)
		}
	}
	return nil
}

// Status lists the instances' status.
func (v *VIPs) Status() any {
	out := make([]vrrp.Status, 0, len(v.instances))
	for _, in := range v.instances {
		out = append(out, in.Status())
	}
	return out
}

// HostService runs the node's live view and calls moved whenever the
// interface holding the node's address changes from start to another one.
func HostService(h *host.Host, start string, moved func(*host.View)) service.Service {
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

// LBService is the load balancer as a service.
func LBService(l *lb.LB) service.Service {
	return service.Func{ID: "lb", RunFunc: l.Run,
		ReadyFn:  func() error { return l.Ready(context.Background()) },
		StatusFn: func() any { return l.Status() }}
}

// DNSService is the DNS server as a service.
func DNSService(s *dnsserver.Server) service.Service {
	return service.Func{ID: "dns", RunFunc: s.Run, ReadyFn: s.Ready, StatusFn: func() any { return s.Status() }}
}

// DHCPService is the DHCP server as a service.
func DHCPService(s *dhcp.Server) service.Service {
	return service.Func{ID: "dhcp", RunFunc: s.Run, StatusFn: func() any { return s.Status() }}
}
