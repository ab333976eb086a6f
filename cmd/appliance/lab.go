package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/vishvananda/netlink"

	"appliance/internal/cluster"
	"appliance/internal/netlab"
)

type labFlags struct {
	nodes    int
	interval time.Duration
	keep     bool
}

func newLabCmd(g *globalFlags) *cobra.Command {
	f := &labFlags{}
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Bring up a lab of nodes in network namespaces and show the appliance at work (needs root)",
		Long: `Creates nodes in network namespaces joined by a bridge (nothing in the host's own
network changes), writes one appliance.yaml for a small cluster and runs every
service of the appliance on the control-plane nodes: vip, dns, lb and dhcp, next
to a stand-in API server. A client node then gets its address by DHCP, asks the
cluster DNS, calls the API through VIP and load balancer while a backend fails,
and pings the VIP while the master is killed, restarted, stopped and cut off.
Everything is removed on exit, also on Ctrl-C.

The client uses udhcpc, dig and curl (Debian packages udhcpc, bind9-dnsutils,
curl; "make test-deps" installs them).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return errors.New("lab: needs root (network namespaces and raw sockets)")
			}
			if f.nodes < 3 || f.nodes > 9 {
				return fmt.Errorf("lab: --nodes %d: give 3 to 9 control-plane nodes", f.nodes)
			}
			return runLab(cmd.Context(), cmd.OutOrStdout(), f, g)
		},
	}
	cmd.Flags().IntVar(&f.nodes, "nodes", 3, "control-plane nodes (master-0 ...) running the services")
	cmd.Flags().DurationVar(&f.interval, "advert-interval", cluster.DefaultAdvertInterval, "VRRP advert interval")
	cmd.Flags().BoolVar(&f.keep, "keep", false, "after the scenario, keep the lab up until Ctrl-C")
	cmd.AddCommand(newLabAPIServerCmd())
	return cmd
}

// Admin listeners of the services inside each node; every node has its own
// loopback, so only services sharing a node need distinct ports.
const (
	labAdminVIP  = "127.0.0.1:9447"
	labAdminDNS  = "127.0.0.1:9448"
	labAdminLB   = "127.0.0.1:9449"
	labAdminDHCP = "127.0.0.1:9450"
)

// labTools are the client programs the lab runs and their Debian packages.
var labTools = []struct{ cmd, pkg string }{
	{"udhcpc", "udhcpc"},
	{"dig", "bind9-dnsutils"},
	{"curl", "curl"},
}

// labRun is one run of the lab: its nodes, files and the processes it started.
type labRun struct {
	ctx      context.Context
	out      io.Writer
	f        *labFlags
	g        *globalFlags
	exe      string
	lab      *netlab.Lab
	masters  []*netlab.Node
	client   *netlab.Node
	have     map[string]bool
	start    time.Time
	cfgPath  string
	script   string
	vip      netip.Addr
	ingress  netip.Addr
	workerIP netip.Addr
	vipProcs []*netlab.Process
	apiProcs []*netlab.Process
}

func runLab(ctx context.Context, out io.Writer, f *labFlags, g *globalFlags) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	l := &labRun{
		ctx: ctx, out: out, f: f, g: g, exe: exe, have: map[string]bool{},
		vip:      netip.MustParseAddr("192.168.126.5"),
		ingress:  netip.MustParseAddr("192.168.126.6"),
		workerIP: netip.MustParseAddr("192.168.126.50"),
	}
	var missing []string
	for _, t := range labTools {
		if _, err := exec.LookPath(t.cmd); err == nil {
			l.have[t.cmd] = true
		} else {
			missing = append(missing, fmt.Sprintf("%s (apt-get install %s)", t.cmd, t.pkg))
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(out, "note: missing %s; the steps using them are skipped (make test-deps installs them)\n\n",
			strings.Join(missing, ", "))
	}
	lab, err := netlab.New(ctx, netlab.Options{Nodes: f.nodes + 1, Name: "lab"})
	if err != nil {
		return err
	}
	defer lab.Close()
	l.lab = lab
	l.masters, l.client = lab.Nodes[:f.nodes], lab.Nodes[f.nodes]
	l.start = time.Now()
	err = l.run()
	if ctx.Err() != nil {
		fmt.Fprintln(out, "\ninterrupted: removing the lab")
		return nil
	}
	if err != nil {
		fmt.Fprintln(out, "\nlab failed; removing the lab")
	}
	return err
}

func (l *labRun) run() error {
	for _, s := range []func() error{l.setup, l.dhcpSection, l.dnsSection, l.lbSection, l.vipSection} {
		if err := s(); err != nil {
			return err
		}
	}
	fmt.Fprintf(l.out, "\ndone in %s: removing the lab (namespaces, processes, files)\n",
		time.Since(l.start).Round(100*time.Millisecond))
	if l.f.keep {
		fmt.Fprintf(l.out, "keeping the lab up (namespaces %s-*, files in %s); Ctrl-C to remove it\n",
			l.lab.Prefix(), l.lab.Dir())
		<-l.ctx.Done()
	}
	return nil
}

func (l *labRun) header(title string, lines ...string) {
	fmt.Fprintf(l.out, "\n=== %s\n", title)
	for _, s := range lines {
		fmt.Fprintf(l.out, "    %s\n", s)
	}
}

func (l *labRun) say(format string, args ...any) {
	fmt.Fprintf(l.out, "%7.3fs  %s\n", time.Since(l.start).Seconds(), fmt.Sprintf(format, args...))
}

// labView prints who holds the VIPs whenever it changes, with the client's losses.
type labView struct {
	l    *labRun
	ping *netlab.Pinger
	last string
}

// holders lists the masters whose eth0 carries addr.
func (l *labRun) holders(addr netip.Addr) []int {
	var hs []int
	for i, n := range l.masters {
		h, err := n.Handle()
		if err != nil {
			continue
		}
		if link, err := h.LinkByName(n.Iface); err == nil {
			addrs, _ := h.AddrList(link, netlink.FAMILY_V4)
			for _, a := range addrs {
				if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr {
					hs = append(hs, i)
				}
			}
		}
		h.Close()
	}
	return hs
}

func (l *labRun) holderNames(addr netip.Addr) string {
	var s []string
	for _, i := range l.holders(addr) {
		s = append(s, l.masters[i].Name)
	}
	if len(s) == 0 {
		return "nobody"
	}
	return strings.Join(s, "+")
}

// watch polls the holders every 10 ms for d, printing each change.
func (v *labView) watch(d time.Duration) error {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		h := fmt.Sprintf("API VIP %s on %-6s ingress VIP %s on %-6s", v.l.vip, v.l.holderNames(v.l.vip),
			v.l.ingress, v.l.holderNames(v.l.ingress))
		if h != v.last {
			sent, ok := v.ping.Counts()
			v.l.say("%s (client: %d/%d echo replies)", h, ok, sent)
			v.last = h
		}
		select {
		case <-v.l.ctx.Done():
			return v.l.ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

func (v *labView) outage(from time.Time) {
	o := v.ping.LongestOutage(from, time.Now(), 200*time.Millisecond)
	v.l.say("client outage: %s without replies", o.Round(time.Millisecond))
}

// vipSection is the failover scenario: the client pings the API VIP while
// the master is killed, restarted, stopped and cut off.
func (l *labRun) vipSection() error {
	l.header("5. VIP failover: the client pings the API VIP every 10 ms",
		"All masters have the same VRRP priority (role master): whoever is master keeps the VIPs,",
		"a restarted node rejoins as a backup, and when backups take over at the same moment VRRP's",
		"tie-break by address leaves one. Each step targets whoever is master at that moment.")
	ping, err := l.client.Ping(l.vip, 10*time.Millisecond)
	if err != nil {
		return err
	}
	defer ping.Close()
	v := &labView{l: l, ping: ping}
	m := -1 // the master the previous step acted on
	master := func() (int, error) {
		hs := l.holders(l.vip)
		if len(hs) == 0 {
			return -1, errors.New("lab: nobody holds the API VIP")
		}
		return hs[len(hs)-1], nil
	}
	steps := []struct {
		title string
		act   func() error
	}{
		{"who is master now", nil},
		{"kill -9 the master's vip daemon (no goodbye: a backup takes over after Master_Down; the dead daemon's VIPs stay on its node)", func() error {
			var err error
			if m, err = master(); err != nil {
				return err
			}
			l.say("killing appliance vip on %s", l.masters[m].Name)
			return l.vipProcs[m].Kill()
		}},
		{"restart it: it removes its stale VIPs and rejoins", func() error { return l.startVIP(m) }},
		{"SIGTERM the master (planned stop: a priority-0 advert hands over at once)", func() error {
			var err error
			if m, err = master(); err != nil {
				return err
			}
			l.say("stopping appliance vip on %s", l.masters[m].Name)
			return l.vipProcs[m].Signal(syscall.SIGTERM)
		}},
		{"restart it", func() error { return l.startVIP(m) }},
		{"cut the master's link, as if the node died (the client's outage is the real failover time)", func() error {
			var err error
			if m, err = master(); err != nil {
				return err
			}
			l.say("link of %s down", l.masters[m].Name)
			return l.masters[m].LinkDown()
		}},
		{"restore its link", func() error { return l.masters[m].LinkUp() }},
	}
	for _, s := range steps {
		l.say("-- %s", s.title)
		v.last = ""
		t0 := time.Now()
		if s.act != nil {
			if err := s.act(); err != nil {
				return err
			}
		}
		d := 2500 * time.Millisecond
		if s.act == nil {
			d = 500 * time.Millisecond
		}
		if err := v.watch(d); err != nil {
			return err
		}
		v.outage(t0)
	}
	sent, ok := ping.Counts()
	l.say("the client got %d of %d echo replies in this section", ok, sent)
	return nil
}
