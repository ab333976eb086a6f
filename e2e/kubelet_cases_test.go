//go:build kubelet

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"appliance/bootstrap"
	"appliance/internal/kubeletnode"
	"appliance/internal/netlab"
)

// The cases of TestKubelet, in the order they run on the shared cluster.

// testLogs: what `crictl logs` shows of every container the cluster ran
// (running and exited): one JSON record per line, each an event with a
// time, a level and a message, and VRRP's states by name.
func (c *kubeletCluster) testLogs(t *testing.T) {
	var changes, containers int
	states := map[string]bool{"INIT": true, "BACKUP": true, "MASTER": true, "FAULT": true}
	for _, k := range c.all {
		cs, err := k.Containers()
		if err != nil {
			t.Fatal(err)
		}
		for _, ct := range cs {
			containers++
			logs, err := k.Logs(ct.ID)
			if err != nil {
				t.Errorf("%s: %v", k.name, err)
				continue
			}
			recs, bad := jsonLines(logs)
			if len(bad) > 0 {
				t.Errorf("%s: container %s: %d of %d lines are not one JSON record with time, level and msg; first: %q",
					k.name, ct.ID[:12], len(bad), len(bad)+len(recs), bad[0])
			}
			if len(recs) == 0 {
				t.Errorf("%s: container %s logged nothing", k.name, ct.ID[:12])
			}
			for _, r := range recs {
				if d, ok := r["took"]; ok {
					if _, err := time.ParseDuration(fmt.Sprint(d)); err != nil {
						t.Errorf("%s: %q took %v: want a duration as text (%v)", k.name, r.str("msg"), d, r)
					}
				}
				if r.str("msg") != "state changed" {
					continue
				}
				changes++
				if !states[r.str("from")] || !states[r.str("to")] {
					t.Errorf("%s: a VRRP state change reads from %v to %v; want the states' names (%v)", k.name, r["from"], r["to"], r)
				}
			}
		}
	}
	if changes == 0 {
		t.Error("no VRRP state change logged by any container")
	}
	t.Logf("%d containers' logs read; %d VRRP state changes, each by name", containers, changes)
}

// testSecurity: what the kernel enforces on each node's appliance, read
// back from /proc: exactly the manifest's capabilities (none inherited or
// ambient), no_new_privs, the runtime's default seccomp filter, a
// read-only root filesystem and each hostPath as read-only as the
// manifest mounts it.
func (c *kubeletCluster) testSecurity(t *testing.T) {
	for _, k := range c.all {
		ct := k.containerSpec()
		sc := ct.SecurityContext
		if sc == nil || sc.Capabilities == nil {
			t.Fatalf("%s: the manifest's container has no securityContext with capabilities", k.name)
		}
		if !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: the manifest drops %v, not ALL", k.name, sc.Capabilities.Drop)
		}
		var want uint64
		for _, c := range sc.Capabilities.Add {
			bit, ok := capBits[string(c)]
			if !ok {
				t.Fatalf("%s: unknown capability %q", k.name, c)
			}
			want |= 1 << bit
		}
		p, err := readPrivileges(k.pid(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, cs := range []struct {
			name string
			got  uint64
		}{{"effective", p.Eff}, {"permitted", p.Prm}, {"bounding", p.Bnd}} {
			if cs.got != want {
				t.Errorf("%s: %s capabilities %s, the manifest adds %s", k.name, cs.name, capNames(cs.got), capNames(want))
			}
		}
		if p.Inh != 0 || p.Amb != 0 {
			t.Errorf("%s: inheritable %s, ambient %s; want none (an exec'd program would keep them)", k.name, capNames(p.Inh), capNames(p.Amb))
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || p.NoNewPrivs != "1" {
			t.Errorf("%s: allowPrivilegeEscalation %v in the manifest, NoNewPrivs %q in the kernel; want false and 1", k.name, sc.AllowPrivilegeEscalation, p.NoNewPrivs)
		}
		if p.Seccomp != "2" {
			t.Errorf("%s: Seccomp %q; want 2 (the runtime's default filter, %s)", k.name, p.Seccomp, kubeletSeccomp)
		}
		if sc.RunAsUser != nil && p.Uid != strconv.FormatInt(*sc.RunAsUser, 10) {
			t.Errorf("%s: uid %s, the manifest runs as %d", k.name, p.Uid, *sc.RunAsUser)
		}
		if ro := sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem; !ro || !readOnly(p.Mounts["/"]) {
			t.Errorf("%s: readOnlyRootFilesystem %v in the manifest, root mounted %q", k.name, ro, p.Mounts["/"])
		}
		for _, m := range ct.VolumeMounts {
			opts, ok := p.Mounts[m.MountPath]
			switch {
			case !ok:
				t.Errorf("%s: volume %s not mounted at %s", k.name, m.Name, m.MountPath)
			case readOnly(opts) != m.ReadOnly:
				t.Errorf("%s: %s mounted %q; the manifest says readOnly %v", k.name, m.MountPath, opts, m.ReadOnly)
			}
		}
		if k == c.boot {
			t.Logf("%s: capabilities %s (effective = permitted = bounding), NoNewPrivs %s, Seccomp %s, uid %s, root %s",
				k.name, capNames(p.Eff), p.NoNewPrivs, p.Seccomp, p.Uid, p.Mounts["/"])
		}
	}
}

// testKubeletRestart: the kubelet stopped and started again on the API
// VIP's holder adopts the running container (same container, same
// process, no restart counted) and no VIP moves.
func (c *kubeletCluster) testKubeletRestart(t *testing.T) {
	k := waitHolderOf(t, c.all, kubeletAPIVIP, 10*time.Second, 0)
	before := k.mustRunning(t)
	pid := k.pid(t)
	apiMoves := watchMoves(t, nodesOf(c.all), kubeletAPIVIP)
	ingressMoves := watchMoves(t, nodesOf(c.all), kubeletIngressVIP)
	t0 := time.Now()
	if err := k.RestartKubelet(context.Background()); err != nil {
		t.Fatal(err)
	}
	k.waitReady(t, 60*time.Second)
	took := time.Since(t0)
	// Past a sync period (10 s) and two liveness probes, where a kubelet
	// that did not adopt the container would have replaced it.
	time.Sleep(12 * time.Second)
	cs, err := k.Containers()
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].ID != before.ID || cs[0].State != "CONTAINER_RUNNING" || cs[0].Metadata.Attempt != before.Metadata.Attempt {
		t.Errorf("after the kubelet's restart %s has containers %+v; want only %s, running, attempt %d", k.name, cs, before.ID[:12], before.Metadata.Attempt)
	}
	if now := k.pid(t); now != pid {
		t.Errorf("the appliance's process changed from %d to %d", pid, now)
	}
	if p, err := k.KubeletPod(); err != nil || p == nil {
		t.Errorf("the restarted kubelet does not report the pod: %v", err)
	} else if n := restarts(p); n != 0 {
		t.Errorf("the restarted kubelet counts %d restarts", n)
	}
	if m, n := apiMoves(), ingressMoves(); m+n != 0 {
		t.Errorf("the VIPs moved during the kubelet's restart: API %d, ingress %d times", m, n)
	}
	t.Logf("%s: kubelet restarted, pod Ready again after %s; container %s (pid %d) adopted, no VIP moved",
		k.name, took.Round(100*time.Millisecond), before.ID[:12], pid)
}

// restarts is the kubelet's restart count of the pod's container.
func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// testBootstrapTeardown: bootkube's teardown removes the bootstrap's
// manifest; its appliance hands the API VIP to a master within the grace
// period and exits cleanly, while a client calling the API through the VIP
// sees no call fail.
func (c *kubeletCluster) testBootstrapTeardown(t *testing.T) {
	waitHolderOf(t, c.all, kubeletAPIVIP, 10*time.Second, 0)
	if h, _ := holderOf(t, c.all, kubeletAPIVIP); h != c.boot {
		t.Fatalf("the API VIP is not on the bootstrap before its teardown")
	}
	caller := startAPICaller(t, c.client, kubeletAPIVIP.String()+":6443", 20*time.Millisecond)
	time.Sleep(time.Second)
	old := c.boot.mustRunning(t)
	grace := c.boot.grace(t)
	t0 := time.Now()
	c.boot.remove(t)
	var moved time.Duration
	waitFor(t, "a master holding the API VIP", grace, func() (bool, string) {
		h, s := holderOf(t, c.all, kubeletAPIVIP)
		if h != nil && c.role(h) == "master" {
			moved = time.Since(t0)
			return true, ""
		}
		return false, s
	})
	st := c.boot.waitExited(t, old.ID, grace+10*time.Second)
	exited := st.Finished().Sub(t0)
	if st.Status.ExitCode != 0 || exited > grace {
		t.Errorf("the bootstrap's appliance exited %d (%s) %s after its manifest went; want 0 within the grace period %s",
			st.Status.ExitCode, st.Status.Reason, exited.Round(time.Millisecond), grace)
	}
	time.Sleep(time.Second)
	caller.close()
	ok, by, failed, broken := caller.snapshot()
	if len(failed)+len(broken) > 0 || ok < 50 {
		t.Errorf("through the teardown: %d calls answered (%v), %d failed %v, %d reset in flight %v; want none failed",
			ok, by, len(failed), failed, len(broken), broken)
	}
	if holds(t, c.boot.n, kubeletAPIVIP) || holds(t, c.boot.n, kubeletIngressVIP) {
		t.Error("the bootstrap keeps a VIP after its appliance exited")
	}
	if tables := applianceTables(t, c.boot.n); len(tables) > 0 {
		t.Errorf("the bootstrap keeps nftables tables after its appliance exited: %v", tables)
	}
	// The bootstrap machine goes: its apiserver and MCS with it.
	for _, key := range []string{"apiserver/bootstrap", "mcs/bootstrap"} {
		if err := c.procs[key].Kill(); err != nil {
			t.Fatal(err)
		}
	}
	h, _ := holderOf(t, c.all, kubeletAPIVIP)
	t.Logf("manifest removed: API VIP on %s after %s, appliance exited 0 after %s (grace %s); %d calls through the VIP (%v), none failed",
		h.name, moved.Round(time.Millisecond), exited.Round(time.Millisecond), grace, ok, by)
}

// applianceTables lists n's nftables tables whose names start with
// "appliance" (the LB's redirect and handback).
func applianceTables(t *testing.T, n *netlab.Node) []string {
	t.Helper()
	out, err := n.Run(context.Background(), "nft", "list", "tables")
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 3 && strings.HasPrefix(f[2], "appliance") {
			tables = append(tables, f[1]+" "+f[2])
		}
	}
	slices.Sort(tables) // nft lists them in creation order
	return tables
}

// heldConns are API connections through the VIP kept open and in use, as
// the kubelets', controllers' and operators' watches and requests are: each
// a keptCaller, with 5 s for each call (a hundred of them on a loaded
// machine).
type heldConns []*keptCaller

func openHeldConns(t *testing.T, from *netlab.Node, addr string, n int, period time.Duration) heldConns {
	t.Helper()
	var h heldConns
	for range n {
		h = append(h, dialKept(t, from, addr, period, 5*time.Second))
	}
	return h
}

// close stops the calls and closes the connections, all at once.
func (h heldConns) close() {
	var wg sync.WaitGroup
	for _, k := range h {
		wg.Go(k.close)
	}
	wg.Wait()
}

// since summarises the connections from t0: how many were answered after
// it, how many ended, and when the first and last ended.
func (h heldConns) since(t0 time.Time) (answered, ended int, first, last time.Duration, errs []string) {
	for _, k := range h {
		k.mu.Lock()
		if k.lastOK.After(t0) {
			answered++
		}
		if !k.ended.IsZero() {
			ended++
			d := k.ended.Sub(t0)
			if ended == 1 || d < first {
				first = d
			}
			last = max(last, d)
			if len(errs) < 3 {
				errs = append(errs, k.errs...)
			}
		}
		k.mu.Unlock()
	}
	return answered, ended, first, last, errs
}

// testGracePeriod: the manifest's grace period covers the handover and the
// LB's drain under load. 100 API connections are open through the VIP and
// in use when the holder's manifest goes; the time from SIGTERM (the
// appliance's "stopping" record) to its exit must stay inside the grace
// period with a margin, and it must exit by itself (0), not be killed.
func (c *kubeletCluster) testGracePeriod(t *testing.T) {
	masters := c.masters
	h := waitHolderOf(t, masters, kubeletAPIVIP, 10*time.Second, 0)
	grace := h.grace(t)
	held := openHeldConns(t, c.client, kubeletAPIVIP.String()+":6443", 100, 200*time.Millisecond)
	caller := startAPICaller(t, c.client, kubeletAPIVIP.String()+":6443", 20*time.Millisecond)
	time.Sleep(2 * time.Second)
	old := h.mustRunning(t)
	manifest := h.Manifest()
	// The kubelet removes the container soon after it exits, its logs
	// with it: read them as they are written.
	follow, err := h.FollowLogs(old.ID)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	h.remove(t)
	var moved time.Duration
	waitFor(t, "another master holding the API VIP", grace, func() (bool, string) {
		n, s := holderOf(t, masters, kubeletAPIVIP)
		if n != nil && n != h {
			moved = time.Since(t0)
			return true, ""
		}
		return false, s
	})
	st := h.waitExited(t, old.ID, grace+10*time.Second)
	logs, err := follow.Wait(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := jsonLines(logs)
	var term time.Time
	var drained string
	for _, r := range recs {
		switch r.str("msg") {
		case "stopping":
			term = r.at()
		case "drain timeout: closing sessions":
			drained = fmt.Sprint(r["sessions"])
		}
	}
	if term.IsZero() {
		t.Fatalf("%s's appliance logged no \"stopping\" record: did SIGTERM reach it?", h.name)
	}
	exit := st.Finished()
	took := exit.Sub(term)
	answered, ended, first, last, errs := held.since(t0)
	caller.close()
	ok, _, failed, broken := caller.snapshot()
	t.Logf("%s: SIGTERM %s after its manifest went; the API VIP moved after %s; exit %d after %s (grace %s, margin %s); "+
		"of 100 open connections %d answered after SIGTERM, %d closed by the drain (%s sessions) %s to %s after it (%v); new connections: %d answered, %d failed, %d reset",
		h.name, term.Sub(t0).Round(time.Millisecond), moved.Round(time.Millisecond), st.Status.ExitCode, took.Round(time.Millisecond),
		grace, (grace - took).Round(time.Millisecond), answered, ended, drained, first.Round(time.Millisecond), last.Round(time.Millisecond), errs,
		ok, len(failed), len(broken))
	if st.Status.ExitCode != 0 {
		t.Errorf("exit code %d (%s): the kubelet killed it at the end of the grace period", st.Status.ExitCode, st.Status.Reason)
	}
	// The margin covers a loaded node: the kubelet's own SIGTERM comes
	// up to a second after the manifest goes, and a slow exit must not
	// turn into SIGKILL (a VIP and an nftables table left behind).
	if margin := 3 * time.Second; took+margin > grace {
		t.Errorf("SIGTERM to exit took %s; the grace period %s leaves less than %s", took.Round(time.Millisecond), grace, margin)
	}
	if len(failed)+len(broken) > 0 {
		t.Errorf("new API calls failed while %s left: %v %v", h.name, failed, broken)
	}
	if answered < 90 {
		t.Errorf("only %d of 100 open connections were answered after SIGTERM: the drain does not serve them", answered)
	}
	if tables := applianceTables(t, h.n); len(tables) > 0 || holds(t, h.n, kubeletAPIVIP) {
		t.Errorf("%s after its appliance exited: tables %v, holds the API VIP %v", h.name, tables, holds(t, h.n, kubeletAPIVIP))
	}
	held.close()
	h.put(t, manifest)
	h.waitReady(t, 60*time.Second)
}

// testUpgrade: a rolling upgrade, as the Machine Config Operator rolls a
// new image out: each node's manifest replaced by one naming the second
// image, masters then workers, the VIP's holder first. The kubelet stops
// the old container (exit 0) and starts the new one from the new image;
// the VIP the node held moves to a peer with no call failing through it;
// /status reports the new version.
func (c *kubeletCluster) testUpgrade(t *testing.T) {
	next := c.images[1]
	digest := next.ref[strings.Index(next.ref, "@")+1:]
	api := startAPICaller(t, c.client, kubeletAPIVIP.String()+":6443", 20*time.Millisecond)
	ing := startHTTPCaller(t, c.client, kubeletIngressVIP.String()+":80", 20*time.Millisecond)
	apiSeq := watchHolderSeq(t, c.masters, kubeletAPIVIP)
	ingSeq := watchHolderSeq(t, c.workers, kubeletIngressVIP)
	t0 := time.Now()
	for _, group := range []struct {
		nodes []*kubeletNode
		vip   netip.Addr
	}{{c.masters, kubeletAPIVIP}, {c.workers, kubeletIngressVIP}} {
		done := map[*kubeletNode]bool{}
		for len(done) < len(group.nodes) {
			// The holder first, as long as it has the old image: each
			// upgrade of a holder moves the VIP.
			var k *kubeletNode
			if h, _ := holderOf(t, group.nodes, group.vip); h != nil && !done[h] {
				k = h
			} else {
				for _, n := range group.nodes {
					if !done[n] {
						k = n
						break
					}
				}
			}
			done[k] = true
			held := holds(t, k.n, group.vip)
			old := k.mustRunning(t)
			own := startDNSWatch(t, c.client, k.n.IPv4.Addr())
			t1 := time.Now()
			k.put(t, c.files[1][c.role(k)][bootstrap.StaticPodPath])
			st := k.waitExited(t, old.ID, k.grace(t)+20*time.Second)
			if st.Status.ExitCode != 0 {
				t.Errorf("%s: the old container exited %d (%s)", k.name, st.Status.ExitCode, st.Status.Reason)
			}
			if held {
				if h, s := holderOf(t, group.nodes, group.vip); h == nil || h == k {
					t.Errorf("%s held %s; when its old container exited: %s", k.name, group.vip, s)
				}
			}
			k.waitReady(t, 60*time.Second)
			ready := time.Since(t1)
			// Ready is not yet able to take the VIP back: a worker's
			// ingress router stays in FAULT until its router's check
			// first passes (readiness does not count that FAULT: a node
			// without a router has it for good). A rollout moves on once
			// the node could succeed the next holder, or that one's
			// priority-0 advert finds no successor.
			waitFor(t, k.name+"'s router of "+group.vip.String()+" out of FAULT", 20*time.Second, func() (bool, string) {
				s, err := k.vipState(group.vip)
				return err == nil && (s == "BACKUP" || s == "MASTER"), fmt.Sprint(s, err)
			})
			now := k.mustRunning(t)
			s, err := k.Inspect(now.ID)
			if err != nil {
				t.Fatal(err)
			}
			stopped, started := st.Finished().Sub(t1), s.Started().Sub(t1)
			dnsOut := own.close()
			// The kubelet starts a replaced static pod once the old one
			// is terminated, on its pod worker's back-off (10 s plus up
			// to half of it): the node has no appliance meanwhile.
			if gap := started - stopped; gap > 30*time.Second {
				t.Errorf("%s: %s between the old container's exit and the new one's start", k.name, gap.Round(100*time.Millisecond))
			}
			if !strings.Contains(s.Status.Image.Image+" "+s.Status.ImageRef, digest) {
				t.Errorf("%s runs image %s (%s); want %s", k.name, s.Status.Image.Image, s.Status.ImageRef, next.ref)
			}
			v, err := k.version()
			if err != nil || v != next.version {
				t.Errorf("%s: /status version %q (%v); want %s", k.name, v, err, next.version)
			}
			t.Logf("%s: manifest replaced; old container exited after %s, new one started after %s, Ready after %s (held %s: %v); "+
				"the node's own DNS unanswered for %s; runs %s",
				k.name, stopped.Round(100*time.Millisecond), started.Round(100*time.Millisecond), ready.Round(100*time.Millisecond),
				group.vip, held, dnsOut.Round(100*time.Millisecond), v)
		}
	}
	time.Sleep(time.Second)
	api.close()
	ing.close()
	ok, by, failed, broken := api.snapshot()
	iok, ifailed := ing.result()
	t.Logf("rolling upgrade of 5 nodes in %s; API VIP holders %v, ingress VIP holders %v; API calls %d answered (%v), %d failed, %d reset; ingress calls %d answered, %d failed",
		time.Since(t0).Round(100*time.Millisecond), apiSeq(), ingSeq(), ok, by, len(failed), len(broken), iok, len(ifailed))
	if len(failed)+len(broken) > 0 {
		t.Errorf("API calls failed through the upgrade: %v %v", failed, broken)
	}
	// The ingress VIP has no handback (the appliance balances no ingress
	// traffic): a request in flight to the old holder when the VIP moves
	// lands on the new one, which resets it. At most one such reset per
	// move; anything else is a failure.
	moves := len(ingSeq()) - 1
	resets := 0
	for _, f := range ifailed {
		if strings.Contains(f, "connection reset by peer") {
			resets++
		}
	}
	switch {
	case resets < len(ifailed) || resets > moves:
		t.Errorf("ingress calls failed through the upgrade (%d ingress VIP moves): %v", moves, ifailed)
	case resets > 0:
		t.Logf("ingress calls reset by a move of the ingress VIP (no handback for it): %v", ifailed)
	}
	if seq := apiSeq(); len(seq) < 2 {
		t.Errorf("the API VIP never moved (holders %v): the upgrade did not exercise a handover", seq)
	}
	waitHolderOf(t, c.all, kubeletAPIVIP, 10*time.Second, time.Second)
	waitHolderOf(t, c.all, kubeletIngressVIP, 10*time.Second, time.Second)
}

// dnsWatch asks one DNS server for api.<domain> every 100 ms and keeps the
// longest run without an answer.
type dnsWatch struct {
	*ticking
	mu      sync.Mutex
	longest time.Duration
}

func startDNSWatch(t *testing.T, from *netlab.Node, server netip.Addr) *dnsWatch {
	w := &dnsWatch{}
	var down time.Time
	w.ticking = every(t, 100*time.Millisecond, func() bool {
		_, err := askDNS(from, netip.AddrPortFrom(server, 53).String(), "api.ocp4.example.com", 200*time.Millisecond)
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		switch {
		case err != nil && down.IsZero():
			down = now
		case err == nil && !down.IsZero():
			w.longest = max(w.longest, now.Sub(down))
			down = time.Time{}
		}
		if !down.IsZero() {
			w.longest = max(w.longest, now.Sub(down))
		}
		return true
	})
	return w
}

// close stops the watch and returns the longest time without an answer.
func (w *dnsWatch) close() time.Duration {
	w.ticking.close()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.longest
}

// watchHolderSeq records the holders of vip among ks, in order, until the
// test ends ("none", or names joined by "+" when several hold it).
func watchHolderSeq(t *testing.T, ks []*kubeletNode, vip netip.Addr) func() []string {
	var mu sync.Mutex
	var seq []string
	every(t, 10*time.Millisecond, func() bool {
		var names []string
		for _, k := range ks {
			if holds(t, k.n, vip) {
				names = append(names, k.name)
			}
		}
		s := strings.Join(names, "+")
		if s == "" {
			s = "none"
		}
		mu.Lock()
		defer mu.Unlock()
		if len(seq) == 0 || seq[len(seq)-1] != s {
			seq = append(seq, s)
		}
		return true
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seq...)
	}
}

// httpCaller GETs / from a plain HTTP address every period, one connection
// per call, as a browser reaching an application through the ingress VIP.
type httpCaller struct {
	*ticking
	mu     sync.Mutex
	ok     int
	failed []string
}

func startHTTPCaller(t *testing.T, from *netlab.Node, addr string, period time.Duration) *httpCaller {
	c := &httpCaller{}
	c.ticking = every(t, period, func() bool {
		body, err := nodeHTTPGet(from, addr, "/")
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil || !strings.Contains(body, `"router"`) {
			c.failed = append(c.failed, fmt.Sprintf("%s %v %q", time.Now().Format("15:04:05.000"), err, body))
		} else {
			c.ok++
		}
		return true
	})
	return c
}

func (c *httpCaller) result() (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ok, append([]string(nil), c.failed...)
}

// testHung: the API VIP's holder's appliance stopped dead (SIGSTOP: it
// neither answers nor exits). A peer takes the VIP by VRRP's silence, the
// liveness probe fails, the kubelet replaces the container; meanwhile the
// peer holds the VIP throughout, and afterwards there is one holder and
// the restarted node keeps no stale VIP or nftables table.
func (c *kubeletCluster) testHung(t *testing.T) {
	h := waitHolderOf(t, c.masters, kubeletAPIVIP, 10*time.Second, time.Second)
	var peers []*kubeletNode
	for _, m := range c.masters {
		if m != h {
			peers = append(peers, m)
		}
	}
	old := h.mustRunning(t)
	pid := h.pid(t)
	live := h.containerSpec().LivenessProbe
	caller := startAPICaller(t, c.client, kubeletAPIVIP.String()+":6443", 20*time.Millisecond)
	time.Sleep(time.Second)
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	var peer *kubeletNode
	waitFor(t, "a peer holding the API VIP", 10*time.Second, func() (bool, string) {
		p, s := holderOf(t, peers, kubeletAPIVIP)
		if p != nil {
			peer, took = p, time.Since(t0)
			return true, ""
		}
		return false, s
	})
	// Until the kubelet runs a new container, a peer must keep the VIP
	// (two at once for a few milliseconds is equal priorities' election).
	// The hung node's kernel keeps the address too (its appliance cannot
	// remove it) until the container is killed.
	var samples, gaps, both int
	var replaced kubeletnode.Container
	var stale time.Duration
	deadline := time.Now().Add(time.Duration(live.InitialDelaySeconds+live.PeriodSeconds*(live.FailureThreshold+1))*time.Second + h.grace(t) + 30*time.Second)
	for {
		switch len(holders(t, nodesOf(peers), kubeletAPIVIP)) {
		case 0:
			gaps++
		case 2:
			both++
		}
		if holds(t, h.n, kubeletAPIVIP) {
			stale = time.Since(t0)
		}
		samples++
		cs, err := h.Containers()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(cs); n > 0 && cs[n-1].ID != old.ID && cs[n-1].State == "CONTAINER_RUNNING" {
			replaced = cs[n-1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's hung appliance not replaced %s after SIGSTOP; containers %+v", h.name, time.Since(t0).Round(time.Second), cs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	restarted := time.Since(t0)
	st, err := h.Inspect(old.ID)
	if err != nil {
		t.Fatal(err)
	}
	h.waitReady(t, 60*time.Second)
	caller.close()
	ok, _, failed, broken := caller.snapshot()
	killed := st.Finished().Sub(t0)
	t.Logf("%s SIGSTOPped: %s took the API VIP after %s; the old container was killed %s after SIGSTOP (exit %d, %s), "+
		"the kubelet ran a new one (attempt %d) after %s; the hung node kept the VIP address for %s; a peer held the VIP in %d of %d samples (both peers in %d); "+
		"calls %d answered, %d failed, %d reset",
		h.name, peer.name, took.Round(time.Millisecond), killed.Round(100*time.Millisecond), st.Status.ExitCode, st.Status.Reason,
		replaced.Metadata.Attempt, restarted.Round(100*time.Millisecond), stale.Round(100*time.Millisecond),
		samples-gaps, samples, both, ok, len(failed), len(broken))
	// Liveness fails after its threshold of periods; the kill then waits
	// the probe's grace period (the handover's), not the pod's (which adds
	// the LB's drain): a hung process does nothing with SIGTERM.
	liveGrace := h.grace(t)
	if live.TerminationGracePeriodSeconds != nil {
		liveGrace = time.Duration(*live.TerminationGracePeriodSeconds) * time.Second
	}
	if at, grace, ok := kubeletKill(t, h, old.ID); !ok {
		t.Errorf("%s's kubelet.log has no kill of %s", h.name, old.ID[:12])
	} else {
		t.Logf("the kubelet killed it %s after SIGSTOP (liveness failed) with gracePeriod=%s; SIGKILL %s later",
			at.Sub(t0).Round(100*time.Millisecond), grace, st.Finished().Sub(at).Round(100*time.Millisecond))
		if grace != liveGrace {
			t.Errorf("the kubelet killed the hung container with a grace period of %s; the manifest's liveness probe says %s", grace, liveGrace)
		}
	}
	if bound := time.Duration(live.PeriodSeconds*(live.FailureThreshold+1)+live.TimeoutSeconds)*time.Second + liveGrace + 5*time.Second; killed > bound {
		t.Errorf("the hung container was killed %s after SIGSTOP; the probes and the grace period allow %s", killed.Round(100*time.Millisecond), bound)
	}
	if gaps > 0 {
		t.Errorf("no peer held the API VIP in %d of %d samples while %s hung", gaps, samples, h.name)
	}
	if replaced.Metadata.Attempt != old.Metadata.Attempt+1 {
		t.Errorf("the new container is attempt %d; want %d (a restart of the same pod)", replaced.Metadata.Attempt, old.Metadata.Attempt+1)
	}
	// Afterwards: one holder (the restarted node is a backup now), and the
	// restarted node's kernel state is its own appliance's, no leftover.
	waitHolderOf(t, c.masters, kubeletAPIVIP, 10*time.Second, 2*time.Second)
	if holds(t, h.n, kubeletAPIVIP) {
		t.Errorf("%s still holds the API VIP after its restart", h.name)
	}
	// Compared with the other backup: a backup keeps the handback rule to
	// the master it follows, the holder only for the window after its
	// takeover.
	ref := peers[0]
	if holds(t, ref.n, kubeletAPIVIP) {
		ref = peers[1]
	}
	if got, want := nftShape(t, h.n), nftShape(t, ref.n); got != want {
		t.Errorf("%s's nftables after its restart differ from %s's:\n%s\n--- %s:\n%s", h.name, ref.name, got, ref.name, want)
	}
	// A call under way on the hung node's LB when it stopped waits for its
	// timeout (3 s); the next ones reach the peer.
	if len(failed)+len(broken) > 3 {
		t.Errorf("%d calls failed while %s hung, more than those under way when it stopped: %v %v", len(failed)+len(broken), h.name, failed, broken)
	} else if len(failed)+len(broken) > 0 {
		t.Logf("calls under way on %s when it stopped: %v %v", h.name, failed, broken)
	}
}

// kubeletKillRE is the kubelet's line when it stops a container (klog:
// I<MMDD HH:MM:SS.micro>, the machine's time zone).
var kubeletKillRE = regexp.MustCompile(`^I(\d{4} \d\d:\d\d:\d\d\.\d+) .*"Killing container with a grace period".*containerID="containerd://([0-9a-f]+)" gracePeriod=(\d+)`)

// kubeletKill finds when k's kubelet began stopping container id and with
// which grace period.
func kubeletKill(t *testing.T, k *kubeletNode, id string) (time.Time, time.Duration, bool) {
	b, err := os.ReadFile(filepath.Join(k.State(), "kubelet.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		m := kubeletKillRE.FindStringSubmatch(l)
		if m == nil || m[2] != id {
			continue
		}
		at, err := time.ParseInLocation("0102 15:04:05.000000", m[1], time.Local)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		at = at.AddDate(now.Year(), 0, 0)
		g, _ := strconv.Atoi(m[3])
		return at, time.Duration(g) * time.Second, true
	}
	return time.Time{}, 0, false
}

var (
	nftHandle  = regexp.MustCompile(` # handle \d+`)
	nftCounter = regexp.MustCompile(`counter packets \d+ bytes \d+`)
	nftAddr    = regexp.MustCompile(`\b192\.168\.126\.\d+\b`)
)

// nftShape is n's appliance tables with handles, counters and addresses
// taken out: two backups of one role have the same.
func nftShape(t *testing.T, n *netlab.Node) string {
	t.Helper()
	var b strings.Builder
	for _, tbl := range applianceTables(t, n) {
		out, err := n.Run(context.Background(), "nft", append([]string{"-a", "list", "table"}, strings.Fields(tbl)...)...)
		if err != nil {
			t.Fatal(err)
		}
		out = nftHandle.ReplaceAllString(out, "")
		out = nftCounter.ReplaceAllString(out, "counter")
		out = nftAddr.ReplaceAllString(out, "ADDR")
		b.WriteString(out)
	}
	return b.String()
}

// testResources: the pod's requests against what the appliance uses under
// the kubelet: on the API VIP's holder (the LB's node) RSS and the cgroup's
// working set, CPU idle and under the bench's load (1,000 DNS queries/s
// with dnsperf and 50 new API connections/s through the VIP); a worker's
// beside it (VIP, DNS, mDNS; no LB). KUBELET_WINDOW sets the windows (10 s).
func (c *kubeletCluster) testResources(t *testing.T) {
	h := waitHolderOf(t, c.masters, kubeletAPIVIP, 10*time.Second, time.Second)
	w := c.workers[0]
	req := h.containerSpec().Resources.Requests
	pids := []int{h.pid(t), w.pid(t)}
	window := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("KUBELET_WINDOW")); err == nil && d > 0 {
		window = d
	}
	type result struct {
		use    [2]procUsage // holder, worker; CPU over the window
		el     time.Duration
		served string
		load   string // the machine's load average at the end
	}
	measure := func(load bool) result {
		var r result
		var before [2]procUsage
		for i, pid := range pids {
			u, err := readUsage(pid)
			if err != nil {
				t.Fatal(err)
			}
			before[i] = u
		}
		var perf *netlab.Process
		var caller *apiCaller
		if load {
			var err error
			perf, err = c.client.Start(context.Background(), "dnsperf", "-s", h.n.IPv4.Addr().String(), "-d", clusterQueryFile(t),
				"-l", strconv.Itoa(int(window.Seconds())), "-Q", "1000", "-c", "1", "-T", "1", "-t", "1")
			if err != nil {
				t.Fatal(err)
			}
			caller = startAPICaller(t, c.client, kubeletAPIVIP.String()+":6443", 20*time.Millisecond)
		}
		t0 := time.Now()
		time.Sleep(window)
		for i, pid := range pids {
			u, err := readUsage(pid)
			if err != nil {
				t.Fatal(err)
			}
			u.CPU -= before[i].CPU
			u.CgroupCPU -= before[i].CgroupCPU
			r.use[i] = u
		}
		r.el = time.Since(t0)
		if b, err := os.ReadFile("/proc/loadavg"); err == nil {
			r.load = strings.Fields(string(b))[0]
		}
		if load {
			caller.close()
			ok, _, failed, broken := caller.snapshot()
			_ = perf.Wait()
			out := perf.Output()
			r.served = fmt.Sprintf("API %.1f/s (%d failed), DNS %s", float64(ok)/r.el.Seconds(), len(failed)+len(broken),
				strings.Join(strings.Fields(grepLines(out, "Queries per second")+" "+grepLines(out, "Queries lost")), " "))
		}
		return r
	}
	idle := measure(false)
	loaded := measure(true)
	milli := func(cpu, el time.Duration) float64 { return 1000 * cpu.Seconds() / el.Seconds() }
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	var b strings.Builder
	fmt.Fprintf(&b, "under the kubelet, %s windows; requests cpu %s, memory %s\n", window, req.Cpu(), req.Memory())
	b.WriteString("| pod | window | RSS | RssAnon | cgroup working set | CPU | load average |\n|---|---|---|---|---|---|---|\n")
	row := func(who, win string, u procUsage, r result) {
		fmt.Fprintf(&b, "| %s | %s | %.1f MiB | %.1f MiB | %.1f MiB | %.1fm | %s |\n", who, win,
			float64(u.RSSKiB)/1024, float64(u.AnonKiB)/1024, mib(u.WorkingSet), milli(u.CgroupCPU, r.el), r.load)
	}
	row(h.name+" (API VIP, LB)", "idle", idle.use[0], idle)
	row(h.name+" (API VIP, LB)", "1,000 DNS q/s + 50 API conn/s", loaded.use[0], loaded)
	row(w.name, "idle", idle.use[1], idle)
	fmt.Fprintf(&b, "peak RSS (VmHWM, start-up included): %s %.1f MiB, %s %.1f MiB; load served: %s",
		h.name, float64(loaded.use[0].HWMKiB)/1024, w.name, float64(loaded.use[1].HWMKiB)/1024, loaded.served)
	t.Log(b.String())
	// The requests are what the scheduler counts the node's appliance as
	// using: under what it uses idle, the node is overcommitted by it for
	// good; far above what it uses under load, the node's allocatable
	// is wasted. Loose bounds: the figures are noisy on a shared machine.
	peak := max(loaded.use[0].WorkingSet, loaded.use[0].HWMKiB*1024)
	if m := req.Memory().Value(); m < peak {
		t.Errorf("memory request %s is below the working set under load or the peak RSS (%.1f MiB)", req.Memory(), mib(peak))
	}
	if m := req.Memory().Value(); m > 8*loaded.use[0].WorkingSet {
		t.Errorf("memory request %s is over 8 times the working set under load (%.1f MiB)", req.Memory(), mib(loaded.use[0].WorkingSet))
	}
	// Idle CPU is 20m on a quiet machine; on one whose load average is
	// several times its cores it was measured at 110m. The bound catches
	// an appliance that busy-loops, not a shared machine's noise.
	if cpu, idleCPU := req.Cpu().MilliValue(), milli(idle.use[0].CgroupCPU, idle.el); 2*float64(cpu) < idleCPU {
		t.Errorf("the idle use %.1fm is over twice the CPU request %dm", idleCPU, cpu)
	}
}

// clusterQueryFile is the bench's DNS load mix (cluster names, no
// forwarded ones), as a dnsperf data file.
func clusterQueryFile(t *testing.T) string {
	var b strings.Builder
	for _, q := range []string{"api.ocp4.example.com A", "api-int.ocp4.example.com A", "api-int.ocp4.example.com A",
		"console-openshift-console.apps.ocp4.example.com A", "oauth-openshift.apps.ocp4.example.com A",
		"master-0.ocp4.example.com A", "master-1.ocp4.example.com A", "master-2.ocp4.example.com A"} {
		b.WriteString(q + "\n")
	}
	return writeFile(t, "queries", b.String())
}
