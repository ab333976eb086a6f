package cluster

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// validator turns a raw document into the model, collecting every problem
// rather than stopping at the first: a person fixing a file wants the whole
// list at once.
type validator struct {
	problems []ranked
	// bad holds paths whose shape was already reported; checks below them
	// stay quiet so one mistake yields one message.
	bad []string
	// tr renames model paths to the source document's (install-config.yaml
	// calls cluster.name metadata.name); nil for appliance.yaml.
	tr func(string) string
}

type ranked struct {
	Problem
	rank int
}

func newValidator(tr func(string) string) *validator { return &validator{tr: tr} }

// p names a model path in the source document's terms.
func (v *validator) p(path string) string {
	if v.tr != nil {
		return v.tr(path)
	}
	return path
}

func (v *validator) add(path, format string, args ...any) {
	if v.isBad(path) {
		return
	}
	v.problems = append(v.problems, ranked{Problem{Path: v.p(path), Message: fmt.Sprintf(format, args...)}, sectionRank(path)})
}

func (v *validator) addBad(path, format string, args ...any) {
	v.add(path, format, args...)
	v.bad = append(v.bad, path)
}

func (v *validator) isBad(path string) bool {
	for _, b := range v.bad {
		if path == b || b == "" || strings.HasPrefix(path, b+".") || strings.HasPrefix(path, b+"[") {
			return true
		}
	}
	return false
}

// sectionRank orders problems by section, in the order a file is written.
func sectionRank(path string) int {
	for i, s := range []string{"", "cluster", "network", "nodes", "vrrp", "admin", "provision"} {
		if path == s || strings.HasPrefix(path, s+".") || strings.HasPrefix(path, s+"[") {
			return i
		}
	}
	return 0 // unknown top-level fields come first, with the document's problems
}

func (v *validator) err() error {
	if len(v.problems) == 0 {
		return nil
	}
	slices.SortStableFunc(v.problems, func(a, b ranked) int { return a.rank - b.rank })
	e := &ValidationError{Problems: make([]Problem, len(v.problems))}
	for i, p := range v.problems {
		e.Problems[i] = p.Problem
	}
	return e
}

// addrRef remembers where an address was first seen, for "used twice" errors.
type addrRef struct {
	path string
	node string // owning node's name, if any
}

func (v *validator) validate(r *rawConfig) *Config {
	c := &Config{}
	v.cluster(r, c)
	v.machineCIDRs(r, c)
	owners := v.nodes(r, c)
	vips := v.vips(r, c, owners)
	v.networkRest(r, c, vips)
	v.vrrp(r, c, vips)
	v.dhcp(r, c)
	v.lbAndDNS(r, c)
	v.admin(r, c)
	v.provision(r, c)
	return c
}

// lbAndDNS fills the lb and dns sections; they hold choices, not addresses.
func (v *validator) lbAndDNS(r *rawConfig, c *Config) {
	switch b := r.LB.Balance; b {
	case "":
		c.LB.Balance = LBRoundRobin
	case LBRoundRobin, LBLeastConn:
		c.LB.Balance = b
	default:
		v.add("lb.balance", "%q is not an algorithm; want %s or %s", b, LBRoundRobin, LBLeastConn)
	}
	orDefault := func(b *bool, d bool) bool {
		if b == nil {
			return d
		}
		return *b
	}
	c.LB.MCS = orDefault(r.LB.MCS, true)
	c.LB.Redirect = orDefault(r.LB.Redirect, true)
	c.DNS.MDNS = orDefault(r.DNS.MDNS, false)
	c.LB.Enabled = orDefault(r.LB.Enabled, true)
	c.DNS.Enabled = orDefault(r.DNS.Enabled, true)
	v.dnsAllowFrom(r, c)
	c.VRRP.Enabled = orDefault(r.VRRP.Enabled, true)
	c.DHCP.Enabled = orDefault(r.DHCP.Enabled, false)
	c.VRRP.IngressHealthURL = DefaultIngressHealthURL
	if u := r.VRRP.IngressHealthURL; u != "" {
		v.httpURL("vrrp.ingressHealthURL", u)
		c.VRRP.IngressHealthURL = u
	}
}

// dhcp validates the dhcp section; everything in it is optional.
// dnsAllowFrom reads dns.allowFrom: client networks the DNS answers besides
// the machine networks and loopback.
func (v *validator) dnsAllowFrom(r *rawConfig, c *Config) {
	for i, s := range r.DNS.AllowFrom {
		p := fmt.Sprintf("dns.allowFrom[%d]", i)
		if pfx, ok := v.clientNet(p, s, "a client network", "lets every client use the DNS, an open resolver; list the networks that need it"); ok {
			c.DNS.AllowFrom = append(c.DNS.AllowFrom, pfx)
		}
	}
}

// clientNet parses one network of clients (dns.allowFrom, a pod network):
// a CIDR without host bits, never everyone (whyNotAll says why not).
func (v *validator) clientNet(path, s, what, whyNotAll string) (netip.Prefix, bool) {
	pfx, err := netip.ParsePrefix(s)
	switch {
	case s == "":
		v.add(path, "is empty (want %s like 10.128.0.0/14)", what)
	case err != nil:
		if a, err := netip.ParseAddr(s); err == nil {
			v.add(path, "%q has no prefix length (want %s/%d for this one address, or its network)", s, a.WithZone(""), a.BitLen())
		} else {
			v.add(path, "%q is not a CIDR (want e.g. 10.128.0.0/14 or fd01::/48)", s)
		}
	case pfx.Addr().Is4In6():
		v.add(path, "%q is an IPv4-mapped IPv6 prefix; write it as IPv4", s)
	case pfx != pfx.Masked():
		v.add(path, "%q has host bits set (did you mean %s?)", s, pfx.Masked())
	case pfx.Bits() == 0:
		v.add(path, "%s %s", pfx, whyNotAll)
	default:
		return pfx, true
	}
	return netip.Prefix{}, false
}

func (v *validator) dhcp(r *rawConfig, c *Config) {
	d, out := r.DHCP, &c.DHCP
	out.LeaseTime = DefaultDHCPLeaseTime
	if d.LeaseTime != "" {
		if lt, ok := v.duration("dhcp.leaseTime", d.LeaseTime); ok {
			if lt < time.Minute || lt > 0xffffffff*time.Second {
				v.add("dhcp.leaseTime", "%s is out of range; want 1m to 136y (e.g. 1h)", lt)
			} else {
				out.LeaseTime = lt
			}
		}
	}
	out.LeaseFile = DefaultDHCPLeaseFile
	if d.LeaseFile != "" {
		if !strings.HasPrefix(d.LeaseFile, "/") {
			v.add("dhcp.leaseFile", "%q is not an absolute path (want e.g. %s)", d.LeaseFile, DefaultDHCPLeaseFile)
		} else {
			out.LeaseFile = d.LeaseFile
		}
	}
	if d.Pool != nil {
		start, ok1 := v.addr("dhcp.pool.start", d.Pool.Start)
		end, ok2 := v.addr("dhcp.pool.end", d.Pool.End)
		switch {
		case !ok1 || !ok2:
		case !start.Is4() || !end.Is4():
			v.add("dhcp.pool", "%s-%s: the DHCP server is IPv4 only; want IPv4 addresses", start, end)
		case end.Less(start):
			v.add("dhcp.pool", "start %s is after end %s; swap them", start, end)
		default:
			okS := v.onMachineNet("dhcp.pool.start", start, c, "the pool must be on the machine network")
			okE := v.onMachineNet("dhcp.pool.end", end, c, "the pool must be on the machine network")
			if okS && okE {
				ps, _ := c.Network.PrefixFor(start)
				pe, _ := c.Network.PrefixFor(end)
				if ps != pe {
					v.add("dhcp.pool", "%s and %s are on different machine networks (%s, %s)", start, end, ps, pe)
				} else {
					out.Pool = Range{Start: start, End: end}
				}
			}
		}
	}
	out.DNS = v.ipv4List("dhcp.dns", d.DNS)
	out.NTP = v.ipv4List("dhcp.ntp", d.NTP)
	for i, dom := range d.SearchDomains {
		if !isDNSName(dom) {
			v.add(fmt.Sprintf("dhcp.searchDomains[%d]", i), "%q is not a DNS name (want e.g. ocp4.example.com)", dom)
			continue
		}
		out.SearchDomains = append(out.SearchDomains, dom)
	}
}

// ipv4List parses a list of IPv4 host addresses (DHCP carries no other family).
func (v *validator) ipv4List(path string, ss []string) []netip.Addr {
	var out []netip.Addr
	for i, s := range ss {
		p := fmt.Sprintf("%s[%d]", path, i)
		a, ok := v.addr(p, s)
		if !ok {
			continue
		}
		if !a.Is4() {
			v.add(p, "%s is IPv6; DHCPv4 options carry IPv4 addresses only", a)
			continue
		}
		out = append(out, a)
	}
	return out
}

const labelRule = "want lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters"

func (v *validator) cluster(r *rawConfig, c *Config) {
	c.Cluster.Name = r.Cluster.Name
	switch {
	case r.Cluster.Name == "":
		v.add("cluster.name", "required: a DNS label like ocp4 (with baseDomain it makes the cluster domain)")
	case !isDNSLabel(r.Cluster.Name):
		v.add("cluster.name", "%q is not a DNS label (%s)%s", r.Cluster.Name, labelRule, lowerHint(r.Cluster.Name, isDNSLabel))
	}
	c.Cluster.BaseDomain = r.Cluster.BaseDomain
	switch bd := r.Cluster.BaseDomain; {
	case bd == "":
		v.add("cluster.baseDomain", "required: a DNS name like example.com")
	case strings.HasSuffix(bd, ".") && isDNSName(strings.TrimSuffix(bd, ".")):
		v.add("cluster.baseDomain", "%q ends with a dot; write %s", bd, strings.TrimSuffix(bd, "."))
	case !isDNSName(bd):
		v.add("cluster.baseDomain", "%q is not a DNS name (want dot-separated labels like example.com; each label %s)%s", bd, labelRule, lowerHint(bd, isDNSName))
	case isDNSLabel(r.Cluster.Name) && len(c.Cluster.Domain()) > 253:
		v.add("cluster.baseDomain", "the cluster domain %s.%s is longer than 253 characters; shorten the name or base domain", r.Cluster.Name, bd)
	}
}

// lowerHint suggests the lowercase spelling when only case is wrong.
func lowerHint(s string, ok func(string) bool) string {
	if l := strings.ToLower(s); l != s && ok(l) {
		return fmt.Sprintf(" (did you mean %s?)", l)
	}
	return ""
}

func (v *validator) machineCIDRs(r *rawConfig, c *Config) {
	list, path := r.Network.MachineCIDRs, "network.machineCIDRs"
	switch {
	case r.Network.MachineCIDR != "" && len(r.Network.MachineCIDRs) > 0:
		v.add("network.machineCIDRs", "set machineCIDR or machineCIDRs, not both")
	case r.Network.MachineCIDR != "":
		list, path = []string{r.Network.MachineCIDR}, "network.machineCIDR"
	case !v.isBad("network.machineCIDR") && !v.isBad("network.machineCIDRs"):
		if len(list) == 0 {
			v.add("network.machineCIDRs", "required: the nodes' network, e.g. machineCIDR: 192.168.126.0/24 (or machineCIDRs: [...] when dual-stack)")
		}
	}
	seen := []addrRef{}
	for i, s := range list {
		p := path
		if path == "network.machineCIDRs" {
			p = fmt.Sprintf("%s[%d]", path, i)
		}
		pfx, ok := v.prefix(p, s)
		if !ok {
			continue
		}
		dup := false
		for j, q := range c.Network.MachineCIDRs {
			if q.Overlaps(pfx) {
				v.add(p, "%s overlaps %s (%s); give each machine network once", pfx, v.p(seen[j].path), q)
				dup = true
				break
			}
		}
		if !dup {
			c.Network.MachineCIDRs = append(c.Network.MachineCIDRs, pfx)
			seen = append(seen, addrRef{path: p})
		}
	}
}

func (v *validator) prefix(path, s string) (netip.Prefix, bool) {
	if s == "" {
		v.add(path, "is empty (want a CIDR like 192.168.126.0/24)")
		return netip.Prefix{}, false
	}
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		if a, err := netip.ParseAddr(s); err == nil {
			v.add(path, "%q has no prefix length (want a CIDR like %s/24)", s, a)
		} else {
			v.add(path, "%q is not a CIDR (want e.g. 192.168.126.0/24 or fd00:1::/64)", s)
		}
		return netip.Prefix{}, false
	}
	a := pfx.Addr()
	switch {
	case a.Is4In6():
		v.add(path, "%q is an IPv4-mapped IPv6 prefix; write it as IPv4", s)
	case pfx != pfx.Masked():
		v.add(path, "%q has host bits set (did you mean %s?)", s, pfx.Masked())
	case pfx.Bits() == 0:
		v.add(path, "%s covers every address; give the machine network itself", pfx)
	case a.IsLoopback() || a.IsMulticast() || a.IsUnspecified():
		v.add(path, "%s is not a network machines can live on (loopback, multicast or unspecified)", pfx)
	default:
		return pfx, true
	}
	return netip.Prefix{}, false
}

// addr parses one IP address as this file wants them written: plain, without
// a zone or an IPv4-mapped form, and usable as a host address.
func (v *validator) addr(path, s string) (netip.Addr, bool) {
	if s == "" {
		v.add(path, "is empty (want an IP address like 192.168.126.5)")
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil && strings.Contains(s, "/"):
		v.add(path, "%q is not an IP address (write the address without the /prefix)", s)
	case err != nil:
		v.add(path, "%q is not an IP address", s)
	case a.Zone() != "":
		v.add(path, "%q has a zone; write the address without %%%s", s, a.Zone())
	case a.Is4In6():
		v.add(path, "%q is an IPv4-mapped IPv6 address; write it as %s", s, a.Unmap())
	case a.IsUnspecified() || a.IsMulticast():
		v.add(path, "%s is not a host address (unspecified or multicast)", a)
	default:
		return a, true
	}
	return netip.Addr{}, false
}

// onMachineNet checks that a lies inside a machine network and is not its
// network or broadcast address. With no valid machine network it stays quiet:
// that problem is already reported.
func (v *validator) onMachineNet(path string, a netip.Addr, c *Config, why string) bool {
	if len(c.Network.MachineCIDRs) == 0 {
		return true
	}
	pfx, ok := c.Network.PrefixFor(a)
	if !ok {
		v.add(path, "%s is not inside a machine network (%s); %s", a, joinPrefixes(c.Network.MachineCIDRs), why)
		return false
	}
	if r := reservedIn(pfx, a); r != "" {
		v.add(path, "%s is %s %s; pick a host address", a, r, pfx)
		return false
	}
	return true
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// reservedIn says whether a is the network or broadcast address of p (IPv4,
// /30 and wider; /31 and /32 have none) or the subnet-router anycast address
// (IPv6, /126 and wider).
func reservedIn(p netip.Prefix, a netip.Addr) string {
	if p.Addr().Is4() {
		if p.Bits() > 30 {
			return ""
		}
		if a == p.Addr() {
			return "the network address of"
		}
		b := p.Addr().As4()
		last := binary.BigEndian.Uint32(b[:]) | (uint32(1)<<(32-p.Bits()) - 1)
		binary.BigEndian.PutUint32(b[:], last)
		if a == netip.AddrFrom4(b) {
			return "the broadcast address of"
		}
		return ""
	}
	if p.Bits() <= 126 && a == p.Addr() {
		return "the subnet-router anycast address of"
	}
	return ""
}

func (v *validator) nodes(r *rawConfig, c *Config) map[netip.Addr]addrRef {
	names := map[string]string{}
	macs := map[string]string{}
	owners := map[netip.Addr]addrRef{}
	bootstrap := ""
	for i, rn := range r.Nodes {
		base := fmt.Sprintf("nodes[%d]", i)
		n := Node{Name: rn.Name, Role: Role(rn.Role)}

		switch p := base + ".name"; {
		case rn.Name == "":
			v.add(p, "required: the node's short host name, e.g. master-0")
		case !isDNSLabel(rn.Name):
			v.add(p, "%q is not a DNS label (%s)%s", rn.Name, labelRule, lowerHint(rn.Name, isDNSLabel))
		case names[rn.Name] != "":
			v.add(p, "%q is used twice (also %s)", rn.Name, v.p(names[rn.Name]))
		default:
			names[rn.Name] = base
		}

		switch p := base + ".role"; Role(rn.Role) {
		case RoleMaster, RoleWorker:
		case RoleBootstrap:
			if bootstrap != "" {
				v.add(p, "a second bootstrap node (%s is one); at most one is allowed", v.p(bootstrap))
			} else {
				bootstrap = base
			}
		case "":
			v.add(p, "required: bootstrap, master or worker")
		default:
			v.add(p, "%q is not a role (want bootstrap, master or worker)", rn.Role)
		}

		if rn.MAC != "" {
			p := base + ".mac"
			mac, err := net.ParseMAC(rn.MAC)
			switch {
			case err != nil || len(mac) != 6:
				v.add(p, "%q is not a MAC address (want 6 bytes like 52:54:00:7e:00:10)", rn.MAC)
			case mac[0]&1 != 0:
				v.add(p, "%s is a multicast MAC address (want a unicast one: the first byte must be even)", mac)
			case slices.Equal(mac, make(net.HardwareAddr, 6)):
				v.add(p, "%s is the all-zero MAC address; give the node's real one", mac)
			case macs[mac.String()] != "":
				v.add(p, "%s is used twice (also %s)", mac, v.p(macs[mac.String()]))
			default:
				macs[mac.String()] = p
				n.MAC = mac
			}
		}

		for j, s := range rn.IPs {
			p := fmt.Sprintf("%s.ips[%d]", base, j)
			a, ok := v.addr(p, s)
			if !ok || !v.onMachineNet(p, a, c, "a node's address must be on the machine network") {
				continue
			}
			if prev, dup := owners[a]; dup {
				v.add(p, "%s is used twice (also %s)", a, v.p(prev.path))
				continue
			}
			owners[a] = addrRef{path: p, node: rn.Name}
			n.IPs = append(n.IPs, a)
		}
		c.Nodes = append(c.Nodes, n)
	}
	return owners
}

// vips validates the API and ingress VIPs and returns where each was given.
func (v *validator) vips(r *rawConfig, c *Config, owners map[netip.Addr]addrRef) map[netip.Addr]addrRef {
	seen := map[netip.Addr]addrRef{}
	for _, k := range []struct {
		path string
		list []string
		out  *[]netip.Addr
	}{
		{"network.apiVIPs", r.Network.APIVIPs, &c.Network.APIVIPs},
		{"network.ingressVIPs", r.Network.IngressVIPs, &c.Network.IngressVIPs},
	} {
		family := map[bool]string{} // Is4 → path of the first VIP of that family
		for j, s := range k.list {
			p := fmt.Sprintf("%s[%d]", k.path, j)
			a, ok := v.addr(p, s)
			if !ok {
				continue
			}
			if prev, dup := seen[a]; dup {
				v.add(p, "%s is used twice (also %s); the API and ingress VIPs must differ", a, v.p(prev.path))
				continue
			}
			if prev := family[a.Is4()]; prev != "" {
				v.add(p, "a second %s VIP (%s is %s too); give at most one per address family", family4(a), v.p(prev), family4(a))
				continue
			}
			if !v.onMachineNet(p, a, c, "a VIP must be on the nodes' network") {
				continue
			}
			if o, ok := owners[a]; ok {
				v.add(p, "%s is the address of node %s (%s); a VIP must be an address no node uses", a, o.node, v.p(o.path))
				continue
			}
			family[a.Is4()] = p
			seen[a] = addrRef{path: p}
			*k.out = append(*k.out, a)
		}
	}
	if len(r.Network.APIVIPs) == 0 {
		v.add("network.apiVIPs", "required: the API virtual IP, one per address family, e.g. [192.168.126.5]")
	}
	return seen
}

func family4(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// networkRest checks interface, gateway and upstream DNS.
func (v *validator) networkRest(r *rawConfig, c *Config, vips map[netip.Addr]addrRef) {
	if s := r.Network.Interface; s != "" {
		if msg := badIfName(s); msg != "" {
			v.add("network.interface", "%q %s", s, msg)
		} else {
			c.Network.Interface = s
		}
	}

	if s := r.Network.Gateway; s != "" {
		p := "network.gateway"
		if a, ok := v.addr(p, s); ok && v.onMachineNet(p, a, c, "the gateway must be reachable on the nodes' network") {
			if prev, isVIP := vips[a]; isVIP {
				v.add(p, "%s is also %s; the gateway cannot be a VIP", a, v.p(prev.path))
			} else {
				c.Network.Gateway = a
			}
		}
	}

	v.clusterNetworks(r, c, vips)
	v.nodeIPHints(r, c)

	if n := len(r.Network.UpstreamDNS); n > MaxUpstreamDNS {
		v.add("network.upstreamDNS", "lists %d resolvers; the DNS forwards to at most %d, in order: keep the first %d", n, MaxUpstreamDNS, MaxUpstreamDNS)
	}
	seen := map[netip.AddrPort]string{}
	for i, s := range r.Network.UpstreamDNS {
		p := fmt.Sprintf("network.upstreamDNS[%d]", i)
		ap, msg := parseUpstream(s)
		switch {
		case msg != "":
			v.add(p, "%s", msg)
		case seen[ap] != "":
			v.add(p, "%s is used twice (also %s)", ap, v.p(seen[ap]))
		default:
			seen[ap] = p
			c.Network.UpstreamDNS = append(c.Network.UpstreamDNS, ap)
		}
	}
}

// clusterNetworks reads network.clusterNetwork, the pods' networks, or
// gives OpenShift's defaults. A pod network that overlaps a machine network
// would make node addresses and pod addresses ambiguous to every router on
// the way, so that is refused, naming both.
func (v *validator) clusterNetworks(r *rawConfig, c *Config, vips map[netip.Addr]addrRef) {
	type entry struct {
		path string
		pfx  netip.Prefix
		dflt bool
	}
	var list []entry
	for i, s := range r.Network.ClusterNetwork {
		p := fmt.Sprintf("network.clusterNetwork[%d]", i)
		if pfx, ok := v.clientNet(p, s, "the pods' network", "covers every address; give the cluster's pod network itself"); ok {
			list = append(list, entry{path: p, pfx: pfx})
		}
	}
	if len(r.Network.ClusterNetwork) == 0 && !v.isBad("network.clusterNetwork") {
		list = append(list, entry{path: "network.clusterNetwork", pfx: DefaultClusterNetworkV4, dflt: true})
		if c.hasIPv6() {
			list = append(list, entry{path: "network.clusterNetwork", pfx: DefaultClusterNetworkV6, dflt: true})
		}
	}
	var kept []entry
	for _, e := range list {
		what := e.pfx.String()
		fix := ""
		if e.dflt {
			what = "OpenShift's default pod network " + what + " (no network.clusterNetwork given)"
			fix = "; set network.clusterNetwork to the cluster's pod networks"
		}
		if i := slices.IndexFunc(kept, func(k entry) bool { return k.pfx.Overlaps(e.pfx) }); i >= 0 {
			v.add(e.path, "%s overlaps %s (%s); give each pod network once", what, v.p(kept[i].path), kept[i].pfx)
			continue
		}
		var inside []string
		for _, a := range slices.SortedFunc(maps.Keys(vips), netip.Addr.Compare) {
			if e.pfx.Contains(a) {
				inside = append(inside, fmt.Sprintf("%s (%s)", v.p(vips[a].path), a))
			}
		}
		if len(inside) > 0 {
			v.add(e.path, "%s holds %s; pod networks and VIPs must be apart%s", what, strings.Join(inside, ", "), fix)
			continue
		}
		if j := slices.IndexFunc(c.Network.MachineCIDRs, e.pfx.Overlaps); j >= 0 {
			v.add(e.path, "%s overlaps the machine network %s; the pods' and the nodes' networks must be apart%s",
				what, c.Network.MachineCIDRs[j], fix)
			continue
		}
		kept = append(kept, e)
		c.Network.ClusterNetworks = append(c.Network.ClusterNetworks, e.pfx)
	}
}

// hasIPv6 reports whether the cluster uses IPv6 on its machine networks.
func (c *Config) hasIPv6() bool {
	return slices.ContainsFunc(c.Network.MachineCIDRs, func(p netip.Prefix) bool { return p.Addr().Is6() })
}

// nodeIPHints reads network.nodeIPHint, or takes each family's first machine
// network's first address. OpenShift's nodeip-configuration (runtimecfg
// node-ip) picks the address whose network holds a hint, and skips an
// address equal to one, so a hint must lie in a machine network and must not
// be a node's own address.
func (v *validator) nodeIPHints(r *rawConfig, c *Config) {
	family := map[bool]string{}
	for i, s := range r.Network.NodeIPHint {
		p := fmt.Sprintf("network.nodeIPHint[%d]", i)
		a, ok := v.addr(p, s)
		if !ok {
			continue
		}
		pfx, in := c.Network.PrefixFor(a)
		if !in {
			if len(c.Network.MachineCIDRs) > 0 {
				v.add(p, "%s is in no machine network (%s); the kubelet takes the address whose network holds the hint, so give an address inside the machine network, e.g. %s",
					a, joinPrefixes(c.Network.MachineCIDRs), c.Network.MachineCIDRs[0].Masked().Addr())
			}
			continue
		}
		if n, taken := c.NodeByAddr(a); taken {
			v.add(p, "%s is node %s's own address, which OpenShift's nodeip-configuration skips; give an address no node has, e.g. the network's own %s",
				a, n.Name, pfx.Masked().Addr())
			continue
		}
		if prev := family[a.Is4()]; prev != "" {
			v.add(p, "a second %s hint (%s is %s too); give at most one per address family", family4(a), v.p(prev), family4(a))
			continue
		}
		family[a.Is4()] = p
		c.Network.NodeIPHints = append(c.Network.NodeIPHints, a)
	}
	if len(r.Network.NodeIPHint) > 0 {
		return
	}
	for _, p := range c.Network.MachineCIDRs {
		if family[p.Addr().Is4()] == "" {
			family[p.Addr().Is4()] = "default"
			a := p.Masked().Addr()
			// Only in a /31, /32, /127 or /128 can the network's own address
			// be a node's; the default is then what the check above refuses.
			if n, taken := c.NodeByAddr(a); taken {
				v.add("network.nodeIPHint", "the default hint %s (the first address of %s; no network.nodeIPHint given) is node %s's own address, which OpenShift's nodeip-configuration skips; give an address of %s no node has",
					a, p, n.Name, p)
				continue
			}
			c.Network.NodeIPHints = append(c.Network.NodeIPHints, a)
		}
	}
}

// parseUpstream reads "IP", "[IPv6]", "IP:port" or "[IPv6]:port".
func parseUpstream(s string) (netip.AddrPort, string) {
	const want = "(want e.g. 192.168.126.1, 192.168.126.1:5353, 2001:db8::53 or [2001:db8::53]:53)"
	if s == "" {
		return netip.AddrPort{}, "is empty " + want
	}
	var ap netip.AddrPort
	if a, err := netip.ParseAddr(s); err == nil {
		ap = netip.AddrPortFrom(a, DefaultDNSPort)
	} else if inner, ok := strings.CutPrefix(s, "["); ok && strings.HasSuffix(inner, "]") {
		a, err := netip.ParseAddr(strings.TrimSuffix(inner, "]"))
		if err != nil || !a.Is6() {
			return netip.AddrPort{}, fmt.Sprintf("%q is not an IP address or IP:port %s", s, want)
		}
		ap = netip.AddrPortFrom(a, DefaultDNSPort)
	} else if x, err := netip.ParseAddrPort(s); err == nil {
		ap = x
	} else {
		return netip.AddrPort{}, fmt.Sprintf("%q is not an IP address or IP:port %s", s, want)
	}
	a := ap.Addr()
	switch {
	case ap.Port() == 0:
		return netip.AddrPort{}, fmt.Sprintf("%q has port 0; leave the port out for 53", s)
	case a.Is4In6():
		return netip.AddrPort{}, fmt.Sprintf("%q is an IPv4-mapped IPv6 address; write it as %s", s, a.Unmap())
	case a.IsUnspecified() || a.IsMulticast():
		return netip.AddrPort{}, fmt.Sprintf("%s is not a resolver's address (unspecified or multicast)", a)
	}
	return ap, ""
}

// badIfName applies the kernel's rules for interface names.
func badIfName(s string) string {
	switch {
	case len(s) > 15:
		return "is longer than 15 bytes, the kernel's limit for interface names"
	case s == "." || s == "..":
		return "is not an interface name"
	case strings.ContainsAny(s, "/: \t\n\r\v\f\x00"):
		return "is not an interface name (no '/', ':' or whitespace)"
	}
	return ""
}

const (
	maxPreemptDelay = 1000 * time.Second // keepalived's limit; configs port both ways
	v3Tick          = 10 * time.Millisecond
)

func (v *validator) vrrp(r *rawConfig, c *Config, vips map[netip.Addr]addrRef) {
	rv, out := &r.VRRP, &c.VRRP
	compat := false
	switch rv.Mode {
	case "", VRRPModeNative:
		out.Mode = VRRPModeNative
	case VRRPModeKeepalivedOpenShift:
		out.Mode, compat = rv.Mode, true
	case VRRPTransportUnicast, VRRPTransportMulticast:
		v.add("vrrp.mode", "%q is a transport, not a mode; write vrrp.transport: %s (vrrp.mode is %s or %s)",
			rv.Mode, rv.Mode, VRRPModeNative, VRRPModeKeepalivedOpenShift)
		out.Mode = VRRPModeNative
	default:
		v.add("vrrp.mode", "%q is not a mode (want %s or %s)", rv.Mode, VRRPModeNative, VRRPModeKeepalivedOpenShift)
		out.Mode = VRRPModeNative
	}

	switch rv.Transport {
	case "", VRRPTransportUnicast:
		out.Transport = VRRPTransportUnicast
	case VRRPTransportMulticast:
		out.Transport = VRRPTransportMulticast
	default:
		v.add("vrrp.transport", "%q is not a transport (want %s, the default, or %s)", rv.Transport, VRRPTransportUnicast, VRRPTransportMulticast)
		out.Transport = VRRPTransportUnicast
	}

	switch {
	case rv.Version == 0 && compat:
		out.Version = 2
	case rv.Version == 0:
		out.Version = 3
	case rv.Version == 3 && compat:
		v.add("vrrp.version", "%s mode speaks VRRPv2; remove version or set it to 2", VRRPModeKeepalivedOpenShift)
		out.Version = 2
	case rv.Version == 2 || rv.Version == 3:
		out.Version = rv.Version
	default:
		v.add("vrrp.version", "%d is not a VRRP version (want 2 or 3)", rv.Version)
		out.Version = 3
	}

	switch {
	case rv.AdvertInterval == "" && compat:
		out.AdvertInterval = CompatAdvertInterval
	case rv.AdvertInterval == "" && out.Version == 2:
		out.AdvertInterval = CompatAdvertInterval
	case rv.AdvertInterval == "":
		out.AdvertInterval = DefaultAdvertInterval
	default:
		d, ok := v.duration("vrrp.advertInterval", rv.AdvertInterval)
		switch {
		case !ok:
		case compat && d != CompatAdvertInterval:
			v.add("vrrp.advertInterval", "%s mode advertises every %s; remove advertInterval", VRRPModeKeepalivedOpenShift, CompatAdvertInterval)
		case out.Version == 2 && (d%time.Second != 0 || d < time.Second || d > 255*time.Second):
			v.add("vrrp.advertInterval", "%s does not fit VRRPv2, which advertises in whole seconds from 1s to 255s", d)
		case out.Version == 3 && (d%v3Tick != 0 || d < v3Tick || d > 4095*v3Tick):
			v.add("vrrp.advertInterval", "%s does not fit VRRPv3, which advertises in hundredths of a second from 10ms to 40.95s", d)
		default:
			out.AdvertInterval = d
		}
	}

	out.Preempt = rv.Preempt == nil || *rv.Preempt
	if rv.PreemptDelay != "" {
		if d, ok := v.duration("vrrp.preemptDelay", rv.PreemptDelay); ok {
			if d < 0 || d > maxPreemptDelay {
				v.add("vrrp.preemptDelay", "%s is out of range (want 0s..%s)", d, maxPreemptDelay)
			} else {
				out.PreemptDelay = d
			}
		}
	}

	v.vrids(r, c, compat)

	switch {
	case rv.AuthPass == "":
	case compat:
		v.add("vrrp.authPass", "%s mode derives the password from the cluster name; remove authPass", VRRPModeKeepalivedOpenShift)
	case out.Version == 3:
		v.add("vrrp.authPass", "VRRPv3 has no authentication; remove authPass or set vrrp.version: 2")
	case len(rv.AuthPass) > compatAuthLen:
		// The password itself stays out of the message: errors end up in logs.
		v.add("vrrp.authPass", "is %d bytes; VRRPv2 simple authentication carries at most %d", len(rv.AuthPass), compatAuthLen)
	default:
		out.AuthPass = rv.AuthPass
	}

	seen := map[netip.Addr]string{}
	for i, s := range rv.UnicastPeers {
		p := fmt.Sprintf("vrrp.unicastPeers[%d]", i)
		a, ok := v.addr(p, s)
		switch {
		case !ok:
		case out.Transport == VRRPTransportMulticast:
			v.add(p, "unicast peers need vrrp.transport: %s; remove unicastPeers or the multicast transport", VRRPTransportUnicast)
		case seen[a] != "":
			v.add(p, "%s is used twice (also %s)", a, v.p(seen[a]))
		case vips[a].path != "":
			v.add(p, "%s is %s; a unicast peer is a node's own address", a, v.p(vips[a].path))
		default:
			seen[a] = p
			out.UnicastPeers = append(out.UnicastPeers, a)
		}
	}

	switch {
	case rv.Priority == 0:
	case rv.Priority < 1 || rv.Priority > 254:
		v.add("vrrp.priority", "%d is out of range (want 1..254; 255 is reserved for the address owner; leave it out for the role's default)", rv.Priority)
	default:
		out.Priority = rv.Priority
	}
}

func (v *validator) vrids(r *rawConfig, c *Config, compat bool) {
	api, ingress := DeriveVRIDs(c.Cluster.Name)
	ok := true
	for _, f := range []struct {
		path    string
		val     int
		derived uint8
	}{{"vrrp.apiVRID", r.VRRP.APIVRID, api}, {"vrrp.ingressVRID", r.VRRP.IngressVRID, ingress}} {
		switch {
		case f.val == 0:
		case f.val < 1 || f.val > 255:
			v.add(f.path, "%d is out of range (want 1..255, or leave it out to derive it from the cluster name)", f.val)
			ok = false
		case compat && f.val != int(f.derived) && isDNSLabel(c.Cluster.Name):
			v.add(f.path, "%s mode uses the VRID derived from the cluster name (%d); remove %s", VRRPModeKeepalivedOpenShift, f.derived, strings.TrimPrefix(f.path, "vrrp."))
			ok = false
		}
	}
	if !ok {
		return
	}
	a, i := r.VRRP.APIVRID, r.VRRP.IngressVRID
	switch {
	case a != 0 && i != 0 && a == i:
		v.add("vrrp.ingressVRID", "%d is also vrrp.apiVRID; the API and ingress virtual routers need different VRIDs", i)
		return
	case a == 0 && i == 0:
		a, i = int(api), int(ingress)
	case a == 0:
		a = int(api)
		if a == i {
			a = bumpVRID(a)
		}
	case i == 0:
		i = int(ingress)
		if i == a {
			i = bumpVRID(i)
		}
	}
	c.VRRP.APIVRID, c.VRRP.IngressVRID = uint8(a), uint8(i)
}

// bumpVRID moves a derived VRID off one given explicitly, staying in 1..255.
func bumpVRID(x int) int {
	if x >= 255 {
		return 1
	}
	return x + 1
}

func (v *validator) duration(path, s string) (time.Duration, bool) {
	d, err := time.ParseDuration(s)
	if err != nil {
		hint := ""
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			hint = fmt.Sprintf(" (did you mean %ss?)", s)
		}
		v.add(path, "%q is not a duration (want e.g. 100ms or 1s)%s", s, hint)
		return 0, false
	}
	return d, true
}

func (v *validator) admin(r *rawConfig, c *Config) {
	c.Admin.MetricsPort = r.Admin.MetricsPort
	switch {
	case c.Admin.MetricsPort == 0:
		c.Admin.MetricsPort = DefaultMetricsPort
	case c.Admin.MetricsPort < 1 || c.Admin.MetricsPort > 65535:
		v.add("admin.metricsPort", "%d is not a port; want 1..65535 (default %d, in the 9000-9999 range OpenShift keeps for host-level services)", c.Admin.MetricsPort, DefaultMetricsPort)
	}
	c.Admin.Listen = r.Admin.Listen
	if c.Admin.Listen == "" {
		c.Admin.Listen = DefaultAdminListen
		return
	}
	const want = "(want host:port, e.g. 127.0.0.1:9447, [::1]:9447 or :9447)"
	host, port, err := net.SplitHostPort(r.Admin.Listen)
	if err != nil {
		v.add("admin.listen", "%q is not host:port %s", r.Admin.Listen, want)
		return
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		v.add("admin.listen", "%q has port %q; want a number 0..65535", r.Admin.Listen, port)
		return
	}
	if int(pn) == c.Admin.MetricsPort && host != "127.0.0.1" && host != "::1" && host != "localhost" {
		// Both would hold the node's address on one port.
		v.add("admin.metricsPort", "%d is admin.listen's port too (%q); give one of them another port", c.Admin.MetricsPort, r.Admin.Listen)
	}
	if host == "" {
		return
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Is4In6() || a.IsMulticast() {
			v.add("admin.listen", "%q is not an address to listen on %s", r.Admin.Listen, want)
		}
		return
	}
	if !isDNSName(strings.ToLower(host)) {
		v.add("admin.listen", "%q: %q is neither an IP address nor a host name %s", r.Admin.Listen, host, want)
	}
}

// isDNSLabel reports whether s is a lowercase RFC 1123 label.
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// isDNSName reports whether s is dot-separated lowercase labels, at most 253
// characters, without a trailing dot.
func isDNSName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for l := range strings.SplitSeq(s, ".") {
		if !isDNSLabel(l) {
			return false
		}
	}
	return true
}
