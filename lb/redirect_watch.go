package lb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/nftables"
)

// WatchOptions tune Watch. Zero fields take the defaults.
type WatchOptions struct {
	// Interval is the period of the backstop check, for changes the
	// monitor missed; 0 means 5 s.
	Interval time.Duration
	// MinBackoff and MaxBackoff bound the wait before the monitor is
	// re-opened after it failed; 0 means 100 ms and 5 s.
	MinBackoff, MaxBackoff time.Duration
	// Log receives the repair and monitor lines; nil discards them.
	Log *slog.Logger
	// OnRepair is told of each repair once it is made (counters, /status).
	OnRepair func(RedirectRepair)
	// OnRepairFailed is told of a repair that could not be made: the
	// table stays as found until a later check repairs it.
	OnRepairFailed func(RedirectRepair, error)
	// OnHandbackTouched is told of each transaction of someone else's
	// that touched a handback table (HandbackTable): `nft flush ruleset`
	// removes it with the redirect, and the connections it hands back are
	// reset until it is back, so its owner checks it at once.
	OnHandbackTouched func()

	// openMonitor replaces Redirector.openMonitor in tests that make the
	// monitor fail.
	openMonitor func() (*monitor, error)
}

func (o *WatchOptions) fill() {
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(o.MinBackoff, 5*time.Second)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// Triggers of a check, as RedirectRepair.Trigger says them.
const (
	triggerEvent   = "nftables event"
	triggerPeriod  = "periodic check"
	triggerMonitor = "monitor (re)opened"
)

// Watch keeps the table equal to the rules last applied until ctx ends.
// It listens to the nftables monitor of the Redirector's namespace and
// checks the table (see Check) after every transaction of someone else's
// that touched it, and every Interval in case the monitor lost events. A
// monitor that fails is re-opened with backoff, and the table checked at
// once, since events were lost. Watch returns nil when ctx ends, having
// closed the monitor and awaited its goroutine; it must end before Close.
func (r *Redirector) Watch(ctx context.Context, o WatchOptions) error {
	o.fill()
	if o.openMonitor == nil {
		o.openMonitor = r.openMonitor
	}
	check := func(trigger string) {
		rep, err := r.Check(trigger)
		if rep != nil {
			attrs := []any{"kind", rep.Kind, "found", rep.Found, "trigger", trigger}
			if err != nil {
				o.Log.Error("redirect repair failed", append(attrs, "err", err)...)
				if o.OnRepairFailed != nil {
					o.OnRepairFailed(*rep, err)
				}
				return
			}
			o.Log.Warn("redirect repaired", append(attrs, "action", rep.Action)...)
			if o.OnRepair != nil {
				o.OnRepair(*rep)
			}
			return
		}
		if err != nil {
			o.Log.Error("check redirect", "trigger", trigger, "err", err)
		}
	}

	var (
		mon      *monitor
		openedAt time.Time
	)
	defer func() {
		if mon != nil {
			mon.close()
		}
	}()
	backoff := o.MinBackoff
	reopen := time.NewTimer(0)
	defer reopen.Stop()
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	fail := func(err error) {
		if mon != nil {
			mon.close()
			mon = nil
			if time.Since(openedAt) > o.MaxBackoff {
				backoff = o.MinBackoff // it had been working: not a failure in a row
			}
		}
		o.Log.Warn("nftables monitor failed; re-opening", "err", err, "in", backoff)
		reopen.Reset(backoff)
		backoff = min(2*backoff, o.MaxBackoff)
	}
	for {
		var events <-chan *nftables.MonitorEvents
		if mon != nil {
			events = mon.events
		}
		select {
		case <-ctx.Done():
			return nil
		case <-reopen.C:
			m, err := o.openMonitor()
			if err != nil {
				fail(err)
				continue
			}
			mon, openedAt = m, time.Now()
			check(triggerMonitor)
		case evs, ok := <-events:
			switch {
			case !ok:
				fail(errors.New("lb: nftables monitor stopped"))
			case evs.GeneratedBy != nil && evs.GeneratedBy.Type == nftables.MonitorEventTypeOOB:
				// Typically ENOBUFS: the socket overran and events were
				// lost, so look at the table now rather than at the tick.
				fail(fmt.Errorf("lb: nftables monitor: %w", evs.GeneratedBy.Error))
				check(triggerMonitor)
			default:
				backoff = o.MinBackoff
				if r.concerns(evs) {
					check(triggerEvent)
				}
				if o.OnHandbackTouched != nil && r.foreign(evs) && touchesHandback(evs.Changes) {
					o.OnHandbackTouched()
				}
			}
		case <-tick.C:
			check(triggerPeriod)
		}
	}
}

// monitor is one open nftables monitor: its transactions, and what stops
// it and waits for its reader.
type monitor struct {
	events <-chan *nftables.MonitorEvents
	close  func()
}

// openMonitor subscribes to the nftables events of the Redirector's
// namespace. The connection is a lasting one so that close can close its
// socket even after the monitor's reader ended on an error (the library
// closes a transient socket only when asked to before that).
func (r *Redirector) openMonitor() (*monitor, error) {
	opts := []nftables.ConnOption{nftables.AsLasting()}
	if r.netnsFd != 0 {
		opts = append(opts, nftables.WithNetNSFd(r.netnsFd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("lb: nftables monitor connection: %w", err)
	}
	m := nftables.NewMonitor(
		nftables.WithMonitorObject(nftables.MonitorObjectRuleset),
		nftables.WithMonitorEventBuffer(64),
	)
	ch, err := c.AddGenerationalMonitor(m)
	if err != nil {
		_ = c.CloseLasting()
		return nil, fmt.Errorf("lb: nftables monitor: %w", err)
	}
	// Closing the socket ends the reader's receive; draining lets it finish
	// a send it may be blocked in, after which it closes the channel.
	stop := func() {
		_ = m.Close()
		_ = c.CloseLasting()
		for range ch {
		}
	}
	return &monitor{events: ch, close: stop}, nil
}

// concerns reports whether a transaction touched our table and was not
// sent by us. A transaction of ours is left alone: it leaves the table as
// desired, and checking after it would only read the table back.
func (r *Redirector) concerns(evs *nftables.MonitorEvents) bool {
	return touchesTable(r.table, evs.Changes) && r.foreign(evs)
}

// foreign reports whether a transaction was not sent by us.
func (r *Redirector) foreign(evs *nftables.MonitorEvents) bool {
	if evs.GeneratedBy != nil {
		if g, ok := evs.GeneratedBy.Data.(*nftables.GenMsg); ok && r.ownThread(g.ProcPID) {
			return false
		}
	}
	return true
}

// touchesTable reports whether any change concerns the inet table called
// table. A change the library could not decode counts: better one check
// too many than a missed deletion.
func touchesTable(table string, changes []*nftables.MonitorEvent) bool {
	return touches(changes, func(t *nftables.Table) bool { return t.Name == table && t.Family == nftables.TableFamilyINet })
}

// touchesHandback reports whether any change concerns a handback table
// (ip or ip6), or could not be decoded.
func touchesHandback(changes []*nftables.MonitorEvent) bool {
	return touches(changes, func(t *nftables.Table) bool {
		return t.Name == HandbackTable && (t.Family == nftables.TableFamilyIPv4 || t.Family == nftables.TableFamilyIPv6)
	})
}

// touches reports whether any change is to a table match accepts, or
// could not be decoded.
func touches(changes []*nftables.MonitorEvent, match func(*nftables.Table) bool) bool {
	for _, ev := range changes {
		if ev.Error != nil {
			return true
		}
		var t *nftables.Table
		switch d := ev.Data.(type) {
		case *nftables.Table:
			t = d
		case *nftables.Chain:
			t = d.Table
		case *nftables.Rule:
			t = d.Table
		case *nftables.Set:
			t = d.Table
		default:
			continue
		}
		if t != nil && match(t) {
			return true
		}
	}
	return false
}
