package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options configure a soak.
type Options struct {
	// Exe is the appliance binary every node runs (and the stand-ins).
	Exe string
	// Out receives the live lines and the summary; the report's path is
	// its last line.
	Out io.Writer
	// Duration is how long the load runs, faults included.
	Duration time.Duration
	// Seed makes the schedule: the same seed and Duration give the same
	// faults at the same times.
	Seed uint64
	// Off lists the fault kinds not to inject.
	Off []Kind
	// ReportDir is where report.json and the processes' logs go; empty:
	// soak-reports/<time>-seed<seed> under the working directory.
	ReportDir string
	// LogLevel is passed to every appliance.
	LogLevel string
	// KubeTools and KubeAssets give the soak a real kube-apiserver (the
	// Node source), as for `appliance lab`; without them it runs none and
	// says why.
	KubeTools, KubeAssets string
	// RequireKube makes a soak without its kube-apiserver an error rather
	// than a run that skips the Kubernetes faults (CI: the tools are there
	// and must work).
	RequireKube bool
	// Stack is what runs the nodes' network services: StackAppliance
	// (the default) or StackClassic, whose CoreDNS binary is CoreDNS.
	Stack, CoreDNS string
	// CallEvery is the pause between API calls on new connections;
	// Streams the number of long-lived streams; DNSEvery the pause
	// between rounds of DNS questions to each node; DHCPEvery between a
	// DHCP client's renewals; SampleEvery between readings of the
	// processes.
	CallEvery, DNSEvery, DHCPEvery, SampleEvery time.Duration
	Streams                                     int
}

func (o *Options) fill() error {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Exe == "" {
		return errors.New("soak: no appliance binary given")
	}
	if o.Duration <= 0 {
		o.Duration = 3 * time.Minute
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if o.CallEvery <= 0 {
		o.CallEvery = 40 * time.Millisecond
	}
	if o.Streams <= 0 {
		o.Streams = 4
	}
	if o.DNSEvery <= 0 {
		o.DNSEvery = time.Second
	}
	if o.DHCPEvery <= 0 {
		o.DHCPEvery = 15 * time.Second
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 5 * time.Second
	}
	if o.ReportDir == "" {
		o.ReportDir = filepath.Join("soak-reports", fmt.Sprintf("%s-seed%d", time.Now().Format("20060102-150405"), o.Seed))
	}
	if os.Geteuid() != 0 {
		return errors.New("soak: needs root (network namespaces and raw sockets)")
	}
	return nil
}

// soak is one run.
type soak struct {
	ctx       context.Context
	o         Options
	c         *cluster
	rec       *recorder
	start     time.Time // the soak's own start
	loadStart time.Time // the schedule's zero
	outMu     sync.Mutex
}

// say prints a live line, stamped with the time since the load began.
func (s *soak) say(format string, args ...any) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	at := time.Since(s.start)
	if !s.loadStart.IsZero() {
		at = time.Since(s.loadStart)
	}
	fmt.Fprintf(s.o.Out, "%8.3fs  %s\n", at.Seconds(), fmt.Sprintf(format, args...))
}

// Run builds the cluster, runs the load and the schedule for
// o.Duration, checks the invariants all along, removes the cluster and
// writes the report. The error is about the soak itself; the report says
// whether every invariant held (Report.Passed).
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	svc, err := newServices(&o)
	if err != nil {
		return nil, err
	}
	s := &soak{ctx: ctx, o: o, rec: &recorder{}, start: time.Now()}
	plan := Plan(o.Seed, o.Duration, o.Off)
	fmt.Fprintf(o.Out, "soak: %s stack, seed %d, %s, %d faults planned (%s)\n", svc.name(), o.Seed, o.Duration, len(plan), planSummary(plan))
	s.c = &cluster{ctx: ctx, o: &s.o, svc: svc, logf: s.say}
	rep, err := s.run(plan)
	logDir := filepath.Join(o.ReportDir, "logs")
	if cerr := s.c.close(logDir); cerr != nil && err == nil {
		err = fmt.Errorf("soak: removing the lab: %w", cerr)
	}
	if rep == nil {
		return nil, err
	}
	rep.Logs = logDir
	path, werr := rep.write(o.ReportDir)
	if werr != nil && err == nil {
		err = werr
	}
	rep.print(o.Out)
	fmt.Fprintf(o.Out, "report: %s\n", path)
	return rep, err
}

func planSummary(plan []Fault) string {
	n := map[Kind]int{}
	for _, f := range plan {
		n[f.Kind]++
	}
	var parts []string
	for _, k := range Kinds() {
		if n[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, n[k]))
		}
	}
	return strings.Join(parts, ", ")
}

func (s *soak) run(plan []Fault) (*Report, error) {
	c := s.c
	if err := c.build(); err != nil {
		return nil, err
	}
	if why := kubeMissing(&s.o); why == "" {
		if err := c.startKube(); err != nil {
			if s.ctx.Err() != nil {
				return nil, s.ctx.Err()
			}
			c.kubeWhy = fmt.Sprintf("the kube-apiserver did not start (%v)", err)
			c.kube = nil
		}
	} else {
		c.kubeWhy = why
	}
	if c.kube == nil && s.o.RequireKube {
		return nil, fmt.Errorf("soak: no Kubernetes API, and it is required: %s", c.kubeWhy)
	}
	c.cfgPath = filepath.Join(c.lab.Dir(), "appliance.yaml")
	if err := os.WriteFile(c.cfgPath, []byte(c.config()), 0o644); err != nil {
		return nil, err
	}
	if c.kube != nil {
		for _, nd := range c.nodes {
			if nd.role != roleBootstrap {
				if err := c.kube.createNode(nd.name, nd.role, nd.addr()); err != nil {
					return nil, err
				}
			}
		}
	}
	// The DHCP node answers ARP only for the addresses of the interface
	// asked, so each pool client's address answers with its own MAC.
	for k, v := range map[string]string{"net.ipv4.conf.all.arp_ignore": "1", "net.ipv4.conf.all.arp_announce": "2"} {
		if err := c.dhcpNode.Sysctl(k, v); err != nil {
			return nil, err
		}
	}
	if err := c.startAll(); err != nil {
		return nil, err
	}
	// The bootstrap holds the API VIP first, as in an install.
	end := time.Now().Add(60 * time.Second)
	for c.holderOf(apiVIP) != c.node("bootstrap") || c.holderOf(ingressVIP) == nil {
		if time.Now().After(end) {
			return nil, fmt.Errorf("soak: 60 s after start the API VIP is on %s and the ingress VIP on %s; want the bootstrap and a worker",
				holderText(c, apiVIP), holderText(c, ingressVIP))
		}
		select {
		case <-s.ctx.Done():
			return nil, s.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	kube := "none: " + c.kubeWhy
	if c.kube != nil {
		kube = c.kube.upstream
	}
	s.say("cluster up: API VIP on %s, ingress VIP on %s; Kubernetes API %s", holderText(c, apiVIP), holderText(c, ingressVIP), kube)

	loadCtx, stopLoad := context.WithCancel(s.ctx)
	defer stopLoad()
	// The DHCP clients' links first: a failure here returns before any
	// load or monitor runs, so none outlives the cluster.
	dh := &dhcpLoad{ctx: loadCtx, c: c, rec: s.rec, every: s.o.DHCPEvery}
	if c.svc.dhcp() {
		if err := dh.setup(); err != nil {
			return nil, err
		}
	}
	s.loadStart = time.Now()
	var mon sync.WaitGroup
	c.svc.loops(loadCtx, c, &mon)
	watchHolders(loadCtx, c, s.rec, &mon)
	sampleProcs(loadCtx, c, s.rec, s.o.SampleEvery, &mon)
	api := &apiLoad{ctx: loadCtx, from: c.client, every: s.o.CallEvery, rec: s.rec}
	api.run(s.o.Streams)
	day2 := &day2State{}
	dnsl := &dnsLoad{ctx: loadCtx, c: c, rec: s.rec, every: s.o.DNSEvery, day2: day2}
	dnsl.run()
	dhcpLine := "no DHCP (the stack has no DHCP server)"
	if c.svc.dhcp() {
		dh.run()
		dhcpLine = fmt.Sprintf("%d DHCP clients renewing every %s", len(dh.clients), s.o.DHCPEvery)
	}
	s.say("load: API calls every %s on new connections and %d streams through %s; DNS to every node every %s; %s",
		s.o.CallEvery, s.o.Streams, vipAPI, s.o.DNSEvery, dhcpLine)

	inj := &injector{s: s, c: c, day2: day2, upsOn: map[int]bool{}, unrdy: map[string]bool{}}
	var faults sync.WaitGroup
	for _, f := range plan {
		faults.Add(1)
		go func() {
			defer faults.Done()
			inj.run(f)
		}()
	}
	// A line every 30 s with the load's totals.
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	deadline := time.NewTimer(s.o.Duration)
	defer deadline.Stop()
	interrupted := false
wait:
	for {
		select {
		case <-s.ctx.Done():
			interrupted = true
			break wait
		case <-deadline.C:
			break wait
		case <-tick.C:
			n := s.rec.counts(s.loadStart)
			s.say("load: %d calls (%d failed), %d streams ended (%d broken), %d DNS (%d failed or wrong), %d DHCP (%d bad); API VIP on %s",
				n.calls, n.failedCalls, n.streams, n.brokenStreams, n.dns, n.dnsBad, n.dhcp, n.dhcpBad, holderText(c, apiVIP))
		}
	}
	loadEnd := time.Now()
	stopLoad()
	faults.Wait()
	api.wait()
	dnsl.wait()
	dh.wait()
	mon.Wait()
	s.say("load stopped")
	rep := s.analyse(inj, loadEnd)
	rep.Interrupted = interrupted
	rep.Passed = rep.Passed && !interrupted
	if c.kube == nil {
		rep.Kube = "none: " + c.kubeWhy
	} else {
		rep.Kube = "kube-apiserver " + c.kube.upstream
	}
	if interrupted {
		return rep, s.ctx.Err()
	}
	return rep, nil
}

// kindOff reports whether the options switched k off.
func (o *Options) kindOff(k Kind) bool { return slices.Contains(o.Off, k) }
