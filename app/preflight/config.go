package preflight

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"appliance/internal/cluster"
)

// Check IDs. They are part of the command's interface: scripts match on
// them, so they never change meaning. Per-item checks append ".<item>"
// (a VIP's name, a node's name, a port).
const (
	IDConfig    = "config"
	IDPlacement = "placement"
	IDVIPFree   = "vip-free"   // + ".api-v4" etc.
	IDDHCP      = "dhcp-rogue" // another DHCP server on the segment
	IDVRRP      = "vrrp-vrid"
	IDDNS       = "dns" // + ".api", ".api-int", ".apps", ".node.NAME", ".ptr.NAME", ".wildcard"
	IDPort      = "port"
	IDMTU       = "mtu"
)

// problem is a config problem in the JSON details.
type problem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// DecideConfig is the first check: whether the config loads at all. Every
// problem the loader found is listed (its field path names the culprit and
// its message the fix); the problems are the details.
func DecideConfig(path string, cfg *cluster.Config, err error) Result {
	if err == nil {
		return pass(IDConfig, "%s loads: cluster %s, %d nodes", path, cfg.Cluster.Domain(), len(cfg.Nodes))
	}
	var ve *cluster.ValidationError
	if errors.As(err, &ve) {
		lines := make([]string, len(ve.Problems))
		details := make([]problem, len(ve.Problems))
		for i, p := range ve.Problems {
			lines[i] = p.String()
			details[i] = problem{Field: p.Path, Message: p.Message}
		}
		return fail(IDConfig, "%s does not load; fix these first:\n%s", path, strings.Join(lines, "\n")).with(details)
	}
	return fail(IDConfig, "%s does not load: %v", path, err)
}

// PoolConflict is an address that lies inside the DHCP pool.
type PoolConflict struct {
	Field string     `json:"field"`
	Addr  netip.Addr `json:"addr"`
}

// DecidePlacement reports on where the config puts addresses. The loader
// already refuses VIPs and node addresses outside the machine network or on
// its network/broadcast address, an API VIP equal to an ingress VIP,
// duplicate MACs, addresses and names, and names that are not DNS labels, so
// a loaded config passes those by construction and this says so. What the
// loader allows but an install does not survive is an address inside the
// DHCP pool: a dynamic client can be handed a VIP or a node's address.
func DecidePlacement(cfg *cluster.Config) Result {
	var bad []PoolConflict
	if pool := cfg.DHCP.Pool; !pool.IsZero() {
		in := func(a netip.Addr) bool { return a.Is4() && pool.Start.Compare(a) <= 0 && a.Compare(pool.End) <= 0 }
		check := func(field string, a netip.Addr) {
			if in(a) {
				bad = append(bad, PoolConflict{Field: field, Addr: a})
			}
		}
		for i, a := range cfg.Network.APIVIPs {
			check(fmt.Sprintf("network.apiVIPs[%d]", i), a)
		}
		for i, a := range cfg.Network.IngressVIPs {
			check(fmt.Sprintf("network.ingressVIPs[%d]", i), a)
		}
		if cfg.Network.Gateway.IsValid() {
			check("network.gateway", cfg.Network.Gateway)
		}
		for i, n := range cfg.Nodes {
			for j, a := range n.IPs {
				check(fmt.Sprintf("nodes[%d].ips[%d] (%s)", i, j, n.Name), a)
			}
		}
		if len(bad) > 0 {
			lines := make([]string, len(bad))
			for i, b := range bad {
				lines[i] = fmt.Sprintf("%s %s", b.Field, b.Addr)
			}
			return fail(IDPlacement, "inside dhcp.pool %s-%s, where a client without a reservation can be given them:\n%s\nmove dhcp.pool off these addresses or move the addresses out of it",
				pool.Start, pool.End, strings.Join(lines, "\n")).with(bad)
		}
	}
	nets := make([]string, len(cfg.Network.MachineCIDRs))
	for i, p := range cfg.Network.MachineCIDRs {
		nets[i] = p.String()
	}
	poolNote := "no DHCP pool is configured"
	if !cfg.DHCP.Pool.IsZero() {
		poolNote = fmt.Sprintf("none inside dhcp.pool %s-%s", cfg.DHCP.Pool.Start, cfg.DHCP.Pool.End)
	}
	return pass(IDPlacement, "VIPs and %d nodes' addresses are host addresses in %s, API and ingress VIPs differ, names, MACs and addresses are unique, names are DNS labels; %s",
		len(cfg.Nodes), strings.Join(nets, ", "), poolNote)
}

// IDOnPremStack is the check that OpenShift's own on-prem stack will not run
// beside the appliance.
const IDOnPremStack = "onprem-stack"

// DecideOnPremStack warns when the config is an install-config whose platform
// makes the Machine Config Operator put its own keepalived, haproxy and
// CoreDNS static pods on the nodes (CoreDNS alone with a user-managed load
// balancer): they would claim the VIPs, their VRIDs, 9445 and port 53 on the
// very nodes the appliance runs on, and `appliance run` refuses to start
// next to them. A warning, not a failure: render, provision and this very
// preflight read such files for good reasons.
func DecideOnPremStack(cfg *cluster.Config) Result {
	stack := cfg.Origin.OnPremStack()
	if len(stack) == 0 {
		return pass(IDOnPremStack, "no OpenShift on-prem stack: the installer deploys no keepalived, haproxy or CoreDNS of its own for this config")
	}
	pods := make([]string, len(stack))
	for i, s := range stack {
		pods[i] = "/etc/kubernetes/manifests/" + s + ".yaml"
	}
	return warn(IDOnPremStack, "platform %s with VIPs: the Machine Config Operator puts its own %s on every node (%s), "+
		"which claim what the appliance serves, so `appliance run` refuses to start beside them; "+
		"install with platform none and an appliance.yaml (this file's name, domain, networks and VIPs carried over) "+
		"to run the appliance instead (README: \"Next to OpenShift's on-prem stack\")",
		cfg.Origin.Platform, strings.Join(stack, ", "), strings.Join(pods, ", ")).with(stack)
}
