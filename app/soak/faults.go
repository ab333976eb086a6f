package soak

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
)

// faultRun is a fault as it ran: its plan, the node it hit, when, and
// what it cost (filled in by the report).
type faultRun struct {
	Fault
	Planned bool      `json:"planned"`
	Node    string    `json:"node,omitempty"` // the node (or upstream) it hit
	Start   time.Time `json:"start"`
	// End is when the fault was undone (the process started again, the
	// link up): its recovery is measured from there.
	End     time.Time `json:"end"`
	Note    string    `json:"note,omitempty"`
	Skipped string    `json:"skipped,omitempty"` // why it did not run
	Err     string    `json:"err,omitempty"`     // the injection itself failed

	// Measured: the longest run of failed API calls, and of each VIP
	// without a holder, from Start to End plus the kind's recovery.
	APIOutage   time.Duration `json:"api_outage"`
	VIPGap      time.Duration `json:"api_vip_gap"`
	IngressGap  time.Duration `json:"ingress_vip_gap"`
	FailedCalls int           `json:"failed_calls"` // failures attributed to it
	BrokenStrms int           `json:"broken_streams"`
	DNSFailures int           `json:"dns_failures"`
}

// injector runs the schedule's faults against the cluster.
type injector struct {
	s     *soak
	c     *cluster
	mu    sync.Mutex
	runs  []*faultRun
	day2  *day2State
	upsMu sync.Mutex
	upsOn map[int]bool // black-holed upstreams
	unrdy map[string]bool
}

// say prints a live line.
func (j *injector) say(f *faultRun, format string, args ...any) {
	who := f.Node
	if who == "" {
		who = "-"
	}
	j.s.say("#%-3d %-18s %-10s %s", f.ID, f.Kind, who, fmt.Sprintf(format, args...))
}

// pick chooses among the candidates with the fault's seeded pick.
func pick[T any](f *faultRun, cands []T) (T, bool) {
	var zero T
	if len(cands) == 0 {
		return zero, false
	}
	return cands[int(f.Pick)%len(cands)], true
}

// disruptive kinds take a node (partly) out; at most one control-plane
// node is out at a time, so the API keeps backends and the VIP a home.
func disruptive(k Kind) bool {
	switch k {
	case KindKill9, KindSigtermHolder, KindLinkFlap, KindPacketLoss, KindBrEx, KindVIPDelete:
		return true
	}
	return false
}

// eligible is the live nodes a fault of kind may hit now: not hit by
// another fault, and not a second control-plane node out.
func (j *injector) eligible(k Kind, filter func(*node) bool) []*node {
	cpOut := false
	for _, nd := range j.c.nodes {
		nd.mu.Lock()
		if nd.busy > 0 && nd.controlPlane() {
			cpOut = true
		}
		nd.mu.Unlock()
	}
	var out []*node
	for _, nd := range j.c.live() {
		nd.mu.Lock()
		busy := nd.busy > 0
		nd.mu.Unlock()
		if busy || (filter != nil && !filter(nd)) || (disruptive(k) && nd.controlPlane() && cpOut) {
			continue
		}
		out = append(out, nd)
	}
	return out
}

func (j *injector) hold(nd *node, d int) {
	nd.mu.Lock()
	nd.busy += d
	nd.mu.Unlock()
}

// sleep waits d or until the soak ends (false).
func (j *injector) sleep(d time.Duration) bool {
	select {
	case <-j.s.ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// run runs one fault at its time.
func (j *injector) run(f Fault) {
	r := &faultRun{Fault: f, Planned: infoOf(f.Kind).planned}
	j.mu.Lock()
	j.runs = append(j.runs, r)
	j.mu.Unlock()
	if !j.sleep(time.Until(j.s.loadStart.Add(f.At))) {
		r.Skipped = "the soak ended first"
		return
	}
	r.Start = time.Now()
	err := j.inject(r)
	if r.End.IsZero() {
		r.End = time.Now()
	}
	switch {
	case r.Skipped != "":
		j.say(r, "skipped: %s", r.Skipped)
	case err != nil:
		r.Err = err.Error()
		j.say(r, "failed: %v", err)
	}
}

func (j *injector) inject(r *faultRun) error {
	c := j.c
	switch r.Kind {
	case KindKill9:
		nd, ok := pick(r, j.eligible(r.Kind, nil))
		if !ok {
			r.Skipped = "no node to hit"
			return nil
		}
		return j.onNode(r, nd, func() error {
			if err := c.svc.stop(c, nd, true, 0); err != nil {
				return err
			}
			j.say(r, "%s killed; the kubelet restarts it in %s", c.svc.what(), r.Dur)
			if !j.sleep(r.Dur) {
				return nil
			}
			r.End = time.Now()
			if err := c.svc.start(c, nd); err != nil {
				return err
			}
			j.say(r, "%s started again", c.svc.what())
			return nil
		})
	case KindSigtermHolder:
		nd, ok := pick(r, j.eligible(r.Kind, func(nd *node) bool { return nd.holds(apiVIP) }))
		if !ok {
			r.Skipped = "no single API VIP holder free to stop"
			return nil
		}
		return j.onNode(r, nd, func() error {
			t0 := time.Now()
			j.say(r, "SIGTERM to the API VIP holder's %s", c.svc.what())
			err := c.svc.stop(c, nd, false, 60*time.Second)
			r.End = time.Now()
			if err != nil {
				return err
			}
			j.say(r, "exited %s after SIGTERM; API VIP on %s; started again", time.Since(t0).Round(time.Millisecond), holderText(c, apiVIP))
			return c.svc.start(c, nd)
		})
	case KindLinkFlap:
		nd, ok := pick(r, j.eligible(r.Kind, nil))
		if !ok {
			r.Skipped = "no node to hit"
			return nil
		}
		return j.onNode(r, nd, func() error {
			if err := nd.n.LinkDown(); err != nil {
				return err
			}
			j.say(r, "link down for %s", r.Dur)
			j.sleep(r.Dur)
			r.End = time.Now()
			if err := nd.n.LinkUp(); err != nil {
				return err
			}
			j.say(r, "link up")
			return nil
		})
	case KindPacketLoss:
		nd, ok := pick(r, j.eligible(r.Kind, nil))
		if !ok {
			r.Skipped = "no node to hit"
			return nil
		}
		return j.onNode(r, nd, func() error {
			if err := j.loss(nd, r.Level); err != nil {
				return err
			}
			j.say(r, "%d%% of its frames dropped both ways for %s", r.Level, r.Dur)
			j.sleep(r.Dur)
			r.End = time.Now()
			if err := j.loss(nd, 0); err != nil {
				return err
			}
			j.say(r, "loss over")
			return nil
		})
	case KindVIPDelete:
		vip, which := apiVIP, "API"
		if r.Pick%2 == 1 {
			vip, which = ingressVIP, "ingress"
		}
		nd, ok := pick(r, j.eligible(r.Kind, func(nd *node) bool { return nd.holds(vip) }))
		if !ok {
			r.Skipped = "no single " + which + " VIP holder free"
			return nil
		}
		return j.onNode(r, nd, func() error {
			if err := deleteAddr(nd, vip); err != nil {
				return err
			}
			r.Note = which + " VIP"
			j.say(r, "%s VIP %s deleted from under it", which, vip)
			return nil
		})
	case KindBrEx:
		nd, ok := pick(r, j.eligible(r.Kind, nil))
		if !ok {
			r.Skipped = "no node to hit"
			return nil
		}
		return j.onNode(r, nd, func() error {
			nd.mu.Lock()
			onBrEx := nd.brex
			nd.mu.Unlock()
			var err error
			if onBrEx {
				err = fromBrEx(j.s.ctx, nd)
				r.Note = "br-ex to eth0"
			} else {
				err = toBrEx(j.s.ctx, nd)
				r.Note = "eth0 to br-ex"
			}
			if err != nil {
				return err
			}
			nd.mu.Lock()
			nd.brex = !onBrEx
			nd.mu.Unlock()
			j.say(r, "its address moved from %s", r.Note)
			return nil
		})
	case KindNftFlush:
		nd, ok := pick(r, j.eligible(r.Kind, (*node).controlPlane))
		if !ok {
			r.Skipped = "no control-plane node free"
			return nil
		}
		return j.onNode(r, nd, func() error {
			if _, err := nd.n.Run(j.s.ctx, "nft", "flush", "ruleset"); err != nil {
				return err
			}
			j.say(r, "nft flush ruleset")
			return nil
		})
	case KindAPIServerUnready, KindAPIServerKill, KindAPIServerRestart:
		return j.apiserver(r)
	case KindKubeRestart:
		if c.kube == nil {
			r.Skipped = "no Kubernetes API: " + c.kubeWhy
			return nil
		}
		r.Node = "kube-api"
		if err := c.kube.stopAPIServer(); err != nil {
			return err
		}
		j.say(r, "kube-apiserver stopped for %s", r.Dur)
		j.sleep(r.Dur)
		r.End = time.Now()
		if err := c.kube.startAPIServer(); err != nil {
			return err
		}
		j.say(r, "kube-apiserver ready again %s later", time.Since(r.End).Round(time.Millisecond))
		return nil
	case KindUpstreamBlackhole:
		j.upsMu.Lock()
		i := int(r.Pick) % len(c.ups)
		if j.upsOn[1-i] || j.upsOn[i] {
			j.upsMu.Unlock()
			r.Skipped = "an upstream is black-holed already"
			return nil
		}
		j.upsOn[i] = true
		j.upsMu.Unlock()
		defer func() {
			j.upsMu.Lock()
			j.upsOn[i] = false
			j.upsMu.Unlock()
		}()
		u := c.ups[i]
		r.Node = u.name
		if err := u.n.Partition(); err != nil {
			return err
		}
		j.say(r, "%s (%s) black-holed for %s", u.name, u.addr, r.Dur)
		j.sleep(r.Dur)
		r.End = time.Now()
		if err := u.n.Heal(); err != nil {
			return err
		}
		j.say(r, "%s answers again", u.name)
		return nil
	case KindBootstrapTeardown:
		return j.teardown(r)
	case KindDay2Node:
		if c.kube == nil {
			r.Skipped = "no Kubernetes API: " + c.kubeWhy
			return nil
		}
		name := fmt.Sprintf("worker-d%d", r.ID)
		r.Node = name
		if err := c.kube.createNode(name, roleWorker, day2IP); err != nil {
			return err
		}
		j.day2.set(name, true)
		j.say(r, "Node %s (%s) created; deleted in %s", name, day2IP, r.Dur)
		j.sleep(r.Dur)
		r.End = time.Now()
		err := c.kube.deleteNode(name)
		j.day2.set(name, false)
		if err != nil {
			return err
		}
		j.say(r, "Node %s deleted", name)
		return nil
	}
	return fmt.Errorf("soak: no injector for %s", r.Kind)
}

// onNode runs do with nd marked busy.
func (j *injector) onNode(r *faultRun, nd *node, do func() error) error {
	r.Node = nd.name
	j.hold(nd, 1)
	defer j.hold(nd, -1)
	return do()
}

func (j *injector) apiserver(r *faultRun) error {
	c := j.c
	nd, ok := pick(r, j.eligible(r.Kind, func(nd *node) bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		// One apiserver out at a time, as a rolling restart does.
		return nd.role == roleMaster && len(j.unrdy) == 0
	}))
	if !ok {
		r.Skipped = "no master's apiserver free"
		return nil
	}
	// Reserve the slot, checking again under the same lock: another
	// apiserver fault may have taken it since the pick.
	j.mu.Lock()
	if len(j.unrdy) > 0 {
		j.mu.Unlock()
		r.Skipped = "no master's apiserver free"
		return nil
	}
	j.unrdy[nd.name] = true
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		delete(j.unrdy, nd.name)
		j.mu.Unlock()
	}()
	return j.onNode(r, nd, func() error {
		switch r.Kind {
		case KindAPIServerUnready:
			if err := os.WriteFile(c.failFile(nd), []byte("soak\n"), 0o644); err != nil {
				return err
			}
			j.say(r, "apiserver /readyz fails for %s", r.Dur)
			j.sleep(r.Dur)
			r.End = time.Now()
			if err := os.Remove(c.failFile(nd)); err != nil {
				return err
			}
			j.say(r, "apiserver ready again")
		case KindAPIServerKill:
			if err := c.stop(nd, "apiserver", true, 0); err != nil {
				return err
			}
			j.say(r, "apiserver killed; started again in %s", r.Dur)
			j.sleep(r.Dur)
			r.End = time.Now()
			if err := c.startAPIServer(nd); err != nil {
				return err
			}
			j.say(r, "apiserver started again")
		case KindAPIServerRestart:
			if err := c.stop(nd, "apiserver", false, 10*time.Second); err != nil {
				return err
			}
			r.End = time.Now()
			if err := c.startAPIServer(nd); err != nil {
				return err
			}
			j.say(r, "apiserver stopped gracefully and started again")
		}
		return nil
	})
}

// teardown tears the bootstrap down as the installer does: its apiserver
// fails /readyz for good, a master takes the API VIP, the bootstrap's
// appliance gets SIGTERM, its stand-ins stop.
func (j *injector) teardown(r *faultRun) error {
	c := j.c
	b := c.node("bootstrap")
	r.Node = b.name
	j.hold(b, 1)
	defer j.hold(b, -1)
	if err := os.WriteFile(c.failFile(b), []byte("torn down\n"), 0o644); err != nil {
		return err
	}
	j.say(r, "bootstrap's apiserver /readyz fails for good")
	end := time.Now().Add(30 * time.Second)
	for {
		if h := c.holderOf(apiVIP); h != nil && h.role == roleMaster {
			j.say(r, "API VIP on %s, %s later", h.name, time.Since(r.Start).Round(time.Millisecond))
			break
		}
		if time.Now().After(end) {
			return fmt.Errorf("the API VIP is on %s 30 s after the bootstrap's apiserver failed", holderText(c, apiVIP))
		}
		if !j.sleep(50 * time.Millisecond) {
			return nil
		}
	}
	j.sleep(time.Second)
	t0 := time.Now()
	if err := c.svc.stop(c, b, false, 60*time.Second); err != nil {
		return err
	}
	j.say(r, "bootstrap's %s exited %s after SIGTERM", c.svc.what(), time.Since(t0).Round(time.Millisecond))
	for _, k := range []string{"apiserver", "mcs"} {
		if err := c.stop(b, k, true, 0); err != nil {
			return err
		}
	}
	b.mu.Lock()
	b.gone = true
	b.mu.Unlock()
	r.End = time.Now()
	j.say(r, "bootstrap gone; API VIP on %s", holderText(c, apiVIP))
	return nil
}

func holderText(c *cluster, vip netip.Addr) string {
	hs := c.holders(vip)
	if len(hs) == 0 {
		return "nobody"
	}
	return strings.Join(hs, "+")
}

// loss makes the hub drop pct% of the frames to and from nd (0: none),
// with nftables in the hub's bridge: this kernel has no netem.
func (j *injector) loss(nd *node, pct int) error {
	table := "soak_loss_" + nd.n.Name
	port := nd.n.HubIface
	var script string
	if pct > 0 {
		script = fmt.Sprintf(`table bridge %s {
	chain forward {
		type filter hook forward priority 0; policy accept;
		iifname "%s" numgen random mod 100 < %d drop
		oifname "%s" numgen random mod 100 < %d drop
	}
}
`, table, port, pct, port, pct)
	} else {
		script = fmt.Sprintf("delete table bridge %s\n", table)
	}
	cmd := exec.CommandContext(j.s.ctx, "ip", "netns", "exec", j.c.lab.Hub(), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in the hub: %w: %s", err, out)
	}
	return nil
}

// deleteAddr deletes addr from whichever of nd's links carries it.
func deleteAddr(nd *node, addr netip.Addr) error {
	as, err := nd.h.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	want := net.IP(addr.AsSlice())
	for _, a := range as {
		if a.IP.Equal(want) {
			link, err := nd.h.LinkByIndex(a.LinkIndex)
			if err != nil {
				return err
			}
			return nd.h.AddrDel(link, &a)
		}
	}
	return errors.New("the VIP was gone already")
}

// toBrEx moves nd's address from eth0 onto a new bridge br-ex with eth0
// as its port and eth0's MAC, as configure-ovs does for OVN-Kubernetes.
func toBrEx(ctx context.Context, nd *node) error {
	own := nd.n.IPv4.String()
	for _, cmd := range [][]string{
		{"ip", "link", "add", "br-ex", "type", "bridge"},
		{"ip", "link", "set", "br-ex", "address", nd.n.MAC.String()},
		{"ip", "link", "set", "br-ex", "up"},
		{"ip", "link", "set", "eth0", "master", "br-ex"},
		{"ip", "addr", "del", own, "dev", "eth0"},
		{"ip", "addr", "add", own, "dev", "br-ex"},
	} {
		if _, err := nd.n.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// fromBrEx undoes toBrEx.
func fromBrEx(ctx context.Context, nd *node) error {
	own := nd.n.IPv4.String()
	for _, cmd := range [][]string{
		{"ip", "addr", "del", own, "dev", "br-ex"},
		{"ip", "link", "set", "eth0", "nomaster"},
		{"ip", "link", "del", "br-ex"},
		{"ip", "addr", "add", own, "dev", "eth0"},
	} {
		if _, err := nd.n.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			return err
		}
	}
	return nil
}
