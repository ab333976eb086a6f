package provision

import (
	"context"
	"fmt"
	"strings"
	"time"

	"appliance/internal/cluster"
	"appliance/platform"
)

// The platform's own types a command prints, named here so it prints them
// without joining the platform, the images and the node files itself.
type (
	// Plan is what exists and what apply would do, machine by machine.
	Plan = platform.Plan
	// Action is what apply does about one machine.
	Action = platform.Action
	// StatusRow is one machine with what the platform reports of it.
	StatusRow = platform.StatusRow
	// VM is a machine that exists on the platform.
	VM = platform.VM
	// Step is one progress report of a machine, or of the base image when
	// its Machine is "".
	Step = platform.Event
)

// What apply does about a machine.
const (
	ActionCreate   = platform.ActionCreate
	ActionComplete = platform.ActionComplete
	ActionNone     = platform.ActionNone
)

// PlanReport is what plan found.
type PlanReport struct {
	// Domain is the cluster's domain, InfraID the mark of its resources,
	// Where the platform and its endpoint (see Where).
	Domain, InfraID, Where string
	// Image says where the base image will come from, or why that is not
	// known yet.
	Image string
	Plan  *Plan
	// Warnings are the platform checks' warnings.
	Warnings []string
}

// Plan lists what exists and what apply would create. The platform's checks
// run first: credentials that may not list what exists fail the plan, and
// the checks say why in the platform's terms. When only the checks refuse,
// the report comes with the error, so the plan is still shown.
func (s *Session) Plan(ctx context.Context) (*PlanReport, error) {
	warnings, checkErr := s.preflight(ctx)
	plan, err := platform.MakePlan(ctx, s.pr, s.spec)
	if err != nil {
		if checkErr != nil {
			return nil, fmt.Errorf("provision plan: apply would fail:\n%w", checkErr)
		}
		return nil, err
	}
	rep := &PlanReport{
		Domain: s.cfg.Cluster.Domain(), InfraID: s.spec.InfraID, Where: Where(s.cfg.Provision),
		Image: describeImage(ctx, s.cfg.Provision, s.log), Plan: plan, Warnings: warnings,
	}
	if checkErr != nil {
		return rep, fmt.Errorf("provision plan: apply would fail:\n%w", checkErr)
	}
	return rep, nil
}

// StatusReport is every machine of the spec with what the platform reports,
// and the VMs that carry the infra ID but are not in appliance.yaml.
type StatusReport struct {
	Rows  []StatusRow
	Stray []VM
}

// pollEvery is how often status --wait and apply --wait ask the platform.
const pollEvery = 2 * time.Second

// Status reads each VM's power state and addresses. With wait > 0 it polls
// until every VM reports an address, for at most wait; the last report then
// comes with the error, so what was seen is still shown.
func (s *Session) Status(ctx context.Context, wait time.Duration) (*StatusReport, error) {
	if wait <= 0 {
		rows, stray, err := platform.Status(ctx, s.pr, s.spec)
		if err != nil {
			return nil, err
		}
		return &StatusReport{Rows: rows, Stray: stray}, nil
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	rows, stray, err := platform.WaitAddresses(wctx, s.pr, s.spec, pollEvery)
	rep := &StatusReport{Rows: rows, Stray: stray}
	if err != nil {
		return rep, fmt.Errorf("provision status: not every VM reported an address within %s: %w", wait, err)
	}
	return rep, nil
}

// DestroyReport is what a destroy removed.
type DestroyReport struct {
	// Removed has a line per removed resource, in the platform's terms.
	Removed []string
	// Nodes are the nodes whose VMs destroy --bootstrap was to remove
	// (none when appliance.yaml lists no bootstrap node); nil for destroy.
	Nodes []string
	// InfraID is the mark looked for, Where the platform (see Where).
	InfraID, Where string
	// NoAssets is set when the infra ID was known without the assets: if
	// apply read it from metadata.json, nothing was found for that reason.
	NoAssets bool
}

func (s *Session) destroyReport() *DestroyReport {
	return &DestroyReport{InfraID: s.spec.InfraID, Where: Where(s.cfg.Provision), NoAssets: s.noAssets}
}

// Destroy removes every resource carrying the infra ID, and nothing else.
// The report lists what went even when the error says not all did.
func (s *Session) Destroy(ctx context.Context) (*DestroyReport, error) {
	rep := s.destroyReport()
	removed, err := s.pr.Destroy(ctx, s.spec.InfraID)
	rep.Removed = removed
	if err != nil {
		return rep, fmt.Errorf("provision destroy: %w\nrun it again to remove the rest", err)
	}
	return rep, nil
}

// DestroyBootstrap removes the bootstrap nodes' VMs, and only them, once
// every master's VM runs: the control plane no longer needs the bootstrap
// node after 'openshift-install wait-for bootstrap-complete'. With no
// bootstrap node in appliance.yaml it removes nothing and asks nothing.
func (s *Session) DestroyBootstrap(ctx context.Context) (*DestroyReport, error) {
	rep := s.destroyReport()
	boots, masters := bootstrapAndMasters(s.cfg)
	rep.Nodes = boots
	if len(boots) == 0 {
		return rep, nil
	}
	removed, err := platform.DestroyNodes(ctx, s.pr, s.spec.InfraID, boots, func(vms []platform.VM) error {
		return controlPlaneUp(vms, s.spec.InfraID, masters)
	})
	rep.Removed = removed
	if err != nil {
		return rep, fmt.Errorf("provision destroy --bootstrap: %w", err)
	}
	return rep, nil
}

// bootstrapAndMasters are cfg's bootstrap and master nodes, in config order.
func bootstrapAndMasters(cfg *cluster.Config) (boots, masters []string) {
	for _, n := range cfg.Nodes {
		switch n.Role {
		case cluster.RoleBootstrap:
			boots = append(boots, n.Name)
		case cluster.RoleMaster:
			masters = append(masters, n.Name)
		}
	}
	return boots, masters
}

// controlPlaneUp is destroy --bootstrap's readiness rule: every master's VM
// exists and runs. The error names each one that does not, with its state.
func controlPlaneUp(vms []platform.VM, infraID string, masters []string) error {
	var down []string
	for _, m := range masters {
		got := platform.NodeVMs(vms, infraID, []string{m})
		switch {
		case len(got) == 0:
			down = append(down, m+" (absent)")
		case got[0].Power != platform.PowerRunning:
			down = append(down, fmt.Sprintf("%s (%s)", m, got[0].Power))
		}
	}
	if len(down) > 0 {
		return fmt.Errorf("the control plane is not up, so the bootstrap node is still needed: %s; run it after 'openshift-install wait-for bootstrap-complete'", strings.Join(down, ", "))
	}
	return nil
}
