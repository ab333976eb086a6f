package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"appliance/app/soak"
)

type soakFlags struct {
	duration   time.Duration
	seed       uint64
	off        string
	reportDir  string
	kubeTools  string
	kubeAssets string
	needKube   bool
	stack      string
	coredns    string
}

// errSoakFailed makes the exit status non-zero when an invariant broke;
// the report has said which.
var errSoakFailed = errors.New("soak: an invariant broke (see the report)")

func newSoakCmd(g *globalFlags) *cobra.Command {
	f := &soakFlags{}
	cmd := &cobra.Command{
		Use:    "soak",
		Short:  "Run the lab's cluster under constant load and seeded random faults, checking invariants (needs root)",
		Hidden: true,
		Long: `Builds the lab's cluster in network namespaces (a bootstrap, three masters and
two workers on "appliance run", stand-in apiservers, MCSs and routers, a real
kube-apiserver when the shared tools are there), calls the API through its VIP
(new connections and long-lived streams), asks every node's DNS, renews DHCP
leases, and injects faults on a schedule drawn from --seed for --duration. It
prints a line per fault and a summary, writes report.json (its path is the last
line) and exits 0 only when every invariant held. --stack classic runs
keepalived, haproxy and CoreDNS on the nodes instead, for "soak compare".

Fault kinds: ` + soak.KindList() + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("soak: %w", err)
			}
			off, err := soak.ParseKinds(f.off)
			if err != nil {
				return fmt.Errorf("soak: --off: %w", err)
			}
			rep, err := soak.Run(cmd.Context(), soak.Options{
				Exe: exe, Out: cmd.OutOrStdout(), Duration: f.duration, Seed: f.seed, Off: off,
				ReportDir: f.reportDir, LogLevel: g.logLevel, Stack: f.stack, CoreDNS: f.coredns, KubeTools: f.kubeTools, KubeAssets: f.kubeAssets, RequireKube: f.needKube,
			})
			if err != nil {
				return err
			}
			if !rep.Passed {
				return errSoakFailed
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&f.duration, "duration", 3*time.Minute, "how long the load and the faults run")
	cmd.Flags().Uint64Var(&f.seed, "seed", 1, "the schedule's seed: the same seed and duration give the same faults")
	cmd.Flags().StringVar(&f.off, "off", "", "fault kinds not to inject, comma-separated")
	cmd.Flags().StringVar(&f.reportDir, "report-dir", "", "where report.json and the logs go (default soak-reports/<time>-seed<seed>)")
	cmd.Flags().StringVar(&f.kubeTools, "kube-tools", "../shared/tools/kube-apiserver",
		"folder of the kube-apiserver scripts (start.sh); without them the soak runs no Kubernetes API")
	cmd.Flags().StringVar(&f.kubeAssets, "kube-assets", os.Getenv("KUBEBUILDER_ASSETS"),
		"folder of the kube-apiserver, etcd and kubectl binaries (what the scripts' build.sh prints)")
	cmd.Flags().StringVar(&f.stack, "stack", soak.StackAppliance, "what runs the nodes' network services: "+soak.StackAppliance+
		", or "+soak.StackClassic+" (keepalived, haproxy and CoreDNS as OpenShift configures them, for the side-by-side)")
	cmd.Flags().StringVar(&f.coredns, "coredns", "", "the CoreDNS binary of --stack "+soak.StackClassic)
	cmd.Flags().BoolVar(&f.needKube, "require-kube", false, "fail when the kube-apiserver cannot run, rather than skip the Kubernetes faults")
	cmd.AddCommand(newSoakCompareCmd())
	return cmd
}

// newSoakCompareCmd prints two soaks' reports side by side.
func newSoakCompareCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "compare REPORT.json REPORT.json",
		Short: "Print two soaks (one schedule on two stacks) side by side",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := soak.ReadReport(args[0])
			if err != nil {
				return err
			}
			b, err := soak.ReadReport(args[1])
			if err != nil {
				return err
			}
			soak.Compare(cmd.OutOrStdout(), a, b)
			return nil
		},
	}
}
