package lb

import (
	"context"
	"time"
)

// desiredRules: each pool's VIP port goes to its proxy while the pool has
// a healthy backend for the VIP's family (dual-stack, an IPv6 VIP whose
// pool has no backend up over IPv6 reaches the node's own server directly,
// as a VIP does when its pool has none at all).
func (l *LB) desiredRules() []Redirect {
	var out []Redirect
	for i, x := range l.proxies {
		po := l.poolOpt[i]
		if po.VIPPort == 0 {
			continue
		}
		to := portOf(x.ln.Addr())
		for _, v := range l.vips {
			if x.pool.HealthyFor(l.vipFamily(v)) > 0 {
				rd := Redirect{VIP: v, Port: po.VIPPort, ToPort: to}
				if v.Is6() && l.opts.Self != nil {
					if a, ok := l.opts.Self(true); ok {
						rd.To = a
					}
				}
				out = append(out, rd)
			}
		}
	}
	return out
}

func (l *LB) setRules(r []Redirect) {
	l.mu.Lock()
	l.rules = r
	l.mu.Unlock()
	l.metrics.setRedirect(len(r))
}

// watchRedirect keeps the redirect table as reconcileRedirect last set it,
// repairing what others change (see Redirector.Watch), until ctx ends. Run
// starts it only when the LB manages the redirect.
func (l *LB) watchRedirect(ctx context.Context) error {
	o := l.watch
	o.Log = l.log
	o.OnRepair = func(r RedirectRepair) {
		l.metrics.repaired(r.Kind)
		l.mu.Lock()
		l.repair = &r
		n := len(l.rules)
		l.mu.Unlock()
		l.metrics.setRedirect(n)
	}
	// The table is as someone else left it (deleted, a chain or rule
	// gone): the rules count as missing until a check puts them back.
	o.OnRepairFailed = func(RedirectRepair, error) { l.metrics.setRedirect(0) }
	o.OnHandbackTouched = func() {
		select {
		case l.hbKick <- struct{}{}:
		default:
		}
	}
	return l.redir.Watch(ctx, o)
}

// reconcileRedirect applies desiredRules whenever a pool's health changes
// (kick), retrying a failed apply every second, until ctx ends. Run starts
// it only when the LB manages the redirect.
func (l *LB) reconcileRedirect(ctx context.Context) error {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	// The node's own IPv6 address (Options.Self) can change without a
	// kick; Apply does nothing while the rules stay the same.
	var follow <-chan time.Time
	if l.opts.Self != nil {
		t := time.NewTicker(selfCheck)
		defer t.Stop()
		follow = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.kick:
		case <-retry.C:
		case <-follow:
		}
		want := l.desiredRules()
		l.metrics.setDesired(len(want))
		if err := l.redir.Apply(want); err != nil {
			l.log.Error("apply redirect", "err", err)
			retry.Reset(time.Second)
			continue
		}
		l.mu.Lock()
		changed := len(l.rules) != len(want)
		l.mu.Unlock()
		if changed {
			l.log.Info("redirect", "rules", len(want))
		}
		l.setRules(want)
	}
}

// selfCheck is how often the redirect looks at the node's own address.
const selfCheck = 5 * time.Second
