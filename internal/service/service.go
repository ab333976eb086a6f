package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"appliance/internal/admin"
	"appliance/internal/exepages"
)

// Service is one long-running part of the appliance. Its constructor binds
// nothing; Run opens its sockets and kernel state, serves until ctx ends,
// cleans up what it created and returns only after every goroutine it
// started has ended. An error from Run, or Run returning while ctx is still
// live, means the service failed.
type Service interface {
	// Name is the service's key in /status and in logs, e.g. "vrrp", "lb".
	Name() string
	Run(ctx context.Context) error
	// Ready reports nil once the service does its job (the admin /readyz).
	Ready() error
	// Status is the service's section of the admin /status document.
	Status() any
}

// Func adapts plain functions to Service, for small parts without a type of
// their own. Ready and Status may be nil (always ready, no status).
type Func struct {
	ID       string
	RunFunc  func(context.Context) error
	ReadyFn  func() error
	StatusFn func() any
}

// Name returns f.ID.
func (f Func) Name() string { return f.ID }

// Run calls f.RunFunc.
func (f Func) Run(ctx context.Context) error { return f.RunFunc(ctx) }

// Ready calls f.ReadyFn, if any.
func (f Func) Ready() error {
	if f.ReadyFn == nil {
		return nil
	}
	return f.ReadyFn()
}

// Status calls f.StatusFn, if any.
func (f Func) Status() any {
	if f.StatusFn == nil {
		return nil
	}
	return f.StatusFn()
}

// Stage is a group of services that stop together. Stages stop in the order
// given: all of the first stage's services have returned before the second
// stage is told to stop.
type Stage []Service

// Options configure Run. Admin.Status and Admin.Ready are filled in by Run
// (the services' sections and readiness) unless already set; Extra adds
// sections of its own to /status.
type Options struct {
	Admin admin.Options
	Extra map[string]func() any
}

// Run binds the admin listener (a port clash stops everything before any
// service starts), runs every service of every stage until ctx ends or one
// of them fails, and then stops the stages in order and the admin listener
// last. It returns nil after a clean stop, or the failures of the services
// that failed, each named.
func Run(ctx context.Context, log *slog.Logger, opts Options, stages ...Stage) error {
	all := flatten(stages)
	if err := uniqueNames(all); err != nil {
		return err
	}
	if opts.Admin.Status == nil {
		opts.Admin.Status = func() any { return statusOf(all, opts.Extra) }
	}
	if opts.Admin.Ready == nil {
		opts.Admin.Ready = func() error { return readyOf(all) }
	}
	adm, err := admin.New(opts.Admin, log)
	if err != nil {
		return err
	}
	admCtx, admStop := context.WithCancel(context.Background())
	admDone := make(chan error, 1)
	go func() { admDone <- adm.Run(admCtx) }()

	failed := make(chan error, len(all)+1)
	stops := make([]context.CancelFunc, len(stages))
	waits := make([]*sync.WaitGroup, len(stages))
	for i, st := range stages {
		sctx, cancel := context.WithCancel(context.Background())
		stops[i], waits[i] = cancel, &sync.WaitGroup{}
		for _, s := range st {
			waits[i].Go(func() {
				err := s.Run(sctx)
				switch {
				case err != nil:
					failed <- fmt.Errorf("%s: %w", s.Name(), err)
				case sctx.Err() == nil:
					failed <- fmt.Errorf("%s stopped on its own", s.Name())
				}
			})
		}
	}
	log.Info("services started", "services", stageNames(all), "admin", adm.Addr().String())
	relCtx, relStop := context.WithCancel(context.Background())
	relDone := make(chan struct{})
	go func() {
		defer close(relDone)
		releasePages(relCtx, log, all)
	}()

	var errs []error
	select {
	case <-ctx.Done():
		log.Info("stopping")
	case err := <-failed:
		errs = append(errs, err)
		log.Error("a service failed; stopping the others", "err", err)
	case err := <-admDone:
		errs = append(errs, err)
		log.Error("the admin listener failed; stopping the services", "err", err)
	}
	relStop()
	<-relDone
	for i, st := range stages {
		begun := time.Now()
		stops[i]()
		waits[i].Wait()
		if len(st) > 0 {
			// Where a stop's time goes: the VIPs' handover, the LB's drain.
			log.Info("stopped", "services", stageNames(st), "took", time.Since(begun).Round(time.Millisecond))
		}
	}
	admStop()
	if err := <-admDone; err != nil && len(errs) == 0 {
		errs = append(errs, err)
	}
drain:
	for {
		select {
		case err := <-failed:
			errs = append(errs, err)
		default:
			break drain
		}
	}
	return errors.Join(errs...)
}

// When the binary's start-up pages are released: settle after every service
// is first ready (informers syncing, first health checks), at the latest
// releaseBy after the start, and again every releaseEvery, so that what a
// rare event (a takeover, a relist) brought in does not stay mapped for the
// process's life.
var releaseAt = struct{ settle, by, every time.Duration }{
	settle: 5 * time.Second,
	by:     2 * time.Minute,
	every:  time.Hour,
}

// releasePages drops the mappings of the binary's pages (exepages) that
// start-up touched, once the services run, and then periodically.
func releasePages(ctx context.Context, log *slog.Logger, all []Service) {
	deadline := time.Now().Add(releaseAt.by)
	for readyOf(all) != nil && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	wait, level := releaseAt.settle, slog.LevelInfo
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		n, err := exepages.Release()
		if err != nil {
			log.Warn("could not release the binary's start-up pages; RSS stays higher, nothing else changes", "err", err)
			return
		}
		log.Log(ctx, level, "released the mappings of the binary's pages; those in use come back on access", "mapped_mib", n>>20)
		wait, level = releaseAt.every, slog.LevelDebug
	}
}

func stageNames(st Stage) []string {
	names := make([]string, len(st))
	for i, s := range st {
		names[i] = s.Name()
	}
	return names
}

func flatten(stages []Stage) []Service {
	var out []Service
	for _, st := range stages {
		out = append(out, st...)
	}
	return out
}

func uniqueNames(all []Service) error {
	seen := map[string]bool{}
	for _, s := range all {
		if seen[s.Name()] {
			return fmt.Errorf("service: two services are named %q", s.Name())
		}
		seen[s.Name()] = true
	}
	return nil
}

// statusOf is the /status document: one section per service, plus extras.
func statusOf(all []Service, extra map[string]func() any) map[string]any {
	out := make(map[string]any, len(all)+len(extra))
	for _, s := range all {
		if st := s.Status(); st != nil {
			out[s.Name()] = st
		}
	}
	for k, f := range extra {
		out[k] = f()
	}
	return out
}

// readyOf is nil when every service is ready, else names those that are not.
func readyOf(all []Service) error {
	var errs []error
	for _, s := range all {
		if err := s.Ready(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}
