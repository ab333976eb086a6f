package lb

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"appliance/internal/cluster"
)

// handbackCheck is how often followHandback makes sure its tables are
// still there: nothing else watches them, and they only matter at the
// instant of a takeover.
const handbackCheck = 5 * time.Second

// followHandback keeps the handback tables (see Handback) in step with
// this node's VRRP state of the API VIPs until ctx ends. Run starts it only
// when the LB manages the redirect.
func (l *LB) followHandback(ctx context.Context) error {
	window := handbackWindow(l.opts.DrainTimeout)
	last := map[netip.Addr]netip.Addr{} // VIP → the master a backup last followed
	sub := l.state.Subscribe(ctx)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	check := time.NewTicker(handbackCheck)
	defer check.Stop()
	var snap *cluster.Snapshot
	force := false
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			return nil
		case s, ok := <-sub:
			if !ok {
				return nil // ctx ended
			}
			snap = s
		case <-timer.C:
		case <-l.hbKick:
			// Someone else touched the tables (nft flush ruleset): write
			// them again now, not at the next check.
			l.log.Warn("handback table changed by someone else; writing it again", "table", HandbackTable)
			force = true
		case <-check.C:
			missing, err := l.redir.HandbackMissing()
			if err != nil {
				l.log.Error("check handback tables", "err", err)
			}
			if !missing && !force {
				continue
			}
			if missing {
				l.log.Warn("handback table removed by someone else; restoring it", "table", HandbackTable)
			}
			force = true
		}
		if snap == nil {
			continue
		}
		want, until := l.wantHandback(snap, last, time.Now(), window)
		if !until.IsZero() {
			timer.Reset(time.Until(until))
		}
		if err := l.redir.ApplyHandback(want, force); err != nil {
			// Once per distinct error: the next check retries every 5 s.
			if err.Error() != lastErr {
				l.log.Error("apply handback: connections will be reset when this node takes the VIP from a live node", "err", err)
				lastErr = err.Error()
			}
			force = true
			continue
		}
		if lastErr != "" {
			l.log.Info("handback applied again")
			lastErr = ""
		}
		force = false
		l.mu.Lock()
		was := l.handback
		l.handback = want
		l.mu.Unlock()
		for _, h := range want {
			if snapMaster(snap, h.VIP) && !slices.Contains(was, h) {
				l.log.Info("passing connections this node does not know back to the previous VIP holder",
					"vip", h.VIP, "port", h.Port, "to", h.To, "for", window)
			}
		}
	}
}

// wantHandback is the handback rules for snap's VIP states (handbackTargets,
// for each API VIP this LB redirects and each pool's VIP port), and the
// earliest time they change on their own.
func (l *LB) wantHandback(snap *cluster.Snapshot, last map[netip.Addr]netip.Addr, now time.Time, window time.Duration) ([]Handback, time.Time) {
	var want []Handback
	var until time.Time
	for _, st := range snap.VIPs {
		if !slices.Contains(l.vips, st.VIP) {
			continue
		}
		tos, keep, u := handbackTargets(st, last[st.VIP], now, window)
		last[st.VIP] = keep
		if !u.IsZero() && (until.IsZero() || u.Before(until)) {
			until = u
		}
		// IPv6 only when its traffic goes to the node's own address
		// (Options.Self): redirected, the old holder's sessions are bound
		// to the VIP and cannot take a packet once it is gone, and passing
		// them back would turn a reset into a timeout.
		if st.VIP.Is6() && l.opts.Self == nil {
			continue
		}
		for _, to := range tos {
			if to.Is4() != st.VIP.Is4() {
				continue
			}
			for _, po := range l.poolOpt {
				if po.VIPPort != 0 {
					want = append(want, Handback{VIP: st.VIP, Port: po.VIPPort, To: to})
				}
			}
		}
	}
	return want, until
}

// snapMaster reports whether this node is master of vip in snap.
func snapMaster(snap *cluster.Snapshot, vip netip.Addr) bool {
	for _, st := range snap.VIPs {
		if st.VIP == vip {
			return st.LocalState == cluster.VIPStateMaster
		}
	}
	return false
}
