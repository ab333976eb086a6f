package main

import (
	"github.com/spf13/cobra"

	"appliance/internal/cluster"
	"appliance/internal/host"
)

// The flags that say which node this machine is and where its addresses
// are, with one help text for every command that takes them; internal/host
// decides from them (host.Who, host.Locate).
const (
	nodeHelp = "this node's name (default: the configured node owning a local address, else the one named like the short host name, " +
		"else with --role the short host name, a node that joins later)"
	roleHelp = "the role of a node that is not in nodes (one that joins later; the static pod passes it): bootstrap, master or worker. " +
		"A configured node keeps its configured role"
	interfaceHelp = "pin the machine network's interface (default network.interface, else the one holding this machine's addresses in network.machineCIDRs)"
)

// identityFlags are --node, --role and --interface.
type identityFlags struct {
	node, role, iface string
}

// add registers --node, --role and --interface, for the commands that
// identify the node (run, vip, dns, preflight).
func (f *identityFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.node, "node", "", nodeHelp)
	cmd.Flags().StringVar(&f.role, "role", "", roleHelp)
	f.addInterface(cmd)
}

// addInterface registers --interface alone, for commands that only need
// where this machine is, not which node it is (lb, dhcp).
func (f *identityFlags) addInterface(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.iface, "interface", "", interfaceHelp)
}

// options are the flags as host.Options; a --role that is no role is an
// error naming the flag.
func (f *identityFlags) options() (host.Options, error) {
	o := host.Options{Node: f.node, Role: cluster.Role(f.role), Interface: f.iface}
	return o, o.Check()
}
