package platform

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Action is what apply will do for one machine.
type Action string

// Actions.
const (
	ActionCreate   Action = "create"   // nothing exists yet
	ActionComplete Action = "complete" // an interrupted apply left it half-built
	ActionNone     Action = "exists"   // complete; apply leaves it alone
)

// PlanItem is one machine of the spec and what exists for it.
type PlanItem struct {
	Machine Machine
	// Existing is the platform's VM for this machine, nil when none.
	Existing *VM
	Action   Action
}

// Plan is the difference between the spec and the platform.
type Plan struct {
	Items []PlanItem
	// Stray lists VMs carrying the infra ID that the spec no longer names
	// (a node removed from appliance.yaml); apply leaves them, destroy
	// removes them.
	Stray []VM
}

// Pending reports whether apply has anything to build.
func (p *Plan) Pending() bool {
	for _, it := range p.Items {
		if it.Action != ActionNone {
			return true
		}
	}
	return false
}

// Diff compares spec with the VMs the platform reported. It is pure. A VM is
// matched to a machine by the node name recorded in its mark, and by name as
// a fallback for providers that record only the name.
func Diff(spec *Spec, vms []VM) *Plan {
	byNode := map[string]*VM{}
	for i := range vms {
		v := &vms[i]
		key := v.Node
		if key == "" {
			key = "\x00" + v.Name
		}
		byNode[key] = v
	}
	p := &Plan{}
	used := map[*VM]bool{}
	for _, m := range spec.Machines {
		v := byNode[m.Node]
		if v == nil {
			v = byNode["\x00"+m.Name]
		}
		it := PlanItem{Machine: m, Action: ActionCreate}
		if v != nil {
			used[v] = true
			it.Existing = v
			it.Action = ActionNone
			if !v.Complete {
				it.Action = ActionComplete
			}
		}
		p.Items = append(p.Items, it)
	}
	for i := range vms {
		if !used[&vms[i]] {
			p.Stray = append(p.Stray, vms[i])
		}
	}
	return p
}

// MakePlan lists what exists on the platform and diffs it with spec.
func MakePlan(ctx context.Context, pr Provider, spec *Spec) (*Plan, error) {
	vms, err := pr.List(ctx, spec.InfraID)
	if err != nil {
		return nil, fmt.Errorf("platform: list %s: %w", spec.InfraID, err)
	}
	return Diff(spec, vms), nil
}

// Event is one progress report from Apply.
type Event struct {
	// Machine is the VM name, or "" for the shared base image.
	Machine string
	// Stage says what is happening ("uploading image", "creating disk",
	// "starting", "done", "failed").
	Stage string
	// Done and Total count bytes while an image uploads.
	Done, Total int64
	// Finished is set on the last event of a machine (or the image); Err
	// tells success from failure.
	Finished bool
	Err      error
}

// ApplyOptions tunes Apply.
type ApplyOptions struct {
	// Parallel bounds how many machines are built at once; 1 is one at a
	// time. 0 means 8.
	Parallel int
	// NoStart leaves the VMs powered off.
	NoStart bool
	// Progress, when set, receives every event. Calls are serialised.
	Progress func(Event)
}

// Result says what Apply did.
type Result struct {
	Created, Completed, Existing, Started []string
	Elapsed                               time.Duration
}

// Apply builds every machine the plan says is missing or incomplete, at most
// opts.Parallel at once, then starts them all. A machine that fails does not
// stop the others, so a re-run has less to do; the returned error joins every
// failure, each naming its machine. Apply is safe to re-run at any point: the
// plan and the providers' idempotent methods resume where it stopped.
func Apply(ctx context.Context, pr Provider, spec *Spec, opts ApplyOptions) (*Result, error) {
	start := time.Now()
	if opts.Parallel <= 0 {
		opts.Parallel = 8
	}
	var mu sync.Mutex
	emit := func(e Event) {
		if opts.Progress != nil {
			mu.Lock()
			opts.Progress(e)
			mu.Unlock()
		}
	}

	plan, err := MakePlan(ctx, pr, spec)
	if err != nil {
		return nil, err
	}
	res := &Result{}
	var build []Machine
	// completing marks the half-built machines; the result counts a machine
	// only once its Create has returned, so a failed run reports what it
	// made, not what it meant to make.
	completing, made := map[string]bool{}, map[string]bool{}
	for _, it := range plan.Items {
		switch it.Action {
		case ActionCreate:
			build = append(build, it.Machine)
		case ActionComplete:
			build = append(build, it.Machine)
			completing[it.Machine.Name] = true
		default:
			res.Existing = append(res.Existing, it.Machine.Name)
			emit(Event{Machine: it.Machine.Name, Stage: "exists", Finished: true})
		}
	}

	if len(build) > 0 {
		// A platform that fetches the image itself (a KubeVirt DataVolume
		// importing from URL; no local file) is only asked to begin: the
		// import goes on there, and the disks cloned from it wait for it.
		transfer, ready := "uploading image", "image ready"
		if spec.Image.Path == "" && spec.Image.URL != "" {
			transfer, ready = "importing image (on the platform)", "image import begun on the platform"
		}
		emit(Event{Stage: "preparing image"})
		err := pr.PrepareImage(ctx, spec, func(done, total int64) {
			emit(Event{Stage: transfer, Done: done, Total: total})
		})
		if err != nil {
			err = fmt.Errorf("platform: base image: %w", err)
			emit(Event{Stage: "failed", Finished: true, Err: err})
			return res, err
		}
		emit(Event{Stage: ready, Finished: true})
	}

	errs := forEach(ctx, build, opts.Parallel, func(ctx context.Context, m Machine) error {
		emit(Event{Machine: m.Name, Stage: "creating"})
		err := pr.Create(ctx, spec, m, func(stage string) {
			emit(Event{Machine: m.Name, Stage: stage})
		})
		if err != nil {
			err = fmt.Errorf("platform: create %s: %w", m.Name, err)
			emit(Event{Machine: m.Name, Stage: "failed", Finished: true, Err: err})
			return err
		}
		mu.Lock()
		made[m.Name] = true
		mu.Unlock()
		if opts.NoStart {
			emit(Event{Machine: m.Name, Stage: "created", Finished: true})
		} else {
			emit(Event{Machine: m.Name, Stage: "created, waiting to start"})
		}
		return nil
	})
	for _, m := range build { // in plan order
		switch {
		case !made[m.Name]:
		case completing[m.Name]:
			res.Completed = append(res.Completed, m.Name)
		default:
			res.Created = append(res.Created, m.Name)
		}
	}
	if err := errors.Join(errs...); err != nil {
		res.Elapsed = time.Since(start)
		return res, err
	}
	if opts.NoStart {
		res.Elapsed = time.Since(start)
		return res, nil
	}

	// Start last, once every VM exists: a master that boots before its
	// peers are defined only waits, but a half-built cluster that is running
	// is harder to reason about (and oVirt's affinity groups must be whole
	// before placement).
	var toStart []Machine
	for _, it := range plan.Items {
		if it.Existing != nil && it.Existing.Power == PowerRunning {
			continue
		}
		toStart = append(toStart, it.Machine)
	}
	errs = forEach(ctx, toStart, opts.Parallel, func(ctx context.Context, m Machine) error {
		emit(Event{Machine: m.Name, Stage: "starting"})
		if err := pr.Start(ctx, spec, m); err != nil {
			err = fmt.Errorf("platform: start %s: %w", m.Name, err)
			emit(Event{Machine: m.Name, Stage: "failed", Finished: true, Err: err})
			return err
		}
		mu.Lock()
		res.Started = append(res.Started, m.Name)
		mu.Unlock()
		// "started", not "running": the platform has been asked to run the
		// VM; whether it runs is for Status (and apply --wait) to tell.
		emit(Event{Machine: m.Name, Stage: "started", Finished: true})
		return nil
	})
	slices.Sort(res.Started)
	res.Elapsed = time.Since(start)
	return res, errors.Join(errs...)
}

// forEach runs fn for every machine, at most limit at once, and returns the
// errors in machine order. A cancelled ctx stops machines not yet begun.
func forEach(ctx context.Context, ms []Machine, limit int, fn func(context.Context, Machine) error) []error {
	errs := make([]error, len(ms))
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i, m := range ms {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			errs[i] = fmt.Errorf("platform: %s not begun: %w", m.Name, ctx.Err())
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = fn(ctx, m)
		}()
	}
	wg.Wait()
	return slices.DeleteFunc(errs, func(e error) bool { return e == nil })
}

// StatusRow is one machine's state for `provision status`.
type StatusRow struct {
	Machine Machine
	// VM is nil when the machine does not exist.
	VM *VM
}

// Status lists every machine of spec with what the platform reports, and
// the stray VMs carrying the infra ID.
func Status(ctx context.Context, pr Provider, spec *Spec) ([]StatusRow, []VM, error) {
	plan, err := MakePlan(ctx, pr, spec)
	if err != nil {
		return nil, nil, err
	}
	rows := make([]StatusRow, len(plan.Items))
	for i, it := range plan.Items {
		rows[i] = StatusRow{Machine: it.Machine, VM: it.Existing}
	}
	return rows, plan.Stray, nil
}

// WaitAddresses polls Status until every machine of spec reports an address
// or ctx ends (then it returns the last rows and ctx's error). Guests report
// addresses only once booted (DHCP lease, guest agent), so this is how a
// caller waits for a cluster to come up.
func WaitAddresses(ctx context.Context, pr Provider, spec *Spec, every time.Duration) ([]StatusRow, []VM, error) {
	for {
		rows, stray, err := Status(ctx, pr, spec)
		if err != nil {
			return rows, stray, err
		}
		if !slices.ContainsFunc(rows, func(r StatusRow) bool { return r.VM == nil || len(r.VM.Addresses) == 0 }) {
			return rows, stray, nil
		}
		select {
		case <-ctx.Done():
			return rows, stray, fmt.Errorf("platform: waiting for addresses: %w", ctx.Err())
		case <-time.After(every):
		}
	}
}

// Ready says whether a machine runs and reports the addresses expected of
// it (its configured ones, or any address when none is configured); state
// says where it stands, for progress lines and errors.
func Ready(r StatusRow) (ok bool, state string) {
	v := r.VM
	switch {
	case v == nil:
		return false, "absent"
	case v.Power != PowerRunning:
		return false, string(v.Power)
	case len(v.Addresses) == 0:
		return false, "running, no address yet"
	}
	for _, want := range r.Machine.IPs {
		if !slices.Contains(v.Addresses, want) {
			return false, fmt.Sprintf("running at %s, expected %s", joinAddrs(v.Addresses), joinAddrs(r.Machine.IPs))
		}
	}
	return true, "running at " + joinAddrs(v.Addresses)
}

func joinAddrs(as []netip.Addr) string {
	ss := make([]string, len(as))
	for i, a := range as {
		ss[i] = a.String()
	}
	return strings.Join(ss, ",")
}

// WaitRunning polls Status every interval until every machine of spec is
// Ready, or ctx ends: then the error names each machine that is not, with
// its state. progress, when set, gets an event whenever a machine's state
// changes (Finished once it is ready).
func WaitRunning(ctx context.Context, pr Provider, spec *Spec, every time.Duration, progress func(Event)) ([]StatusRow, error) {
	last := map[string]string{}
	var rows []StatusRow
	var waiting []string
	for {
		got, _, err := Status(ctx, pr, spec)
		switch {
		case err != nil && ctx.Err() == nil:
			return rows, err
		case err == nil:
			rows, waiting = got, nil
			for _, r := range rows {
				ok, state := Ready(r)
				if !ok {
					waiting = append(waiting, fmt.Sprintf("%s (%s)", r.Machine.Name, state))
				}
				if progress != nil && last[r.Machine.Name] != state {
					last[r.Machine.Name] = state
					progress(Event{Machine: r.Machine.Name, Stage: state, Finished: ok})
				}
			}
			if len(waiting) == 0 {
				return rows, nil
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
			continue
		}
		if rows == nil {
			return nil, fmt.Errorf("platform: waiting for the VMs to run: %w", ctx.Err())
		}
		return rows, fmt.Errorf("platform: %d of %d VMs not running with their addresses: %s: %w",
			len(waiting), len(rows), strings.Join(waiting, ", "), ctx.Err())
	}
}

// NodeVMs are the VMs among vms made for the named nodes: by the node their
// mark records, or by name (<infraID>-<node>) for a VM whose mark records
// none.
func NodeVMs(vms []VM, infraID string, nodes []string) []VM {
	var out []VM
	for _, v := range vms {
		if slices.ContainsFunc(nodes, func(n string) bool {
			return v.Node == n || (v.Node == "" && v.Name == infraID+"-"+n)
		}) {
			out = append(out, v)
		}
	}
	return out
}

// DestroyNodes removes the VMs of infraID made for the named nodes, and what
// each owns alone, leaving every other VM and what the cluster shares: how
// `provision destroy --bootstrap` removes the bootstrap node once the
// control plane is up. ready, when set, is asked first with every VM of
// infraID and may refuse (an error) to remove anything yet.
func DestroyNodes(ctx context.Context, pr Provider, infraID string, nodes []string, ready func([]VM) error) ([]string, error) {
	if infraID == "" || len(nodes) == 0 {
		return nil, errors.New("platform: destroy nodes: no infra ID or no node named")
	}
	vms, err := pr.List(ctx, infraID)
	if err != nil {
		return nil, fmt.Errorf("platform: list %s: %w", infraID, err)
	}
	sel := NodeVMs(vms, infraID, nodes)
	if len(sel) == 0 {
		return nil, nil
	}
	if ready != nil {
		if err := ready(vms); err != nil {
			return nil, err
		}
	}
	return pr.DestroyVMs(ctx, infraID, sel)
}
