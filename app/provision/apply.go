package provision

import (
	"context"
	"errors"
	"fmt"
	"time"

	"appliance/internal/cluster"
	"appliance/platform"
)

// ApplyOptions are apply's say over one run.
type ApplyOptions struct {
	// Parallel bounds the VMs built at once; 0 means provision.parallel.
	Parallel int
	// NoStart creates the VMs but leaves them powered off.
	NoStart bool
	// Wait, when > 0, waits after starting, at most this long, until every
	// VM runs and reports its expected address.
	Wait time.Duration
	// Ignition says what each VM boots with.
	Ignition Ignition
}

// parallelism is how many VMs apply builds at once: the flag's count when
// given, else provision.parallel.
func parallelism(p *cluster.Provision, flag int) int {
	if flag > 0 {
		return flag
	}
	return p.Parallel
}

// Apply creates what is missing, in parallel, then starts every VM, and
// reports each step to emit (which may be nil). In order: the Ignition each
// VM boots is prepared (a config too large for the platform is served from
// here while Apply runs); the platform's checks refuse before anything is
// created; the base image is fetched only when something will be built
// from it; the VMs are built and started; with Wait, Apply waits until they
// run; and while a VM built by this run has yet to fetch a served config,
// Apply keeps serving it. A run is safe to repeat after any interruption:
// the next finishes what this one left. The result, when the build got that
// far, comes even with an error.
func (s *Session) Apply(ctx context.Context, opts ApplyOptions, emit func(Event)) (*platform.Result, error) {
	if emit == nil {
		emit = func(Event) {}
	}
	if opts.Wait > 0 && opts.NoStart {
		return nil, errors.New("provision apply: --wait waits for the VMs to run, and --no-start leaves them off; give one of them")
	}
	// The appliance goes into copies of the assets; a config too large for
	// the platform is served from here while apply runs.
	boot, err := prepareIgnition(s.spec, s.cfg, opts.Ignition, emit, s.log)
	if err != nil {
		return nil, err
	}
	defer boot.close()
	if boot.server != nil {
		for _, r := range boot.served {
			emit(ServingIgnition{Role: r, URL: boot.server.ConfigURL(r)})
		}
	}
	// Check before creating anything: a missing namespace, network or
	// storage class would otherwise surface half-way, or never.
	warnings, err := s.preflight(ctx)
	for _, w := range warnings {
		emit(PlatformWarning{Text: w})
	}
	if err != nil {
		return nil, fmt.Errorf("provision apply: nothing created:\n%w", err)
	}

	plan, err := platform.MakePlan(ctx, s.pr, s.spec)
	if err != nil {
		return nil, err
	}
	if plan.Pending() {
		// Only fetch (or find in the cache) the image when something will
		// be built from it.
		img, err := fetchImage(ctx, s.cfg.Provision, emit, s.log)
		if err != nil {
			return nil, err
		}
		s.spec.Image = img
	}
	names := make([]string, len(s.spec.Machines))
	for i, m := range s.spec.Machines {
		names[i] = m.Name
	}
	step := func(e platform.Event) { emit(MachineStep{Step: e}) }
	emit(BuildStart{Machines: names})
	res, err := platform.Apply(ctx, s.pr, s.spec, platform.ApplyOptions{
		Parallel: parallelism(s.cfg.Provision, opts.Parallel), NoStart: opts.NoStart, Progress: step})
	emit(BuildEnd{Result: res})
	if err != nil {
		return res, fmt.Errorf("provision apply: %w\nrun 'appliance provision apply' again to resume", err)
	}
	var awaiting []cluster.Role
	if boot.server != nil {
		awaiting = boot.awaiting(s.spec, res)
	}
	if opts.NoStart {
		if len(awaiting) > 0 {
			emit(ServerStops{Roles: awaiting})
		}
		return res, nil
	}
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if opts.Wait > 0 {
		wctx, cancel = context.WithTimeout(ctx, opts.Wait)
	}
	defer cancel()
	if opts.Wait > 0 {
		emit(WaitStart{Timeout: opts.Wait, Machines: names})
		rows, err := platform.WaitRunning(wctx, s.pr, s.spec, pollEvery, step)
		emit(WaitEnd{})
		if err != nil {
			return res, fmt.Errorf("provision apply: %w\n'appliance provision status' shows them; the VMs stay as they are", err)
		}
		emit(AllRunning{VMs: len(rows)})
	}
	if len(awaiting) > 0 {
		// The VMs just built fetch their config at first boot, and only
		// from this server: it stays up until each role was fetched.
		emit(AwaitingFetch{Roles: awaiting})
		if err := boot.server.WaitFetched(wctx, awaiting); err != nil {
			return res, fmt.Errorf("provision apply: the %s VMs did not fetch their Ignition from %s: %w\ncheck that the VMs reach that address; they retry, so destroy them (the pointer carries this run's CA) and apply again", JoinRoles(awaiting), opts.Ignition.Serve, err)
		}
		emit(AllFetched{})
	}
	return res, nil
}
