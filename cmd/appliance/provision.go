package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"appliance/app/provision"
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

// ignitionFlags are apply's say over the Ignition each VM boots with.
type ignitionFlags struct {
	image    string // --image, as `appliance ignition --image`
	noInject bool   // --no-inject: the assets as they are
	serve    string // --serve-ignition ADDR:PORT
}

// run gives a subcommand its session inside a context that ends on Ctrl-C
// or SIGTERM (apply then stops beginning new VMs; a re-run resumes), and
// closes the platform connection after it. needAssets is false for
// destroy, which needs only the infra ID.
func (pf *provisionFlags) run(needAssets bool, fn func(context.Context, *cobra.Command, *provision.Session) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		log, cfg, err := pf.g.serviceStart("provision", pf.config)
		if err != nil {
			return err
		}
		s, err := provision.Open(ctx, provision.Options{Config: cfg, ConfigPath: pf.config, Assets: pf.assets, NeedAssets: needAssets}, log)
		if err != nil {
			return err
		}
		defer s.Close()
		return fn(ctx, cmd, s)
	}
}

func (pf *provisionFlags) runPlan(ctx context.Context, cmd *cobra.Command, s *provision.Session) error {
	rep, err := s.Plan(ctx)
	if rep != nil {
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "cluster %s, infra ID %s, platform %s\nimage: %s\n\n", rep.Domain, rep.InfraID, rep.Where, rep.Image)
		printPlan(out, rep.Plan)
		if len(rep.Warnings) > 0 {
			fmt.Fprintln(out)
			for _, w := range rep.Warnings {
				fmt.Fprintln(out, "warning:", w)
			}
		}
	}
	return err
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

// printPlan writes the plan table and a one-line summary.
func printPlan(w io.Writer, plan *provision.Plan) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tVM\tCPUS\tMEMORY\tDISK\tMAC\tADDRESSES\tIGNITION\tSTATE")
	counts := map[provision.Action]int{}
	for _, it := range plan.Items {
		m := it.Machine
		counts[it.Action]++
		state := "to create"
		switch it.Action {
		case provision.ActionComplete:
			state = "half-built: apply completes it"
		case provision.ActionNone:
			state = "exists (" + string(it.Existing.Power) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d MiB\t%d GiB\t%s\t%s\t%s\t%s\n",
			m.Node, m.Role, m.Name, m.CPUs, m.MemoryMiB, m.DiskGiB, m.MAC, addrs(m.IPs), m.IgnitionSource, state)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d to create, %d to complete, %d exist.\n", counts[provision.ActionCreate], counts[provision.ActionComplete], counts[provision.ActionNone])
	for _, v := range plan.Stray {
		fmt.Fprintf(w, "not in appliance.yaml but carrying the infra ID (apply leaves it, destroy removes it): %s (node %q)\n", v.Name, v.Node)
	}
}

func (pf *provisionFlags) runApply(ctx context.Context, cmd *cobra.Command, s *provision.Session) error {
	lines := newApplyLines(cmd.OutOrStdout(), cmd.ErrOrStderr())
	defer lines.close()
	_, err := s.Apply(ctx, provision.ApplyOptions{
		Parallel: pf.parallel,
		NoStart:  pf.noStart,
		Wait:     pf.applyWait,
		Ignition: provision.Ignition{Files: bootstrapOptions(s.Config(), pf.ign.image), NoInject: pf.ign.noInject, Serve: pf.ign.serve},
	}, lines.event)
	return err
}

func (pf *provisionFlags) runStatus(ctx context.Context, cmd *cobra.Command, s *provision.Session) error {
	rep, err := s.Status(ctx, pf.wait)
	if rep != nil {
		printStatus(cmd.OutOrStdout(), rep.Rows, rep.Stray)
	}
	return err
}

func printStatus(w io.Writer, rows []provision.StatusRow, stray []provision.VM) {
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

func (pf *provisionFlags) runDestroy(ctx context.Context, cmd *cobra.Command, s *provision.Session) error {
	var rep *provision.DestroyReport
	var err error
	if pf.bootstrap {
		rep, err = s.DestroyBootstrap(ctx)
	} else {
		rep, err = s.Destroy(ctx)
	}
	printDestroy(cmd.OutOrStdout(), pf.config, pf.bootstrap, rep, err)
	return err
}

// printDestroy writes a line per removed resource and, when a destroy
// that succeeded removed nothing, what it looked for (config names
// appliance.yaml, bootstrap says destroy --bootstrap).
func printDestroy(out io.Writer, config string, bootstrap bool, rep *provision.DestroyReport, err error) {
	if bootstrap && len(rep.Nodes) == 0 {
		fmt.Fprintf(out, "%s lists no bootstrap node: nothing to remove\n", config)
		return
	}
	for _, r := range rep.Removed {
		fmt.Fprintln(out, "removed", r)
	}
	if err != nil || len(rep.Removed) > 0 {
		return
	}
	if bootstrap {
		fmt.Fprintf(out, "no VM of %s (infra ID %s) on %s", strings.Join(rep.Nodes, ", "), rep.InfraID, rep.Where)
	} else {
		fmt.Fprintf(out, "nothing carries infra ID %s on %s", rep.InfraID, rep.Where)
	}
	if rep.NoAssets {
		fmt.Fprint(out, " (if apply read the infra ID from metadata.json, give --assets DIR)")
	}
	fmt.Fprintln(out)
}
