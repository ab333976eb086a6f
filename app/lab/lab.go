package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
)

// Domain is the lab cluster's domain: cluster ocp4, base domain example.com.
const Domain = "ocp4.example.com"

// adminListen is `appliance run`'s admin listener inside every node (each
// node has its own loopback).
const adminListen = "127.0.0.1:9447"

// The lab's VIPs on the default netlab network 192.168.126.0/24.
var (
	apiVIP     = netip.MustParseAddr("192.168.126.5")
	ingressVIP = netip.MustParseAddr("192.168.126.6")
)

// Options configure a run of the lab.
type Options struct {
	// Exe is the appliance binary every node runs.
	Exe string
	// Out receives the lab's story.
	Out io.Writer
	// LogLevel and LogFormat are passed to every process the lab starts;
	// their logs are in the lab's directory.
	LogLevel, LogFormat string
	// AdvertInterval is the VRRP advert interval; 0: the cluster default.
	AdvertInterval time.Duration
	// Keep keeps the lab up after the scenario until ctx ends.
	Keep bool
	// Kube, when set, makes the day-2 worker join through a real
	// kube-apiserver; see KubeOptions.
	Kube KubeOptions
	// Pace scales the pauses the lab makes to let the reader see a steady
	// state; 0 means 1. Tests use a small one.
	Pace float64
	// Kubelet, when set, runs every node's appliance through a real
	// kubelet, as the static pod a node runs; nil runs `appliance run`
	// processes with the lab's flags.
	Kubelet *KubeletOptions
}

// Result is what the lab measured, for tests and summaries.
type Result struct {
	// BootstrapHeldVIP: the bootstrap held the API VIP before the handover.
	BootstrapHeldVIP bool
	// MCSBefore and MCSAfter name the node whose MCS answered
	// /config/worker through the VIP before and after the masters were up.
	MCSBefore, MCSAfter string
	// HandoverTook is from the bootstrap's apiserver failing to a master
	// holding the API VIP; HandoverFailed and HandoverReset count the
	// client's calls that failed to connect or were reset in flight from
	// then until the bootstrap was gone.
	HandoverTook                  time.Duration
	HandoverCalls                 int
	HandoverFailed, HandoverReset int
	// Killed is the master killed; KillOutage the client's longest time
	// without an answer after it; KillFailed its calls that failed.
	Killed     string
	KillOutage time.Duration
	KillFailed int
	// Day2Via says how the day-2 worker joined ("kubernetes" or "mdns");
	// Day2DNS is from its joining to a master's DNS answering its name
	// (0: never within the wait), Day2Answer the answer.
	Day2Via    string
	Day2DNS    time.Duration
	Day2Answer string
	// Day2WorkerDNS is when worker-0's DNS answered, when it did not at
	// once.
	Day2WorkerDNS time.Duration
	// DHCPReserved and DHCPPool say what worker-0 (a reservation) and the
	// day-2 worker (the pool) were answered.
	DHCPReserved, DHCPPool string
}

// run is one run of the lab.
type run struct {
	ctx   context.Context
	o     Options
	lab   *netlab.Lab
	start time.Time
	cfg   string
	res   Result

	boot    *netlab.Node
	masters []*netlab.Node
	workers []*netlab.Node
	client  *netlab.Node
	names   map[*netlab.Node]string
	procs   map[string]*netlab.Process // "run/master-0", "apiserver/master-0", ...
	caller  *caller
	kube    *kube     // nil: no Kubernetes API
	kubeErr string    // why the Kubernetes API failed to start
	kl      *kubelets // nil: the appliances run as processes
}

// Run builds the lab, plays the scenario and removes the lab; it needs
// root. Cancelling ctx (Ctrl-C) stops it early and cleans up; the Result
// then holds what was measured so far.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if o.LogFormat == "" {
		o.LogFormat = "text"
	}
	if o.AdvertInterval == 0 {
		o.AdvertInterval = cluster.DefaultAdvertInterval
	}
	if o.Pace == 0 {
		o.Pace = 1
	}
	if o.Exe == "" {
		return nil, errors.New("lab: no appliance binary given")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("lab: needs root (network namespaces and raw sockets)")
	}
	var kl *kubelets
	if o.Kubelet != nil {
		var err error
		if kl, err = newKubelets(*o.Kubelet); err != nil {
			return nil, err
		}
	}
	// bootstrap, 3 masters, 2 workers, the client; the day-2 worker joins later.
	lab, err := netlab.New(ctx, netlab.Options{Nodes: 7, Name: "lab"})
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	r := &run{ctx: ctx, o: o, lab: lab, start: time.Now(), names: map[*netlab.Node]string{}, procs: map[string]*netlab.Process{}, kl: kl}
	r.boot, r.masters, r.workers, r.client = lab.Nodes[0], lab.Nodes[1:4], lab.Nodes[4:6], lab.Nodes[6]
	r.names[r.boot] = "bootstrap"
	for i, n := range r.masters {
		r.names[n] = fmt.Sprintf("master-%d", i)
	}
	for i, n := range r.workers {
		r.names[n] = fmt.Sprintf("worker-%d", i)
	}
	r.names[r.client] = "client"
	err = r.play()
	if r.caller != nil {
		r.caller.close()
	}
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(o.Out, "\ninterrupted")
		err = nil
	case err != nil:
		fmt.Fprintf(o.Out, "\nlab failed: %v\n", err)
		r.tails(10)
	}
	fmt.Fprintln(o.Out, "removing the lab (namespaces, processes, files)")
	if r.kl != nil {
		// Before the namespaces go: the kubelets stop their pods with
		// their grace period.
		if kerr := r.stopKubelets(); kerr != nil && err == nil {
			err = fmt.Errorf("lab: %w", kerr)
		}
	}
	// Close also ends etcd and kube-apiserver: they run inside a node.
	if cerr := lab.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("lab: %w", cerr)
	}
	return &r.res, err
}

func (r *run) play() error {
	for _, s := range []func() error{r.setup, r.bootstrapSection, r.mastersSection, r.teardownSection,
		r.killSection, r.day2Section} {
		if err := s(); err != nil {
			return err
		}
	}
	r.summary()
	if r.o.Keep {
		fmt.Fprintf(r.o.Out, "\nkeeping the lab up (namespaces %s-*, files in %s); Ctrl-C to remove it\n",
			r.lab.Prefix(), r.lab.Dir())
		<-r.ctx.Done()
	}
	return nil
}

func (r *run) header(title string, lines ...string) {
	fmt.Fprintf(r.o.Out, "\n=== %s\n", title)
	for _, s := range lines {
		fmt.Fprintf(r.o.Out, "    %s\n", s)
	}
}

func (r *run) say(format string, args ...any) {
	fmt.Fprintf(r.o.Out, "%7.3fs  %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// pause waits d scaled by the pace, or until ctx ends.
func (r *run) pause(d time.Duration) error {
	return r.sleep(time.Duration(float64(d) * r.o.Pace))
}

func (r *run) sleep(d time.Duration) error {
	select {
	case <-r.ctx.Done():
		return r.ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// until polls cond every 50 ms until it holds (true) or max passes (false).
func (r *run) until(max time.Duration, cond func() bool) (bool, error) {
	end := time.Now().Add(max)
	for {
		if cond() {
			return true, nil
		}
		if time.Now().After(end) {
			return false, nil
		}
		if err := r.sleep(50 * time.Millisecond); err != nil {
			return false, err
		}
	}
}

// tails prints the last n lines of every appliance's log, before Close
// removes them.
func (r *run) tails(n int) {
	if r.kl != nil {
		r.podTails(n)
		return
	}
	keys := make([]string, 0, len(r.procs))
	for k := range r.procs {
		if strings.HasPrefix(k, "run/") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		lines := strings.Split(strings.TrimRight(r.procs[k].Output(), "\n"), "\n")
		fmt.Fprintf(r.o.Out, "\n--- %s, last lines of its log:\n", k)
		for _, l := range lines[max(0, len(lines)-n):] {
			fmt.Fprintf(r.o.Out, "    %s\n", l)
		}
	}
}

// startApp starts the appliance binary with args inside n, tracked as key.
func (r *run) startApp(n *netlab.Node, key string, args ...string) error {
	full := append([]string{"--log-level", r.o.LogLevel, "--log-format", r.o.LogFormat}, args...)
	p, err := n.Start(r.ctx, r.o.Exe, full...)
	if err != nil {
		return fmt.Errorf("lab: %s: %w", key, err)
	}
	r.procs[key] = p
	return nil
}

func (r *run) startRun(n *netlab.Node, cfg string, extra ...string) error {
	name := r.names[n]
	// Each node keeps its own pool leases, as on its own disk.
	args := append([]string{"run", "--config", cfg, "--node", name, "--admin-listen", adminListen,
		"--dhcp-leases", filepath.Join(r.lab.Dir(), "dhcp-leases-"+name+".json")}, r.kubeRunArgs()...)
	return r.startApp(n, "run/"+name, append(args, extra...)...)
}

func (r *run) startAPIServer(n *netlab.Node) error {
	name := r.names[n]
	return r.startApp(n, "apiserver/"+name, append([]string{"lab", "apiserver", "--listen", ":6443", "--name", name,
		"--fail-file", r.failFile(n)}, r.upstreamArgs()...)...)
}

func (r *run) startMCS(n *netlab.Node) error {
	name := r.names[n]
	return r.startApp(n, "mcs/"+name, "lab", "mcs", "--listen", ":22623", "--name", name)
}

func (r *run) startRouter(n *netlab.Node) error {
	name := r.names[n]
	return r.startApp(n, "router/"+name, "lab", "router", "--name", name)
}

func (r *run) failFile(n *netlab.Node) string {
	return filepath.Join(r.lab.Dir(), "fail-readyz-"+r.names[n])
}

// kill SIGKILLs the tracked process key, if it runs.
func (r *run) kill(key string) error {
	if p, ok := r.procs[key]; ok {
		if err := p.Kill(); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		_ = p.Wait()
	}
	return nil
}

// config is the cluster's appliance.yaml: every node reads the same one.
// Without nodes it is the one a day-2 worker gets: `appliance run` refuses
// a --node missing from a nodes list, and accepts any name without one.
func (r *run) config(nodes bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: %s
  interface: eth0
  apiVIPs: [%s]
  ingressVIPs: [%s]
  upstreamDNS: [192.168.126.1]   # nobody: the lab has no way out
nodes:`, r.boot.IPv4.Masked(), apiVIP, ingressVIP)
	for _, n := range append(append([]*netlab.Node{r.boot}, r.masters...), r.workers...) {
		if !nodes {
			b.WriteString("  []\n")
			break
		}
		if n == r.boot {
			b.WriteString("\n")
		}
		role := strings.TrimRight(r.names[n], "-0123456789")
		fmt.Fprintf(&b, "  - {name: %s, role: %s, mac: %s, ips: [%s]}   # namespace %s\n", r.names[n], role, n.MAC, n.IPv4.Addr(), n.Name)
	}
	fmt.Fprintf(&b, "vrrp: {advertInterval: %s}\nlb: {mcs: true}\ndns: {mdns: true}\n", r.o.AdvertInterval)
	start, end := r.dhcpPool()
	fmt.Fprintf(&b, "dhcp: {enabled: true, leaseTime: 1h, pool: {start: %s, end: %s}}   # on the bootstrap and masters\n", start, end)
	return b.String()
}

// healthy reports whether n's appliance answers /healthz.
func healthy(n *netlab.Node) bool {
	code, _, _, err := get(n, adminListen, "localhost", "/healthz", false, time.Second)
	return err == nil && code == http.StatusOK
}

// holder names the node of nodes holding addr ("nobody", or "a+b" when
// several do).
func (r *run) holder(addr netip.Addr, nodes ...*netlab.Node) string {
	if len(nodes) == 0 {
		nodes = r.cluster()
	}
	var hs []string
	for _, n := range nodes {
		if holds(n, addr) {
			hs = append(hs, r.names[n])
		}
	}
	if len(hs) == 0 {
		return "nobody"
	}
	return strings.Join(hs, "+")
}

// cluster is every node running the appliance, the day-2 worker included.
func (r *run) cluster() []*netlab.Node {
	out := append([]*netlab.Node{r.boot}, r.masters...)
	return append(out, r.workers...)
}

func (r *run) node(name string) *netlab.Node {
	for n, s := range r.names {
		if s == name {
			return n
		}
	}
	return nil
}
