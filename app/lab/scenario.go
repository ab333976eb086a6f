package lab

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"appliance/internal/netlab"
)

func (r *run) setup() error {
	runs := []string{"n0 is the bootstrap, n1-n3 the masters, n4-n5 the workers, n6 a client. Every node runs `appliance run`",
		"with this appliance.yaml; stand-ins play the rest of OpenShift: an apiserver (HTTPS :6443, /readyz)"}
	if r.kl != nil {
		runs = []string{"n0 is the bootstrap, n1-n3 the masters, n4-n5 the workers, n6 a client. Every node runs a kubelet",
			"(with containerd and runc) and, as its static pod, the appliance from " + r.kl.ref + ",",
			"with the manifest and node files `appliance manifests` writes from this appliance.yaml (each node",
			"finds itself by its address); stand-ins play the rest of OpenShift: an apiserver (HTTPS :6443, /readyz)"}
	}
	r.header("1. A cluster in network namespaces", append(append([]string{
		fmt.Sprintf("Namespaces %s-n0..n6 hang on one bridge in a hub namespace; nothing in the host's network changes.", r.lab.Prefix())},
		runs...),
		"and a Machine Config Server (HTTPS :22623) on the bootstrap, an ingress router (:80, :443,",
		"readiness on :1936) on each worker. The masters' apiservers are not up yet.")...)
	cfg := r.config(true)
	r.cfg = filepath.Join(r.lab.Dir(), "appliance.yaml")
	if err := os.WriteFile(r.cfg, []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	fmt.Fprintf(r.o.Out, "\n    # %s\n", r.cfg)
	for _, line := range strings.Split(strings.TrimRight(cfg, "\n"), "\n") {
		fmt.Fprintf(r.o.Out, "    %s\n", line)
	}
	fmt.Fprintln(r.o.Out)
	if r.kubeMissing() == "" {
		if err := r.startKube(); err != nil {
			if r.ctx.Err() != nil {
				return r.ctx.Err()
			}
			r.kubeErr = fmt.Sprintf("the kube-apiserver did not start (%v)", err)
			r.kube = nil
			r.say("kube-api: %s; the day-2 worker will join through mDNS", r.kubeErr)
		}
	}
	if err := r.startAPIServer(r.boot); err != nil {
		return err
	}
	if err := r.startMCS(r.boot); err != nil {
		return err
	}
	for _, n := range r.workers {
		if err := r.startRouter(n); err != nil {
			return err
		}
	}
	if r.kl != nil {
		if err := r.startPods(r.cfg, r.cluster()...); err != nil {
			return err
		}
	} else {
		for _, n := range r.cluster() {
			if err := r.startRun(n, r.cfg); err != nil {
				return err
			}
		}
	}
	for _, n := range r.cluster() {
		if err := r.waitHealthy(n, 30*time.Second); err != nil {
			return err
		}
		r.say("%-9s %-15s appliance run: %s", r.names[n], n.IPv4.Addr(), r.plan(n))
	}
	return nil
}

// plan reads the services n's appliance runs from its /status.
func (r *run) plan(n *netlab.Node) string {
	_, body, _, err := get(n, adminListen, "localhost", "/status", false, 2*time.Second)
	if err != nil {
		return "?"
	}
	var st struct {
		Node struct {
			Plan string `json:"plan"`
		} `json:"node"`
	}
	if json.Unmarshal([]byte(body), &st) != nil || st.Node.Plan == "" {
		return "?"
	}
	return st.Node.Plan
}

func (r *run) bootstrapSection() error {
	r.header("2. The bootstrap holds the API VIP",
		"The bootstrap outranks the masters (50 vs 40) while its own apiserver answers /readyz and its LB",
		"serves; the ingress VIP goes to a node whose router is ready: a worker.")
	ok, err := r.until(30*time.Second, func() bool { return r.holder(apiVIP) == "bootstrap" })
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("lab: the API VIP is on %s, not the bootstrap, 30 s after start", r.holder(apiVIP))
	}
	r.res.BootstrapHeldVIP = true
	r.say("API VIP %s on %s", apiVIP, r.holder(apiVIP))
	if _, err := r.until(15*time.Second, func() bool { return strings.HasPrefix(r.holder(ingressVIP), "worker-") }); err != nil {
		return err
	}
	r.say("ingress VIP %s on %s", ingressVIP, r.holder(ingressVIP))
	// Every DHCP server answers a reservation alike; the first offer wins.
	r.res.DHCPReserved = r.askDHCP(r.workers[0], "reserved in appliance.yaml")

	dnsSrv := r.masters[0].IPv4.Addr()
	for _, name := range []string{"api." + Domain, "api-int." + Domain, "console-openshift-console.apps." + Domain, "worker-1." + Domain} {
		r.say("client: DNS %s? at master-0 (%s) -> %s", name, dnsSrv, addrsString(lookup(r.client, dnsSrv, name)))
	}
	r.caller = startCaller(r.client, netip.AddrPortFrom(apiVIP, 6443).String(), 20*time.Millisecond, 2*time.Second, r.start)
	t0 := time.Now()
	r.say("client: calling https://api.%s:6443/version every 20 ms from now on, one connection per call", Domain)
	if err := r.pause(time.Second); err != nil {
		return err
	}
	r.say("client: %s", r.caller.since(t0))
	r.res.MCSBefore = r.fetchConfig()
	code, body, _, err := get(r.client, netip.AddrPortFrom(ingressVIP, 80).String(), "console-openshift-console.apps."+Domain, "/", false, 2*time.Second)
	if err != nil {
		body = "error: " + err.Error()
	}
	r.say("client: http://console-openshift-console.apps.%s/ (ingress VIP) -> %d %s", Domain, code, body)
	return nil
}

var servedBy = regexp.MustCompile(`data:,([a-z0-9-]+)%20`)

// fetchConfig fetches a worker's Ignition from the MCS through the API VIP
// and returns the node whose MCS answered.
func (r *run) fetchConfig() string {
	code, body, _, err := get(r.client, netip.AddrPortFrom(apiVIP, 22623).String(), "api-int."+Domain, "/config/worker", true, 2*time.Second)
	who := ""
	switch m := servedBy.FindStringSubmatch(body); {
	case err != nil:
		r.say("client: https://api-int.%s:22623/config/worker -> error: %v", Domain, err)
	case m == nil:
		r.say("client: https://api-int.%s:22623/config/worker -> %d %s", Domain, code, body)
	default:
		who = m[1]
		r.say("client: https://api-int.%s:22623/config/worker -> %d, %d bytes of Ignition, served by %s's MCS", Domain, code, len(body), who)
	}
	return who
}

func (r *run) mastersSection() error {
	r.header("3. The masters become ready",
		"Their apiservers and MCSs start. Every LB checks /readyz (API) and /healthz (MCS) of each",
		"control-plane node; the bootstrap is the pools' backup, used only while no master is up.")
	for _, n := range r.masters {
		if err := r.startAPIServer(n); err != nil {
			return err
		}
		if err := r.startMCS(n); err != nil {
			return err
		}
		r.say("%s: apiserver and MCS started", r.names[n])
		if err := r.pause(300 * time.Millisecond); err != nil {
			return err
		}
	}
	last := ""
	allUp := func() bool {
		p, err := pool(r.boot, "api")
		if err != nil {
			return false
		}
		if s := poolString(p); s != last {
			r.say("  bootstrap's LB, API pool: %s", s)
			last = s
		}
		for _, n := range r.masters {
			if !poolUp(p, r.names[n]) {
				return false
			}
		}
		return true
	}
	ok, err := r.until(20*time.Second, allUp)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("lab: the bootstrap's LB does not see every master up after 20 s")
	}
	t0 := time.Now()
	if err := r.pause(time.Second); err != nil {
		return err
	}
	r.say("client, since: %s", r.caller.since(t0))
	for _, n := range r.masters {
		_, body, _, err := get(n, adminListen, "localhost", "/readyz", false, time.Second)
		if err != nil {
			body = err.Error()
		}
		r.say("%s: appliance /readyz: %s", r.names[n], strings.Join(strings.Fields(body), " "))
	}
	r.say("  (no router runs on the masters, so their ingress VIP instance is FAULT, and /readyz counts it)")
	// The MCS pool checks on its own schedule; give it the time the API pool took.
	if _, err := r.until(10*time.Second, func() bool {
		p, err := pool(r.boot, "mcs")
		return err == nil && poolUp(p, "master-0") && poolUp(p, "master-1") && poolUp(p, "master-2")
	}); err != nil {
		return err
	}
	r.res.MCSAfter = r.fetchConfig()
	return nil
}

func (r *run) teardownSection() error {
	r.header("4. The bootstrap is torn down",
		"Its apiserver stops answering /readyz for good: the bootstrap's API VIP priority drops to 30, below",
		"the masters', and a master takes the VIP. Then its appliance gets SIGTERM (a priority-0 advert hands",
		"over at once) and its stand-ins stop. The client keeps calling through the VIP.")
	t0 := time.Now()
	if err := os.WriteFile(r.failFile(r.boot), []byte("torn down\n"), 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	r.say("bootstrap: apiserver /readyz now fails")
	var took time.Duration
	ok, err := r.until(15*time.Second, func() bool {
		h := r.holder(apiVIP)
		if strings.HasPrefix(h, "master-") && !strings.Contains(h, "+") {
			took = time.Since(t0)
			return true
		}
		return false
	})
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("lab: the API VIP is on %s 15 s after the bootstrap's apiserver failed", r.holder(apiVIP))
	}
	r.res.HandoverTook = took
	r.say("API VIP on %s, %s after the bootstrap's /readyz failed", r.holder(apiVIP), took.Round(time.Millisecond))
	if err := r.pause(time.Second); err != nil {
		return err
	}
	if r.kl != nil {
		code, took, err := r.removePod(r.boot, 30*time.Second)
		if err != nil {
			return err
		}
		r.say("bootstrap: its static pod's manifest removed (as bootkube's teardown does); the kubelet stopped the appliance: exit %d after %s",
			code, took.Round(time.Millisecond))
	} else {
		p := r.procs["run/bootstrap"]
		t1 := time.Now()
		if err := p.Signal(syscall.SIGTERM); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		select {
		case <-p.Done():
		case <-time.After(15 * time.Second):
			return fmt.Errorf("lab: the bootstrap's appliance did not exit 15 s after SIGTERM")
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
		if err := p.Wait(); err != nil {
			r.say("bootstrap: appliance run exited after SIGTERM: %v", err)
		} else {
			r.say("bootstrap: appliance run exited cleanly %s after SIGTERM", time.Since(t1).Round(time.Millisecond))
		}
	}
	if err := r.kill("apiserver/bootstrap"); err != nil {
		return err
	}
	if err := r.kill("mcs/bootstrap"); err != nil {
		return err
	}
	r.say("bootstrap: apiserver and MCS stopped; API VIP on %s", r.holder(apiVIP))
	if err := r.pause(time.Second); err != nil {
		return err
	}
	t := r.caller.since(t0)
	r.res.HandoverCalls, r.res.HandoverFailed, r.res.HandoverReset = t.ok+t.failed+t.broken, t.failed, t.broken
	r.say("client, through the teardown: %s", t)
	r.sayErrors(t)
	return nil
}

func (r *run) sayErrors(t tally) {
	for i, e := range t.errs {
		if i == 3 {
			r.say("  ... %d more", len(t.errs)-3)
			break
		}
		r.say("  %s", e)
	}
}

func (r *run) killSection() error {
	r.header("5. A master dies",
		"The master holding the API VIP loses power: its link is cut and its processes killed, no goodbye.",
		"The others take over after VRRP's Master_Down interval (3 adverts and a skew), and their LBs drop",
		"its apiserver after failed checks. The outage is what the client measured.")
	var dead *netlab.Node
	for _, n := range r.masters {
		if holds(n, apiVIP) {
			dead = n
		}
	}
	if dead == nil {
		return fmt.Errorf("lab: no master holds the API VIP")
	}
	name := r.names[dead]
	alive := make([]*netlab.Node, 0, len(r.masters)-1)
	for _, n := range r.masters {
		if n != dead {
			alive = append(alive, n)
		}
	}
	t0 := time.Now()
	if err := dead.LinkDown(); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if r.kl != nil {
		if err := r.killPod(dead); err != nil {
			return err
		}
	}
	for _, k := range []string{"run/", "apiserver/", "mcs/"} {
		if err := r.kill(k + name); err != nil {
			return err
		}
	}
	r.res.Killed = name
	if r.kl != nil {
		r.say("%s: link cut, its kubelet, appliance, apiserver and MCS killed", name)
	} else {
		r.say("%s: link cut, appliance, apiserver and MCS killed", name)
	}
	var took time.Duration
	ok, err := r.until(15*time.Second, func() bool {
		if h := r.holder(apiVIP, alive...); h != "nobody" && !strings.Contains(h, "+") {
			took = time.Since(t0)
			return true
		}
		return false
	})
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("lab: no surviving master took the API VIP within 15 s")
	}
	r.say("API VIP on %s, %s after %s died", r.holder(apiVIP, alive...), took.Round(time.Millisecond), name)
	holder := r.node(r.holder(apiVIP, alive...))
	if _, err := r.until(15*time.Second, func() bool {
		p, err := pool(holder, "api")
		return err == nil && !poolUp(p, name)
	}); err != nil {
		return err
	}
	if p, err := pool(holder, "api"); err == nil {
		r.say("  %s's LB, API pool: %s", r.names[holder], poolString(p))
	}
	if err := r.pause(2 * time.Second); err != nil {
		return err
	}
	t := r.caller.since(t0)
	r.res.KillOutage, r.res.KillFailed = t.outage, t.failed+t.broken
	r.say("client, since %s died: %s; longest outage %s", name, t, t.outage.Round(time.Millisecond))
	r.sayErrors(t)
	return nil
}

func (r *run) day2Section() error {
	k := r.kubeMissing()
	lines := []string{"A new node, worker-2, is in no appliance.yaml: its own lists no nodes (appliance run refuses a",
		"--node missing from a nodes list)."}
	if k == "" {
		lines = append(lines, "Its Node object is created in the Kubernetes API the masters' appliances watch; their DNS",
			"answers its name as soon as the Node appears.")
	} else {
		lines = append(lines, "It joins through mDNS: its own `appliance run --role worker` publishes it and the masters'",
			"DNS answers its name. Not through the Kubernetes API here: "+k+".")
	}
	r.header("6. A worker joins on day 2", lines...)
	n, err := r.lab.AddNode(r.ctx)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	r.names[n] = "worker-2"
	r.workers = append(r.workers, n)
	r.say("worker-2: new namespace %s, %s", n.Name, n.IPv4.Addr())
	r.res.DHCPPool = r.askDHCP(n, "in no appliance.yaml: the pool, from the API VIP's holder "+r.holder(apiVIP))
	var dnsSrv *netlab.Node
	for _, m := range r.masters {
		if r.names[m] != r.res.Killed {
			dnsSrv = m
			break
		}
	}
	if err := r.startRouter(n); err != nil {
		return err
	}
	// Its appliance.yaml lists no nodes: one that does must list it too.
	day2 := filepath.Join(r.lab.Dir(), "appliance-day2.yaml")
	if err := os.WriteFile(day2, []byte(r.config(false)), 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	var t0 time.Time
	if k == "" {
		r.res.Day2Via = "kubernetes"
		if err := r.createNode("worker-2", n.IPv4.Addr()); err != nil {
			return err
		}
		t0 = time.Now() // the Node exists
	} else {
		r.res.Day2Via = "mdns"
		t0 = time.Now()
		if err := r.startDay2(n, day2); err != nil {
			return err
		}
	}
	name := "worker-2." + Domain
	srv := dnsSrv.IPv4.Addr()
	ok, err := r.until(30*time.Second, func() bool {
		as, err := lookup(r.client, srv, name)
		return err == nil && len(as) > 0 && as[0] == n.IPv4.Addr()
	})
	if err != nil {
		return err
	}
	if ok {
		r.res.Day2DNS = time.Since(t0)
	}
	r.res.Day2Answer = addrsString(lookup(r.client, srv, name))
	joined := "its appliance started"
	if k == "" {
		joined = "kubectl returned"
	}
	r.say("client: DNS %s? at %s (%s) -> %s (answered %s after %s)", name, r.names[dnsSrv], srv,
		r.res.Day2Answer, r.res.Day2DNS.Round(time.Millisecond), joined)
	if !ok {
		return fmt.Errorf("lab: %s's DNS does not answer %s 30 s after it joined", r.names[dnsSrv], name)
	}
	r.say("%s's members: worker-2 from %s", r.names[dnsSrv], memberSource(dnsSrv, "worker-2"))
	for _, m := range r.masters {
		if m != dnsSrv && r.names[m] != r.res.Killed {
			r.say("client: DNS %s? at %s (%s) -> %s", name, r.names[m], m.IPv4.Addr(), addrsString(lookup(r.client, m.IPv4.Addr(), name)))
		}
	}
	// A worker has no apiserver of its own: it watches the API through
	// the VIP, on a connection that may have run through the master that
	// died and that nothing tells it is gone.
	w := r.workers[0]
	answered := func() bool {
		as, err := lookup(r.client, w.IPv4.Addr(), name)
		return err == nil && len(as) > 0 && as[0] == n.IPv4.Addr()
	}
	if answered() {
		r.say("client: DNS %s? at %s (%s) -> %s", name, r.names[w], w.IPv4.Addr(), n.IPv4.Addr())
	} else {
		r.say("client: DNS %s? at %s (%s) -> %s; waiting for it", name, r.names[w], w.IPv4.Addr(),
			addrsString(lookup(r.client, w.IPv4.Addr(), name)))
		wait := time.Duration(float64(30*time.Second) * r.o.Pace)
		ok, err := r.until(wait, answered)
		if err != nil {
			return err
		}
		if ok {
			r.res.Day2WorkerDNS = time.Since(t0)
			r.say("client: DNS %s? at %s -> %s, %s after it joined", name, r.names[w], n.IPv4.Addr(), r.res.Day2WorkerDNS.Round(time.Millisecond))
		} else {
			r.say("client: %s still does not answer %s after %s", r.names[w], name, wait)
		}
	}
	if k == "" {
		// The node itself comes up after its Node object: its appliance
		// reads the same API.
		if err := r.startDay2(n, day2); err != nil {
			return err
		}
	}
	return nil
}

// startDay2 starts the day-2 worker's appliance with the config that lists
// no nodes: a process told its role, or its kubelet's static pod, whose
// manifest passes the role.
func (r *run) startDay2(n *netlab.Node, cfg string) error {
	if r.kl != nil {
		if err := r.startPods(cfg, n); err != nil {
			return err
		}
		r.say("worker-2: a kubelet with the worker's static pod and %s (no nodes listed: it finds itself by its host name and role)", filepath.Base(cfg))
		return nil
	}
	if err := r.startRun(n, cfg, "--role", "worker"); err != nil {
		return err
	}
	if r.kube != nil && r.kube.kubeconfig != "" {
		r.say("worker-2: appliance run --config %s --node worker-2 --role worker --kubeconfig ... started", filepath.Base(cfg))
	} else {
		r.say("worker-2: appliance run --config %s --node worker-2 --role worker started", filepath.Base(cfg))
	}
	return nil
}

// memberSource is where n's appliance learned member name from.
func memberSource(n *netlab.Node, name string) string {
	_, body, _, err := get(n, adminListen, "localhost", "/status", false, 2*time.Second)
	if err != nil {
		return "? (" + err.Error() + ")"
	}
	var st struct {
		Members []struct {
			Name, Source string
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return "? (" + err.Error() + ")"
	}
	var src []string
	for _, m := range st.Members {
		if m.Name == name {
			src = append(src, m.Source)
		}
	}
	if len(src) == 0 {
		return "nowhere"
	}
	return strings.Join(src, ", ")
}

func (r *run) summary() {
	res := r.res
	r.header("Summary")
	line := func(k, format string, args ...any) {
		fmt.Fprintf(r.o.Out, "    %-38s %s\n", k+":", fmt.Sprintf(format, args...))
	}
	line("bootstrap held the API VIP first", "%v", res.BootstrapHeldVIP)
	line("worker Ignition served by", "%s's MCS, then %s's", res.MCSBefore, res.MCSAfter)
	line("bootstrap teardown", "VIP moved in %s; %d calls, %d failed, %d reset in flight",
		res.HandoverTook.Round(time.Millisecond), res.HandoverCalls, res.HandoverFailed, res.HandoverReset)
	line(res.Killed+" died", "longest outage %s, %d calls failed", res.KillOutage.Round(time.Millisecond), res.KillFailed)
	joined := "its appliance started (mDNS)"
	if res.Day2Via == "kubernetes" {
		joined = "its Node object was created"
	}
	line("day-2 worker answered by DNS", "%s after %s", res.Day2DNS.Round(time.Millisecond), joined)
	line("DHCP, a reservation", "%s", res.DHCPReserved)
	line("DHCP, the pool", "%s", res.DHCPPool)
	if res.Day2WorkerDNS > 0 {
		line("... by worker-0's (API through the VIP)", "%s after", res.Day2WorkerDNS.Round(time.Millisecond))
	}
	fmt.Fprintf(r.o.Out, "\ndone in %s\n", time.Since(r.start).Round(100*time.Millisecond))
}
