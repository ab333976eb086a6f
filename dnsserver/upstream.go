package dnsserver

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// Resolv.conf locations. NetworkManager's copy lists the real upstreams even
// when /etc/resolv.conf points at a local stub.
const (
	NetworkManagerResolvConf = "/run/NetworkManager/resolv.conf"
	SystemResolvConf         = "/etc/resolv.conf"
)

// defaultResolvConf picks NetworkManager's resolv.conf when it exists.
func defaultResolvConf() string {
	if _, err := os.Stat(NetworkManagerResolvConf); err == nil {
		return NetworkManagerResolvConf
	}
	return SystemResolvConf
}

// parseResolvConf returns the nameserver addresses of a resolv.conf in their
// order. Lines it does not understand are skipped, as the libc resolver does.
func parseResolvConf(data []byte) []netip.Addr {
	var out []netip.Addr
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		if a, err := netip.ParseAddr(f[1]); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// selectUpstreams drops loopback, unspecified and the node's own addresses
// from nameservers (forwarding to ourselves would loop) and adds port 53,
// keeping resolv.conf's order: the forwarder tries them in it.
// Link-local addresses with a zone are dropped too: the forwarder cannot
// address them. path only serves the error message.
func selectUpstreams(nameservers, own []netip.Addr, path string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	var dropped []string
	for _, a := range nameservers {
		if a.IsLoopback() || a.IsUnspecified() || a.Zone() != "" || slices.Contains(own, a) {
			dropped = append(dropped, a.String())
			continue
		}
		ap := netip.AddrPortFrom(a, 53)
		if !slices.Contains(out, ap) && len(out) < maxUpstreams {
			// Beyond the forwarder's 15 the rest is never reached
			// anyway (libc itself reads only the first 3).
			out = append(out, ap)
		}
	}
	if len(out) == 0 {
		what := "no nameserver line"
		if len(dropped) > 0 {
			what = "nameserver " + strings.Join(dropped, ", ")
		}
		return nil, fmt.Errorf("dns: no upstream resolver left after removing this node's own addresses from %s (%s); set network.upstreamDNS", path, what)
	}
	return out, nil
}

// localAddrs lists this node's addresses (in the caller's network namespace).
func localAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("dns: list local addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out, nil
}
