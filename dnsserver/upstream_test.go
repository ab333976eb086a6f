package dnsserver

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestSelectUpstreams(t *testing.T) {
	own := []netip.Addr{netip.MustParseAddr("192.168.126.10"), netip.MustParseAddr("fd00::10")}
	for _, c := range []struct {
		conf    string
		want    []string
		wantErr string
	}{
		{"nameserver 192.168.126.1\n", []string{"192.168.126.1:53"}, ""},
		{"# NetworkManager\nsearch ocp4.example.com\nnameserver 192.168.126.10\nnameserver 10.0.0.2\noptions edns0\nnameserver 2001:db8::1\nnameserver 10.0.0.2\n",
			[]string{"10.0.0.2:53", "[2001:db8::1]:53"}, ""},
		{"nameserver 127.0.0.53\nnameserver ::1\nnameserver 0.0.0.0\nnameserver fe80::1%eth0\nnameserver bogus\n", nil,
			"dns: no upstream resolver left after removing this node's own addresses from /etc/resolv.conf (nameserver 127.0.0.53, ::1, 0.0.0.0, fe80::1%eth0); set network.upstreamDNS"},
		// resolv.conf's order, not sorted.
		{"nameserver 10.0.0.9\nnameserver 2001:db8::1\nnameserver 10.0.0.2\n", []string{"10.0.0.9:53", "[2001:db8::1]:53", "10.0.0.2:53"}, ""},
		// The forwarder's 15 at most, the first ones.
		{manyNameservers(17), manyUpstreams(15), ""},
		{"nameserver 192.168.126.10\nnameserver fd00::10\n", nil,
			"dns: no upstream resolver left after removing this node's own addresses from /etc/resolv.conf (nameserver 192.168.126.10, fd00::10); set network.upstreamDNS"},
		{"", nil, "dns: no upstream resolver left after removing this node's own addresses from /etc/resolv.conf (no nameserver line); set network.upstreamDNS"},
	} {
		got, err := selectUpstreams(parseResolvConf([]byte(c.conf)), own, "/etc/resolv.conf")
		if c.wantErr != "" {
			if err == nil || err.Error() != c.wantErr {
				t.Errorf("%q: err %v\nwant %s", c.conf, err, c.wantErr)
			}
			continue
		}
		var want []netip.AddrPort
		for _, w := range c.want {
			want = append(want, netip.MustParseAddrPort(w))
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%q: got %v %v, want %v", c.conf, got, err, want)
		}
	}
}

// manyNameservers is a resolv.conf with n nameservers 10.0.1.1, 10.0.1.2, ...
func manyNameservers(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "nameserver 10.0.1.%d\n", i+1)
	}
	return b.String()
}

// manyUpstreams is the first n of manyNameservers' addresses with port 53.
func manyUpstreams(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("10.0.1.%d:53", i+1))
	}
	return out
}
