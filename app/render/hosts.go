package render

import (
	"fmt"
	"strings"

	"appliance/internal/cluster"
)

// Hosts returns an /etc/hosts fragment: api and api-int at the API VIPs,
// every node's FQDN and short name at its addresses, and, since a hosts
// file has no wildcards, the *.apps names an installation and its first
// login need (console, OAuth, canary) at the ingress VIPs.
func Hosts(cfg *cluster.Config, opts Options) string {
	domain := cfg.Cluster.Domain()
	var b strings.Builder
	b.WriteString(header("#", cfg, opts, "/etc/hosts fragment"))
	b.WriteString("# *.apps cannot be written here; the names below are the ones an installation\n# and the first login use. Prefer DNS (bind/ or dnsmasq/) where you can.\n")
	for _, v := range cfg.Network.APIVIPs {
		fmt.Fprintf(&b, "%-15s api.%s api-int.%s\n", v, domain, domain)
	}
	for _, v := range cfg.Network.IngressVIPs {
		fmt.Fprintf(&b, "%-15s", v)
		for _, app := range []string{"console-openshift-console", "oauth-openshift", "canary-openshift-ingress-canary", "downloads-openshift-console"} {
			fmt.Fprintf(&b, " %s.apps.%s", app, domain)
		}
		b.WriteString("\n")
	}
	for _, n := range cfg.Nodes {
		name := strings.ToLower(n.Name)
		for _, ip := range n.IPs {
			fmt.Fprintf(&b, "%-15s %s.%s %s\n", ip, name, domain, name)
		}
	}
	return b.String()
}
