package dnsserver

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// CorefileParams is everything the generated Corefile depends on.
type CorefileParams struct {
	Listen   string // host:port; an empty host listens on every address
	Zone     string // the cluster zone, e.g. "ocp4.example.com"
	Instance uint64 // ties the cluster plugin to its Server
	CacheTTL int    // upper bound for cached upstream answers, seconds; 0 disables the cache
	BufSize  int    // EDNS0 buffer size advertised upstream and downstream; 0: plugin default
	QueryLog bool   // log every query (the log plugin)
}

// Corefile renders the server's configuration. It is a pure function of p,
// so the text is golden-tested and the same input always restarts into the
// same server.
func Corefile(p CorefileParams) (string, error) {
	host, port, err := net.SplitHostPort(p.Listen)
	if err != nil {
		return "", fmt.Errorf("dns: listen address %q: %w", p.Listen, err)
	}
	if port == "" {
		return "", fmt.Errorf("dns: listen address %q: no port", p.Listen)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			return "", fmt.Errorf("dns: listen address %q: host must be an IP address: %w", p.Listen, err)
		}
	}
	if p.Zone == "" || strings.ContainsAny(p.Zone, " \t\n{}") {
		return "", fmt.Errorf("dns: cluster zone %q is not a DNS name", p.Zone)
	}
	var b strings.Builder
	fmt.Fprintf(&b, ".:%s {\n", port)
	if host != "" {
		fmt.Fprintf(&b, "    bind %s\n", host)
	}
	fmt.Fprintf(&b, "    metrics {\n        instance %d\n    }\n", p.Instance)
	fmt.Fprintf(&b, "    access {\n        instance %d\n    }\n    errors\n", p.Instance)
	if p.QueryLog {
		b.WriteString("    log\n")
	}
	if p.BufSize > 0 {
		fmt.Fprintf(&b, "    bufsize %d\n", p.BufSize)
	}
	fmt.Fprintf(&b, "    cluster %s {\n        instance %d\n    }\n", strings.TrimSuffix(p.Zone, "."), p.Instance)
	if p.CacheTTL > 0 {
		// prefetch: the forward cache's refresh window (fwdPrefetchPercent).
		fmt.Fprintf(&b, "    cache %d {\n        prefetch 1 1m %d%%\n    }\n", p.CacheTTL, fwdPrefetchPercent)
	}
	fmt.Fprintf(&b, "    upstream {\n        instance %d\n    }\n}\n", p.Instance)
	return b.String(), nil
}
