package main

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	pf "appliance/app/preflight"
	"appliance/dhcp"
	"appliance/dnsserver"
	"appliance/lb"
)

type preflightFlags struct {
	config     string
	id         identityFlags
	output     string
	timeout    time.Duration
	resolvers  []string
	resolvConf string
	probeWait  time.Duration
	dhcpWait   time.Duration
	vrrpListen time.Duration
}

// errChecksFailed makes the exit status 1 once the report is written.
var errChecksFailed = errors.New("preflight: some checks failed")

func newPreflightCmd(g *globalFlags) *cobra.Command {
	f := &preflightFlags{}
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "Check the segment, DNS and this node before an install: VIPs free, no rogue DHCP or VRRP, DNS right, ports free, node IP",
		Long: `Check what an install needs from the network, in-process, from appliance.yaml:

  appliance preflight --config appliance.yaml [--node NAME] [--role ROLE] [-o text|json] [--timeout 10s]

Each check has a stable ID and a status (pass, fail, warn, skipped) with a
message naming the culprit and the fix. Run it on the installer's machine
(on the machine network) or on a node: the VIP, DHCP and VRRP checks need a
machine on the segment, the port, MTU and node IP checks need the node itself
(found as appliance run finds it; on a machine that is no node they are
skipped). The exit status is 1 when any check fails. Needs root (raw sockets).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.config == "" {
				return fmt.Errorf("preflight: give --config appliance.yaml (or an installer install-config.yaml)")
			}
			if f.output != "text" && f.output != "json" {
				return fmt.Errorf("preflight: -o %q: want text or json", f.output)
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			hopts, err := f.id.options()
			if err != nil {
				return err
			}
			opts := pf.Options{
				Node: hopts.Node, Role: hopts.Role, Interface: hopts.Interface,
				Timeout: f.timeout, ResolvConf: f.resolvConf,
				ProbeWait: f.probeWait, DHCPWait: f.dhcpWait, VRRPListen: f.vrrpListen,
				Log: log,
			}
			for _, s := range f.resolvers {
				ap, err := parseResolver(s)
				if err != nil {
					return err
				}
				opts.Resolvers = append(opts.Resolvers, ap)
			}
			d := lb.DefaultOptions()
			opts.Listens = pf.Listens{
				DNS: dnsserver.DefaultListen, DHCP: ":" + strconv.Itoa(dhcp.ServerPort),
				APILB: d.API.Listen, MCSLB: d.MCS.Listen,
			}
			results := pf.Run(cmd.Context(), f.config, opts)
			w := cmd.OutOrStdout()
			if f.output == "json" {
				err = pf.WriteJSON(w, results)
			} else {
				err = pf.WriteText(w, results)
			}
			if err != nil {
				return err
			}
			if pf.Failed(results) {
				return errChecksFailed
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "appliance.yaml (or install-config.yaml) describing the cluster")
	f.id.add(cmd)
	fl.StringVarP(&f.output, "output", "o", "text", "output: text or json (a list of {id, status, message, details})")
	fl.DurationVar(&f.timeout, "timeout", pf.DefaultTimeout, "bound on the whole run")
	fl.StringArrayVar(&f.resolvers, "resolver", nil, "DNS server to check through, IP or IP:port (default: dhcp.dns, else /etc/resolv.conf's first)")
	fl.StringVar(&f.resolvConf, "resolv-conf", pf.DefaultResolvConf, "resolv.conf read when neither --resolver nor dhcp.dns is set")
	fl.DurationVar(&f.probeWait, "probe-wait", pf.DefaultProbeWait, "how long ARP/NDP probes and MTU echoes wait for answers")
	fl.DurationVar(&f.dhcpWait, "dhcp-wait", pf.DefaultDHCPWait, "how long to collect DHCP offers")
	fl.DurationVar(&f.vrrpListen, "vrrp-listen", pf.DefaultVRRPListen, "how long to listen for VRRP adverts")
	return cmd
}

// parseResolver reads IP, IP:port or [IPv6]:port; the port defaults to 53.
func parseResolver(s string) (netip.AddrPort, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a, 53), nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("preflight: --resolver %q: want IP or IP:port (e.g. 192.168.126.1 or [fd00::1]:53)", s)
	}
	return ap, nil
}
