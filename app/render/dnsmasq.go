package render

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"

	"appliance/dhcp"
	"appliance/dnsserver"
	"appliance/internal/cluster"
)

// Dnsmasq returns dnsmasq/dnsmasq.conf: the cluster's DNS records (api,
// api-int, *.apps, every node with its short name, and their PTR records)
// and authoritative DHCP with a reservation for every node that has a MAC,
// the same answers `appliance dns` and `appliance dhcp` give.
func Dnsmasq(cfg *cluster.Config, opts Options) (string, error) {
	domain := cfg.Cluster.Domain()
	var b strings.Builder
	b.WriteString(header("#", cfg, opts, "dnsmasq configuration"))
	b.WriteString("# Run it as `dnsmasq --conf-file=THIS_FILE` (it replaces /etc/dnsmasq.conf).\n\n")

	b.WriteString("# DNS: names in the cluster domain are answered from here or not at all\n" +
		"# (no SOA or NS at its apex: dnsmasq is no zone's authority; bind/ is).\n")
	fmt.Fprintf(&b, "local=/%s/\n", domain)
	fmt.Fprintf(&b, "local-ttl=%d\n", dnsserver.DefaultTTL)
	if len(cfg.Network.UpstreamDNS) > 0 {
		b.WriteString("no-resolv\n")
		for _, u := range cfg.Network.UpstreamDNS {
			fmt.Fprintf(&b, "server=%s#%d\n", u.Addr(), u.Port())
		}
	} else {
		b.WriteString("# Other names go to the servers in /etc/resolv.conf (network.upstreamDNS is empty).\n")
	}
	// host-record gives the first name the PTR record, as appliance dns does.
	if vips := cfg.Network.APIVIPs; len(vips) > 0 {
		fmt.Fprintf(&b, "host-record=api.%s,api-int.%s,%s\n", domain, domain, addrList(vips))
	}
	// address= holds addresses only: other types of *.apps names, and a
	// family without an ingress VIP, are NXDOMAIN where appliance dns says
	// NODATA; and apps.DOMAIN itself gets the VIP too.
	b.WriteString("# *.apps: dnsmasq answers other types (and a family without an ingress VIP) with NXDOMAIN.\n")
	for _, v := range cfg.Network.IngressVIPs {
		fmt.Fprintf(&b, "address=/apps.%s/%s\n", domain, v)
	}
	if len(cfg.Network.IngressVIPs) > 0 {
		b.WriteString("# PTR only: *.apps cannot be a PTR target.\n")
	}
	for _, v := range cfg.Network.IngressVIPs {
		fmt.Fprintf(&b, "ptr-record=%s,ingress.apps.%s\n", reverseName(v), domain)
	}
	b.WriteString("# Nodes by FQDN and short name; a short name is answered here too, never forwarded.\n")
	for _, n := range cfg.Nodes {
		if len(n.IPs) == 0 {
			continue
		}
		short := strings.ToLower(n.Name)
		fmt.Fprintf(&b, "host-record=%s.%s,%s,%s\nlocal=/%s/\n", short, domain, short, addrList(n.IPs), short)
	}

	if !slices.ContainsFunc(cfg.Network.MachineCIDRs, func(p netip.Prefix) bool { return p.Addr().Is4() }) {
		// appliance dhcp serves DHCPv4 only; neither does this.
		b.WriteString("\n# DHCP: none, the machine network has no IPv4 prefix.\n")
		return b.String(), nil
	}
	d, err := dhcp.FromCluster(cfg)
	if err != nil {
		return "", fmt.Errorf("render: dnsmasq: %w", err)
	}
	b.WriteString("\n# DHCP: authoritative for the machine network; a reservation per node with a MAC.\n")
	if ifc := iface(cfg, opts); ifc != "" {
		fmt.Fprintf(&b, "interface=%s\nbind-dynamic\n", ifc)
	} else {
		b.WriteString("# network.interface is not set: dnsmasq serves every interface; add interface=NAME to narrow it.\n")
	}
	b.WriteString("dhcp-authoritative\n")
	mask := net.IP(net.CIDRMask(d.Network.Bits(), 32)).String()
	lease := leaseTime(d.LeaseTime)
	if d.Pool.Start.IsValid() {
		fmt.Fprintf(&b, "dhcp-range=%s,%s,%s,%s\n", d.Pool.Start, d.Pool.End, mask, lease)
	} else {
		fmt.Fprintf(&b, "# No dhcp.pool: only reserved MACs get an address.\ndhcp-range=%s,static,%s,%s\n", d.Network.Addr(), mask, lease)
	}
	for _, r := range d.Reservations {
		fmt.Fprintf(&b, "dhcp-host=%s,%s,%s,%s\n", r.MAC, r.IP, r.Hostname, lease)
	}
	if d.Router.IsValid() {
		fmt.Fprintf(&b, "dhcp-option=option:router,%s\n", d.Router)
	} else {
		b.WriteString("# network.gateway is not set: no router option.\ndhcp-option=option:router\n")
	}
	if len(d.DNS) > 0 {
		fmt.Fprintf(&b, "dhcp-option=option:dns-server,%s\n", addrList(d.DNS))
	} else {
		b.WriteString("# No masters and no dhcp.dns: no DNS server option.\ndhcp-option=option:dns-server\n")
	}
	if d.Domain != "" {
		fmt.Fprintf(&b, "domain=%s\n", d.Domain)
	}
	if len(d.NTP) > 0 {
		fmt.Fprintf(&b, "dhcp-option=option:ntp-server,%s\n", addrList(d.NTP))
	}
	if len(d.SearchDomains) > 0 {
		fmt.Fprintf(&b, "dhcp-option=option:domain-search,%s\n", strings.Join(d.SearchDomains, ","))
	}
	return b.String(), nil
}

func addrList(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// leaseTime is d in dnsmasq's notation: whole minutes or hours when exact.
func leaseTime(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return fmt.Sprintf("%d", d/time.Second)
}

// reverseName is a's in-addr.arpa or ip6.arpa name without the final dot.
func reverseName(a netip.Addr) string {
	name, _ := dns.ReverseAddr(a.Unmap().String()) // a valid address always has one
	return strings.TrimSuffix(name, ".")
}
