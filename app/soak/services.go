package soak

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Stacks the soak can run on its nodes.
const (
	// StackAppliance is `appliance run` on every node.
	StackAppliance = "appliance"
	// StackClassic is what the appliance replaces: keepalived, haproxy and
	// CoreDNS with OpenShift's configurations, kept up to date by loops
	// that do what runtimecfg's monitors do.
	StackClassic = "classic"
)

// services is what provides a node's network services in the soak: the
// VIPs, the API's load balancer, the node DNS (and DHCP). The faults stop
// and start them through it, the monitor samples its processes.
type services interface {
	// name is the stack's name in the report and the summary.
	name() string
	// what names a node's services in the live lines.
	what() string
	// prepare writes what every node shares, before any start.
	prepare(c *cluster) error
	// start starts nd's services.
	start(c *cluster, nd *node) error
	// stop ends them: SIGKILL at once with kill, else SIGTERM and up to
	// grace for each to exit.
	stop(c *cluster, nd *node, kill bool, grace time.Duration) error
	// ready waits until nd's services answer.
	ready(c *cluster, nd *node, within time.Duration) error
	// keys are nd's process keys that belong to the services.
	keys(nd *node) []string
	// loops starts what keeps the services configured while the load
	// runs, until ctx ends.
	loops(ctx context.Context, c *cluster, wg *sync.WaitGroup)
	// dhcp reports whether the stack serves DHCP.
	dhcp() bool
	// metrics reports whether the processes export the appliance's
	// /metrics (goroutines, vip_held).
	metrics() bool
}

// newServices returns the stack the options name.
func newServices(o *Options) (services, error) {
	switch o.Stack {
	case "", StackAppliance:
		return applianceServices{}, nil
	case StackClassic:
		if o.CoreDNS == "" {
			return nil, errors.New("soak: --stack classic needs --coredns, the CoreDNS binary (make soak-classic builds it)")
		}
		if _, err := os.Stat(o.CoreDNS); err != nil {
			return nil, fmt.Errorf("soak: --coredns: %w", err)
		}
		return &classicServices{coredns: o.CoreDNS, rendered: map[string]string{}}, nil
	}
	return nil, fmt.Errorf("soak: --stack %q: want %s or %s", o.Stack, StackAppliance, StackClassic)
}

// applianceServices is `appliance run` on every node, as its static pod
// runs it.
type applianceServices struct{}

func (applianceServices) name() string                                     { return StackAppliance }
func (applianceServices) what() string                                     { return "appliance" }
func (applianceServices) prepare(*cluster) error                           { return nil }
func (applianceServices) keys(*node) []string                              { return []string{"run"} }
func (applianceServices) dhcp() bool                                       { return true }
func (applianceServices) metrics() bool                                    { return true }
func (applianceServices) loops(context.Context, *cluster, *sync.WaitGroup) {}

func (applianceServices) start(c *cluster, nd *node) error {
	args := []string{"run", "--config", c.cfgPath, "--node", nd.name, "--admin-listen", adminListen,
		"--dhcp-leases", filepath.Join(c.lab.Dir(), "dhcp-leases-"+nd.name+".json")}
	if c.kube != nil {
		args = append(args, "--kubeconfig", c.kube.viaVIP)
	}
	if err := c.start(nd, "run", args...); err != nil {
		return err
	}
	nd.markRestarted()
	return nil
}

func (applianceServices) stop(c *cluster, nd *node, kill bool, grace time.Duration) error {
	return c.stop(nd, "run", kill, grace)
}

// ready waits until nd's appliance answers /healthz.
func (applianceServices) ready(c *cluster, nd *node, within time.Duration) error {
	p := nd.proc("run")
	end := time.Now().Add(within)
	for {
		select {
		case <-p.Done():
			return fmt.Errorf("soak: appliance run on %s exited: %v\n%s", nd.name, p.Wait(), tail(p.Output(), 20))
		case <-c.ctx.Done():
			return c.ctx.Err()
		default:
		}
		if code, _, err := adminGet(nd.n, "/healthz", time.Second); err == nil && code == 200 {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("soak: appliance run on %s does not answer /healthz after %s\n%s", nd.name, within, tail(p.Output(), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (nd *node) markRestarted() {
	nd.mu.Lock()
	nd.restarted = time.Now()
	nd.mu.Unlock()
}

// stopAll ends nd's processes keys together, as a node's pods go: SIGKILL
// to each with kill, else SIGTERM to each and up to grace for all.
func (c *cluster) stopAll(nd *node, keys []string, kill bool, grace time.Duration) error {
	if len(keys) == 1 {
		return c.stop(nd, keys[0], kill, grace)
	}
	var errs []error
	var live []string
	for _, k := range keys {
		p := nd.proc(k)
		if p == nil {
			continue
		}
		select {
		case <-p.Done():
			continue // ended on its own: unplannedExits tells
		default:
		}
		nd.markStopped(p)
		live = append(live, k)
		if kill {
			errs = append(errs, p.Kill())
		} else if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, err)
		}
	}
	end := time.Now().Add(grace)
	for _, k := range live {
		p := nd.proc(k)
		if kill {
			<-p.Done()
			continue
		}
		select {
		case <-p.Done():
		case <-time.After(time.Until(end)):
			_ = p.Kill()
			<-p.Done()
			errs = append(errs, fmt.Errorf("soak: %s %s did not exit %s after SIGTERM", nd.name, k, grace))
		}
	}
	return errors.Join(errs...)
}

// sampleKeyName is how a sampled process is named in the slopes: the node
// for the appliance, node/program for the classic stack's several.
func sampleKeyName(svc services, nd *node, key string) string {
	if len(svc.keys(nd)) == 1 {
		return nd.name
	}
	return nd.name + "/" + key
}
