package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"appliance/internal/cluster"
	"appliance/platform"
)

type provisionFlags struct {
	g         *globalFlags
	config    string
	assets    string
	parallel  int
	noStart   bool
	wait      time.Duration // status --wait
	applyWait time.Duration // apply --wait
	ign       ignitionFlags
	bootstrap bool // destroy --bootstrap
}

func newProvisionCmd(g *globalFlags) *cobra.Command {
	pf := &provisionFlags{g: g}
	cmd := &cobra.Command{
		Use:   "provision",
		Short: "Create, inspect and remove the cluster's VMs on libvirt, oVirt or KubeVirt",
		Long: `provision creates the bootstrap, control-plane and worker VMs that appliance.yaml lists,
on the platform its provision section names, each booting RHCOS with its role's Ignition config
from the installer's asset directory and a MAC address known in advance (configured, or derived
from the cluster and node name), so DHCP reservations and DNS records exist before any VM boots.
apply puts the appliance into the Ignition each VM boots (--image, as for 'appliance ignition'),
on copies: the asset files stay as they are. A config too large for the platform is served from
this machine over HTTPS (--serve-ignition ADDR:PORT) and the VM gets a small pointer to it.

Every resource carries the cluster's infra ID (metadata.json's infraID, provision.infraID, or the
cluster name); destroy removes what carries it and nothing else. apply is safe to re-run after any
interruption: it finishes what was left and never creates anything twice.

Credentials are read from the platform's own files or environment (libvirt: the URI; oVirt:
~/.ovirt/ovirt-config.yaml or OVIRT_URL/OVIRT_USERNAME/OVIRT_PASSWORD; KubeVirt: the kubeconfig),
never from flags or appliance.yaml.`,
	}
	cmd.PersistentFlags().StringVarP(&pf.config, "config", "c", "", "appliance.yaml (with a provision section)")
	cmd.PersistentFlags().StringVar(&pf.assets, "assets", "", "the installer's asset directory (bootstrap.ign, master.ign, worker.ign, metadata.json)")
	apply := &cobra.Command{
		Use:   "apply",
		Short: "Create what is missing, in parallel, then start every VM",
		Args:  cobra.NoArgs,
		RunE:  pf.run(true, pf.runApply),
	}
	apply.Flags().IntVar(&pf.parallel, "parallel", 0, "VMs built at once (default provision.parallel)")
	apply.Flags().BoolVar(&pf.noStart, "no-start", false, "create the VMs but leave them powered off")
	apply.Flags().DurationVar(&pf.applyWait, "wait", 0, "after starting, wait up to this long until every VM runs and reports its expected address (e.g. 15m); 0 does not wait")
	apply.Flags().StringVar(&pf.ign.image, "image", "", "the appliance image the nodes run, as for 'appliance ignition --image' (registry/appliance@sha256:...)")
	apply.Flags().BoolVar(&pf.ign.noInject, "no-inject", false, "boot the installer's Ignition as it is, without the appliance's static pod and files")
	apply.Flags().StringVar(&pf.ign.serve, "serve-ignition", "", "ADDR:PORT of this machine, reachable from the VMs, to serve a config too large for the platform over HTTPS (the VM gets a pointer); runs while apply does")
	status := &cobra.Command{
		Use:   "status",
		Short: "Show each VM's power state and reported addresses",
		Args:  cobra.NoArgs,
		RunE:  pf.run(true, pf.runStatus),
	}
	status.Flags().DurationVar(&pf.wait, "wait", 0, "wait up to this long for every VM to report an address (e.g. 10m)")
	destroy := &cobra.Command{Use: "destroy", Short: "Remove every resource carrying the cluster's infra ID, and nothing else", Args: cobra.NoArgs, RunE: pf.run(false, pf.runDestroy)}
	destroy.Flags().BoolVar(&pf.bootstrap, "bootstrap", false, "remove only the bootstrap VM and what it owns (its disks, its Ignition), once every master runs, as 'openshift-install destroy bootstrap' does")
	cmd.AddCommand(
		&cobra.Command{Use: "plan", Short: "Print what apply would create and what already exists", Args: cobra.NoArgs, RunE: pf.run(true, pf.runPlan)},
		apply,
		status,
		destroy,
	)
	return cmd
}

// session is what every provision subcommand works with.
type session struct {
	log  *slog.Logger
	cfg  *cluster.Config
	spec *platform.Spec
	pr   platform.Provider
}

// open loads the config and assets, builds the spec (without the image) and
// connects to the platform. needAssets is false for destroy, which needs
// only the infra ID.
func (pf *provisionFlags) open(ctx context.Context, needAssets bool) (*session, error) {
	log, cfg, err := pf.g.serviceStart("provision", pf.config)
	if err != nil {
		return nil, err
	}
	if cfg.Provision == nil {
		return nil, fmt.Errorf("provision: %s has no provision section; add one, e.g.\n  provision:\n    platform: libvirt", pf.config)
	}
	s := &session{log: log, cfg: cfg}
	switch {
	case pf.assets != "":
		assets, err := platform.LoadAssets(pf.assets, platform.Roles(cfg))
		if err != nil {
			return nil, err
		}
		if s.spec, err = platform.BuildSpec(cfg, assets, platform.Image{}); err != nil {
			return nil, err
		}
	case needAssets:
		return nil, errors.New("provision: give --assets DIR, the installer's directory with bootstrap.ign, master.ign and worker.ign")
	default:
		infra := cfg.Provision.InfraID
		if infra == "" {
			infra = cfg.Cluster.Name
		}
		s.spec = &platform.Spec{InfraID: infra, ClusterName: cfg.Cluster.Name, BaseDomain: cfg.Cluster.BaseDomain}
	}
	if s.pr, err = openProvider(ctx, cfg.Provision, log); err != nil {
		return nil, fmt.Errorf("provision: %s: %w", cfg.Provision.Platform, err)
	}
	return s, nil
}

func (s *session) close() {
	if err := s.pr.Close(); err != nil {
		s.log.Warn("provision: closing the platform connection", "err", err)
	}
}

// run gives a subcommand its session inside a context that ends on Ctrl-C
// or SIGTERM (apply then stops beginning new VMs; a re-run resumes), and
// closes the platform connection after it.
func (pf *provisionFlags) run(needAssets bool, fn func(context.Context, *cobra.Command, *session) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		s, err := pf.open(ctx, needAssets)
		if err != nil {
			return err
		}
		defer s.close()
		return fn(ctx, cmd, s)
	}
}

func (pf *provisionFlags) runPlan(ctx context.Context, cmd *cobra.Command, s *session) error {
	// The checks go first: credentials that may not list what exists fail
	// the plan, and the checks say why in the platform's terms.
	var warnings bytes.Buffer
	checkErr := checkPlatform(ctx, &warnings, s)
	plan, err := platform.MakePlan(ctx, s.pr, s.spec)
	if err != nil {
		if checkErr != nil {
			return fmt.Errorf("provision plan: apply would fail:\n%w", checkErr)
		}
		return err
	}
	img := describeImage(ctx, s.cfg.Provision, s.log)
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "cluster %s, infra ID %s, platform %s\nimage: %s\n\n", s.cfg.Cluster.Domain(), s.spec.InfraID, platformWhere(s.cfg.Provision), img)
	printPlan(out, plan)
	if warnings.Len() > 0 {
		fmt.Fprintf(out, "\n%s", warnings.Bytes())
	}
	if checkErr != nil {
		return fmt.Errorf("provision plan: apply would fail:\n%w", checkErr)
	}
	return nil
}

// preflighter is a provider that can check, before anything is created,
// what its VMs need from the platform.
type preflighter interface {
	Preflight(context.Context, *platform.Spec) (warnings []string, err error)
}

// checkPlatform runs the provider's checks, when it has any, and prints their
// warnings; the error joins every refusal.
func checkPlatform(ctx context.Context, out io.Writer, s *session) error {
	pf, ok := s.pr.(preflighter)
	if !ok {
		return nil
	}
	warnings, err := pf.Preflight(ctx, s.spec)
	for _, w := range warnings {
		fmt.Fprintln(out, "warning:", w)
	}
	return err
}

// platformWhere names the platform and its endpoint for headers.
func platformWhere(p *cluster.Provision) string {
	switch p.Platform {
	case cluster.PlatformLibvirt:
		return fmt.Sprintf("libvirt (%s, pool %s)", p.Libvirt.URI, p.Libvirt.Pool)
	case cluster.PlatformOVirt:
		return fmt.Sprintf("ovirt (cluster %s)", p.OVirt.ClusterID)
	case cluster.PlatformKubeVirt:
		return fmt.Sprintf("kubevirt (namespace %s)", p.KubeVirt.Namespace)
	}
	return p.Platform
}

func addrs(as []netip.Addr) string {
	if len(as) == 0 {
		return "-"
	}
	ss := make([]string, len(as))
	for i, a := range as {
		ss[i] = a.String()
	}
	return strings.Join(ss, ",")
}

// printPlan writes the plan table and a one-line summary. It is pure output,
// kept apart from the platform calls so it can be tested.
func printPlan(w io.Writer, plan *platform.Plan) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tVM\tCPUS\tMEMORY\tDISK\tMAC\tADDRESSES\tIGNITION\tSTATE")
	counts := map[platform.Action]int{}
	for _, it := range plan.Items {
		m := it.Machine
		counts[it.Action]++
		state := "to create"
		switch it.Action {
		case platform.ActionComplete:
			state = "half-built: apply completes it"
		case platform.ActionNone:
			state = "exists (" + string(it.Existing.Power) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d MiB\t%d GiB\t%s\t%s\t%s\t%s\n",
			m.Node, m.Role, m.Name, m.CPUs, m.MemoryMiB, m.DiskGiB, m.MAC, addrs(m.IPs), m.IgnitionSource, state)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d to create, %d to complete, %d exist.\n", counts[platform.ActionCreate], counts[platform.ActionComplete], counts[platform.ActionNone])
	for _, v := range plan.Stray {
		fmt.Fprintf(w, "not in appliance.yaml but carrying the infra ID (apply leaves it, destroy removes it): %s (node %q)\n", v.Name, v.Node)
	}
}

func (pf *provisionFlags) runApply(ctx context.Context, cmd *cobra.Command, s *session) error {
	out := cmd.OutOrStdout()
	if pf.applyWait > 0 && pf.noStart {
		return errors.New("provision apply: --wait waits for the VMs to run, and --no-start leaves them off; give one of them")
	}
	// The appliance goes into copies of the assets; a config too large for
	// the platform is served from here while apply runs.
	boot, err := prepareIgnition(s.spec, s.cfg, pf.ign, cmd.ErrOrStderr(), s.log)
	if err != nil {
		return err
	}
	defer boot.close()
	if boot.server != nil {
		for _, r := range boot.served {
			fmt.Fprintf(out, "serving the %s Ignition at %s (CA generated for this run, in the VM's pointer config)\n", r, boot.server.ConfigURL(r))
		}
	}
	// Check before creating anything: a missing namespace, network or
	// storage class would otherwise surface half-way, or never.
	if err := checkPlatform(ctx, out, s); err != nil {
		return fmt.Errorf("provision apply: nothing created:\n%w", err)
	}

	plan, err := platform.MakePlan(ctx, s.pr, s.spec)
	if err != nil {
		return err
	}
	if plan.Pending() {
		// Only fetch (or find in the cache) the image when something will
		// be built from it.
		img, err := fetchImage(ctx, s.cfg.Provision, out, s.log)
		if err != nil {
			return err
		}
		s.spec.Image = img
	}
	parallel := s.cfg.Provision.Parallel
	if pf.parallel > 0 {
		parallel = pf.parallel
	}
	names := make([]string, len(s.spec.Machines))
	for i, m := range s.spec.Machines {
		names[i] = m.Name
	}
	pr := newProgress(out, names)
	res, err := platform.Apply(ctx, s.pr, s.spec, platform.ApplyOptions{Parallel: parallel, NoStart: pf.noStart, Progress: pr.event})
	pr.close()
	if res != nil {
		fmt.Fprintf(out, "\n%d created, %d completed, %d already there, %d started in %s.\n",
			len(res.Created), len(res.Completed), len(res.Existing), len(res.Started), res.Elapsed.Round(100e6))
	}
	if err != nil {
		return fmt.Errorf("provision apply: %w\nrun 'appliance provision apply' again to resume", err)
	}
	var awaiting []cluster.Role
	if boot.server != nil {
		awaiting = boot.awaiting(s.spec, res)
	}
	if pf.noStart {
		if len(awaiting) > 0 {
			fmt.Fprintf(out, "warning: the VMs are off, and the Ignition server stops now; their pointers carry this run's CA, so destroy them before the next apply serves again\n")
		}
		return nil
	}
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if pf.applyWait > 0 {
		wctx, cancel = context.WithTimeout(ctx, pf.applyWait)
	}
	defer cancel()
	if pf.applyWait > 0 {
		fmt.Fprintf(out, "\nwaiting up to %s for every VM to run and report its address:\n", pf.applyWait)
		wp := newWaitProgress(out, names)
		rows, err := platform.WaitRunning(wctx, s.pr, s.spec, 2*time.Second, wp.event)
		wp.close()
		if err != nil {
			return fmt.Errorf("provision apply: %w\n'appliance provision status' shows them; the VMs stay as they are", err)
		}
		fmt.Fprintf(out, "all %d VMs running with their addresses.\n", len(rows))
	}
	if len(awaiting) > 0 {
		// The VMs just built fetch their config at first boot, and only
		// from this server: it stays up until each role was fetched.
		fmt.Fprintf(out, "serving Ignition until the %s VMs have fetched it (Ctrl-C stops)...\n", joinRoles(awaiting))
		if err := boot.server.WaitFetched(wctx, awaiting); err != nil {
			return fmt.Errorf("provision apply: the %s VMs did not fetch their Ignition from %s: %w\ncheck that the VMs reach that address; they retry, so destroy them (the pointer carries this run's CA) and apply again", joinRoles(awaiting), pf.ign.serve, err)
		}
		fmt.Fprintln(out, "every served Ignition config was fetched.")
	}
	return nil
}

func joinRoles(rs []cluster.Role) string {
	ss := make([]string, len(rs))
	for i, r := range rs {
		ss[i] = string(r)
	}
	return strings.Join(ss, ", ")
}

func (pf *provisionFlags) runStatus(ctx context.Context, cmd *cobra.Command, s *session) error {
	if pf.wait <= 0 {
		rows, stray, err := platform.Status(ctx, s.pr, s.spec)
		if err != nil {
			return err
		}
		printStatus(cmd.OutOrStdout(), rows, stray)
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, pf.wait)
	defer cancel()
	rows, stray, err := platform.WaitAddresses(wctx, s.pr, s.spec, 2*time.Second)
	printStatus(cmd.OutOrStdout(), rows, stray)
	if err != nil {
		return fmt.Errorf("provision status: not every VM reported an address within %s: %w", pf.wait, err)
	}
	return nil
}

func printStatus(w io.Writer, rows []platform.StatusRow, stray []platform.VM) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tVM\tPOWER\tMAC\tREPORTED ADDRESSES\tEXPECTED")
	for _, r := range rows {
		power, mac, reported := "absent", r.Machine.MAC.String(), "-"
		if r.VM != nil {
			power = string(r.VM.Power)
			if !r.VM.Complete {
				power += " (half-built)"
			}
			if r.VM.MAC != nil {
				mac = r.VM.MAC.String()
			}
			reported = addrs(r.VM.Addresses)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Machine.Node, r.Machine.Name, power, mac, reported, addrs(r.Machine.IPs))
	}
	for _, v := range stray {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t(not in appliance.yaml)\n", v.Node, v.Name, v.Power, v.MAC, addrs(v.Addresses))
	}
	tw.Flush()
}

func (pf *provisionFlags) runDestroy(ctx context.Context, cmd *cobra.Command, s *session) error {
	if pf.bootstrap {
		return pf.runDestroyBootstrap(ctx, cmd, s)
	}
	removed, err := s.pr.Destroy(ctx, s.spec.InfraID)
	out := cmd.OutOrStdout()
	for _, r := range removed {
		fmt.Fprintln(out, "removed", r)
	}
	if err != nil {
		return fmt.Errorf("provision destroy: %w\nrun it again to remove the rest", err)
	}
	if len(removed) == 0 {
		fmt.Fprintf(out, "nothing carries infra ID %s on %s", s.spec.InfraID, platformWhere(s.cfg.Provision))
		if pf.assets == "" {
			fmt.Fprint(out, " (if apply read the infra ID from metadata.json, give --assets DIR)")
		}
		fmt.Fprintln(out)
	}
	return nil
}

// runDestroyBootstrap removes the bootstrap nodes' VMs, and only them, once
// every master's VM runs: the control plane no longer needs the bootstrap
// node after 'openshift-install wait-for bootstrap-complete'.
func (pf *provisionFlags) runDestroyBootstrap(ctx context.Context, cmd *cobra.Command, s *session) error {
	var boots, masters []string
	for _, n := range s.cfg.Nodes {
		switch n.Role {
		case cluster.RoleBootstrap:
			boots = append(boots, n.Name)
		case cluster.RoleMaster:
			masters = append(masters, n.Name)
		}
	}
	out := cmd.OutOrStdout()
	if len(boots) == 0 {
		fmt.Fprintf(out, "%s lists no bootstrap node: nothing to remove\n", pf.config)
		return nil
	}
	ready := func(vms []platform.VM) error {
		var down []string
		for _, m := range masters {
			got := platform.NodeVMs(vms, s.spec.InfraID, []string{m})
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
	removed, err := platform.DestroyNodes(ctx, s.pr, s.spec.InfraID, boots, ready)
	for _, r := range removed {
		fmt.Fprintln(out, "removed", r)
	}
	if err != nil {
		return fmt.Errorf("provision destroy --bootstrap: %w", err)
	}
	if len(removed) == 0 {
		fmt.Fprintf(out, "no VM of %s (infra ID %s) on %s", strings.Join(boots, ", "), s.spec.InfraID, platformWhere(s.cfg.Provision))
		if pf.assets == "" {
			fmt.Fprint(out, " (if apply read the infra ID from metadata.json, give --assets DIR)")
		}
		fmt.Fprintln(out)
	}
	return nil
}
