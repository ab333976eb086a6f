package lb

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"appliance/internal/cluster"
)

// A node that stops holding an API VIP while its LB lives on (preempted, or
// stepping back because its own apiserver failed /readyz) keeps the
// sessions the VIP brought it. Their packets reach it only through the new
// holder's handback, which lasts handbackWindow (DrainTimeout + 2 s) after
// the takeover; a session still open then is reset by the new holder at
// the client's next packet, and a watch that lives for minutes always is.
// So, as a SIGTERM'd LB drains, the LB ends those sessions cleanly (a FIN
// each way) DrainTimeout after the loss, while the handback still carries
// the last segments, unless the VIP came back meanwhile.

// trackRelease updates, from one snapshot of this node's VRRP states of
// vips, which VIPs it was master of (held) and which it lost and when
// (lost): master → anything else starts the clock, master again stops it.
func trackRelease(vips []netip.Addr, snap *cluster.Snapshot, held map[netip.Addr]bool, lost map[netip.Addr]time.Time, now time.Time) {
	for _, st := range snap.VIPs {
		if !slices.Contains(vips, st.VIP) {
			continue
		}
		master := st.LocalState == cluster.VIPStateMaster
		switch {
		case master:
			delete(lost, st.VIP)
		case held[st.VIP]:
			lost[st.VIP] = now
		}
		held[st.VIP] = master
	}
}

// releaseDue lists the lost VIPs whose drain is over at now (their
// sessions are to end) and says when the next one's is (zero: none left).
func releaseDue(lost map[netip.Addr]time.Time, now time.Time, drain time.Duration) (due []netip.Addr, next time.Time) {
	for v, at := range lost {
		end := at.Add(drain)
		if !end.After(now) {
			due = append(due, v)
			continue
		}
		if next.IsZero() || end.Before(next) {
			next = end
		}
	}
	slices.SortFunc(due, netip.Addr.Compare)
	return due, next
}

// followRelease ends the sessions an API VIP brought once this node has
// not held it for DrainTimeout (see trackRelease), until ctx ends.
func (l *LB) followRelease(ctx context.Context) error {
	held := map[netip.Addr]bool{}
	lost := map[netip.Addr]time.Time{}
	sub := l.state.Subscribe(ctx)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case s, ok := <-sub:
			if !ok {
				return nil // ctx ended
			}
			trackRelease(l.vips, s, held, lost, time.Now())
		case <-timer.C:
		}
		due, next := releaseDue(lost, time.Now(), l.opts.DrainTimeout)
		for _, v := range due {
			at := lost[v]
			delete(lost, v)
			for _, x := range l.proxies {
				x.closeBornBefore(l.vipFamily(v), at)
			}
			l.log.Info("VIP held elsewhere for the drain timeout: ending the sessions it brought before the handback ends",
				"vip", v, "lost", at.Format(time.RFC3339Nano), "drain", l.opts.DrainTimeout)
		}
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
	}
}
