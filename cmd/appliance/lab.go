package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/vishvananda/netlink"

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
network changes), runs "appliance vip" on each, pings the VIP from a client node, and then
kills, restores, stops and cuts off the master while it shows who holds the VIP and how long
the client lost its replies. Everything is removed on exit, also on Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return errors.New("lab: needs root (network namespaces and raw sockets)")
			}
			return runLab(cmd.Context(), cmd.OutOrStdout(), f, g)
		},
	}
	cmd.Flags().IntVar(&f.nodes, "nodes", 3, "nodes running the VIP daemon")
	cmd.Flags().DurationVar(&f.interval, "advert-interval", 100*time.Millisecond, "VRRP advert interval")
	cmd.Flags().BoolVar(&f.keep, "keep", false, "after the scenario, keep the lab up until Ctrl-C")
	return cmd
}

// labView prints who holds the VIP whenever it changes, with the client's losses.
type labView struct {
	out   io.Writer
	nodes []*netlab.Node
	vip   netip.Addr
	ping  *netlab.Pinger
	start time.Time
	last  string
}

func (v *labView) holders() string {
	var hs []string
	for _, n := range v.nodes {
		h, err := n.Handle()
		if err != nil {
			continue
		}
		if link, err := h.LinkByName(n.Iface); err == nil {
			addrs, _ := h.AddrList(link, netlink.FAMILY_V4)
			for _, a := range addrs {
				if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == v.vip {
					hs = append(hs, n.Name)
				}
			}
		}
		h.Close()
	}
	if len(hs) == 0 {
		return "nobody"
	}
	return strings.Join(hs, "+")
}

func (v *labView) say(format string, args ...any) {
	fmt.Fprintf(v.out, "%7.3fs  %s\n", time.Since(v.start).Seconds(), fmt.Sprintf(format, args...))
}

// watch polls the holders every 10 ms for d, printing each change.
func (v *labView) watch(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if h := v.holders(); h != v.last {
			sent, ok := v.ping.Counts()
			v.say("VIP %s held by %-8s (client: %d/%d echo replies)", v.vip, h, ok, sent)
			v.last = h
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

func (v *labView) outage(from time.Time) {
	o := v.ping.LongestOutage(from, time.Now(), 200*time.Millisecond)
	v.say("client outage: %s without replies", o.Round(time.Millisecond))
}

func runLab(ctx context.Context, out io.Writer, f *labFlags, g *globalFlags) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	lab, err := netlab.New(ctx, netlab.Options{Nodes: f.nodes + 1, Name: "lab"})
	if err != nil {
		return err
	}
	defer lab.Close()
	nodes, client := lab.Nodes[:f.nodes], lab.Nodes[f.nodes]
	vip := netip.MustParseAddr("192.168.126.5")
	vipPfx := netip.PrefixFrom(vip, nodes[0].IPv4.Bits()).String()
	fmt.Fprintf(out, "lab %s: %d nodes on a bridge (192.168.126.0/24), client %s; VIP %s, VRRPv3 every %s\n",
		lab.Prefix(), f.nodes, client.IPv4.Addr(), vip, f.interval)

	procs := make([]*netlab.Process, len(nodes))
	start := func(i int) error {
		prio := 100 - 10*i
		fmt.Fprintf(out, "  %s %s: appliance vip --priority %d\n", nodes[i].Name, nodes[i].IPv4.Addr(), prio)
		p, err := nodes[i].Start(ctx, exe, "--log-level", g.logLevel, "--log-format", "text", "vip",
			"--interface", nodes[i].Iface, "--vip", vipPfx, "--vrid", "51", "--priority", strconv.Itoa(prio),
			"--advert-interval", f.interval.String())
		procs[i] = p
		return err
	}
	for i := range nodes {
		if err := start(i); err != nil {
			return err
		}
	}
	ping, err := client.Ping(vip, 10*time.Millisecond)
	if err != nil {
		return err
	}
	defer ping.Close()
	v := &labView{out: out, nodes: nodes, vip: vip, ping: ping, start: time.Now()}
	fmt.Fprintf(out, "client pings %s every 10 ms\n\n", vip)

	step := func(title string, act func() error, watch time.Duration) error {
		v.say("== %s", title)
		t0 := time.Now()
		if err := act(); err != nil {
			return err
		}
		if err := v.watch(ctx, watch); err != nil {
			return err
		}
		v.outage(t0)
		return nil
	}
	steps := []struct {
		title string
		act   func() error
		watch time.Duration
	}{
		{"election", func() error { return nil }, 3 * time.Second},
		{"kill -9 n0's daemon (no goodbye: n1 takes over after Master_Down; n0's kernel keeps a stale copy of the VIP)", func() error { return procs[0].Kill() }, 3 * time.Second},
		{"restart n0: it clears its stale VIP and preempts", func() error { return start(0) }, 3 * time.Second},
		{"SIGTERM the master n0 (planned: priority-0 advert, immediate handover)", func() error {
			return procs[0].Signal(syscall.SIGTERM)
		}, 3 * time.Second},
		{"restart n0", func() error { return start(0) }, 3 * time.Second},
		{"cut n0's link, as if the node died (the client's outage is the real failover time)", nodes[0].LinkDown, 3 * time.Second},
		{"restore n0's link", nodes[0].LinkUp, 3 * time.Second},
	}
	for _, s := range steps {
		if err := step(s.title, s.act, s.watch); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	sent, ok := ping.Counts()
	fmt.Fprintf(out, "\ndone: the client got %d of %d replies; removing the lab\n", ok, sent)
	if f.keep {
		fmt.Fprintln(out, "keeping the lab up; Ctrl-C to remove it")
		_ = v.watch(ctx, 24*time.Hour)
	}
	return nil
}
