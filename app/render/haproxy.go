package render

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"appliance/internal/cluster"
	"appliance/lb"
)

// ingressCheck is how haproxy checks an ingress node: the port, path and
// scheme of vrrp.ingressHealthURL (the router's readiness, by default
// OpenShift's http://127.0.0.1:1936/healthz/ready), asked of the node
// instead of of itself.
func ingressCheck(cfg *cluster.Config) (port, path, tls string) {
	u, err := url.Parse(cfg.VRRP.IngressHealthURL)
	if err != nil || u.Host == "" {
		u, _ = url.Parse(cluster.DefaultIngressHealthURL)
	}
	port = u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	if u.Scheme == "https" {
		tls = " check-ssl verify none"
	}
	path = u.RequestURI()
	return port, path, tls
}

// HAProxy returns haproxy/haproxy.cfg: the API (6443) and the Machine
// Config Server (22623, unless lb.mcs is false) across the control plane
// with the bootstrap node as a backup, checked over TLS with GET /readyz and
// GET /healthz like `appliance lb`, with its intervals, rise and fall; and
// HTTP (80) and HTTPS (443) to the ingress nodes (the workers, or the masters
// of a cluster without workers), checked at vrrp.ingressHealthURL's port
// and path on each node.
func HAProxy(cfg *cluster.Config, opts Options) string {
	d := lb.DefaultOptions()
	h, p := d.Health, d.Proxy
	var b strings.Builder
	b.WriteString(header("#", cfg, opts, "haproxy configuration"))
	b.WriteString("# Check it with `haproxy -c -f THIS_FILE`.\n")
	fmt.Fprintf(&b, `
global
	# maxconn: haproxy derives it from the file-descriptor limit.

defaults
	mode tcp
	option dontlognull
	timeout connect %s
	timeout client %s
	timeout server %s
	timeout client-fin %s
	timeout server-fin %s
	timeout check %s
	# A backend that fails its check is out after %d failures; its open
	# sessions are closed so clients reconnect to a healthy one.
	default-server inter %s fastinter %s downinter %s fall %d rise %d on-marked-down shutdown-sessions
`, dur(p.ConnectTimeout), dur(p.IdleTimeout), dur(p.IdleTimeout), dur(p.FinTimeout), dur(p.FinTimeout),
		dur(h.Timeout), h.Fall, dur(h.Interval), dur(h.FastInterval), dur(h.Interval), h.Fall, h.Rise)

	var control, backup, workers, masters []cluster.Node
	for _, n := range cfg.Nodes {
		if len(n.IPs) == 0 {
			continue
		}
		switch n.Role {
		case cluster.RoleMaster:
			control = append(control, n)
			masters = append(masters, n)
		case cluster.RoleBootstrap:
			backup = append(backup, n)
		case cluster.RoleWorker:
			workers = append(workers, n)
		}
	}
	v6 := hasV6(cfg.Network.APIVIPs) || hasV6(cfg.Network.IngressVIPs)
	balance := cfg.LB.Balance
	if balance == "" {
		balance = cluster.LBRoundRobin
	}
	tlsPool := func(name string, port uint16, path string) {
		fmt.Fprintf(&b, "\nlisten %s\n", name)
		writeBinds(&b, port, v6)
		fmt.Fprintf(&b, "\tbalance %s\n\toption httpchk GET %s\n\thttp-check expect status 200\n", balance, path)
		for _, n := range control {
			fmt.Fprintf(&b, "\tserver %s %s check check-ssl verify none", n.Name, hostPort(n, port))
			if h.SlowStart > 0 {
				fmt.Fprintf(&b, " slowstart %s", dur(h.SlowStart))
			}
			b.WriteString("\n")
		}
		for _, n := range backup {
			fmt.Fprintf(&b, "\tserver %s %s check check-ssl verify none backup\n", n.Name, hostPort(n, port))
		}
	}
	b.WriteString("\n# The API: kube-apiserver fails /readyz well before it stops serving, so the\n# check is /readyz over TLS (not /healthz, not a TCP connect).")
	tlsPool("api-server", d.API.BackendPort, d.API.CheckPath)
	if cfg.LB.MCS {
		b.WriteString("\n# The Machine Config Server, which serves Ignition to new nodes.")
		tlsPool("machine-config-server", d.MCS.BackendPort, d.MCS.CheckPath)
	}
	ingress := workers
	if len(ingress) == 0 {
		ingress = masters
	}
	checkPort, checkPath, checkTLS := ingressCheck(cfg)
	for _, port := range []uint16{80, 443} {
		fmt.Fprintf(&b, "\nlisten ingress-router-%d\n", port)
		writeBinds(&b, port, v6)
		fmt.Fprintf(&b, "\tbalance source\n\toption httpchk GET %s\n\thttp-check expect status 200\n", checkPath)
		for _, n := range ingress {
			fmt.Fprintf(&b, "\tserver %s %s check port %s%s\n", n.Name, hostPort(n, port), checkPort, checkTLS)
		}
	}
	return b.String()
}

// hostPort is a node's first address with port, as lb uses it: a
// dual-stack node is one backend.
func hostPort(n cluster.Node, port uint16) string {
	return netip.AddrPortFrom(n.IPs[0], port).String()
}

func writeBinds(b *strings.Builder, port uint16, v6 bool) {
	fmt.Fprintf(b, "\tbind 0.0.0.0:%d\n", port)
	if v6 {
		fmt.Fprintf(b, "\tbind :::%d v6only\n", port)
	}
}

func hasV6(as []netip.Addr) bool {
	for _, a := range as {
		if a.Unmap().Is6() {
			return true
		}
	}
	return false
}

// dur writes d in haproxy's units (ms, s, m, h), exact.
func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}
