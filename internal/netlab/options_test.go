package netlab

import (
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestOptionsAddrs(t *testing.T) {
	tests := []struct {
		name     string
		opts     Options
		node     int
		v4, v6   string
		mac      string
		errMatch string
	}{
		{name: "defaults n0", opts: Options{Nodes: 1}, node: 0,
			v4: "192.168.126.10/24", mac: "52:54:00:7e:00:10"},
		{name: "defaults n5", opts: Options{Nodes: 6}, node: 5,
			v4: "192.168.126.15/24", mac: "52:54:00:7e:00:15"},
		{name: "ipv6 hex host part", opts: Options{Nodes: 11, IPv6: netip.MustParsePrefix("fd00:126::/64")}, node: 10,
			v4: "192.168.126.20/24", v6: "fd00:126::1a/64", mac: "52:54:00:7e:00:1a"},
		{name: "unmasked prefixes", opts: Options{Nodes: 1, IPv4: netip.MustParsePrefix("10.1.2.3/16"), IPv6: netip.MustParsePrefix("fd00::5/120")}, node: 0,
			v4: "10.1.0.10/16", v6: "fd00::10/120", mac: "52:54:00:7e:00:10"},
		{name: "mac carries into next byte", opts: Options{Nodes: 1, MACBase: net.HardwareAddr{0x02, 0, 0, 0, 0, 0xf8}}, node: 0,
			v4: "192.168.126.10/24", mac: "02:00:00:00:01:08"},
		{name: "zero nodes", opts: Options{}, errMatch: "Nodes is 0"},
		{name: "bad label", opts: Options{Nodes: 1, Name: "Bad_Label"}, errMatch: "Name"},
		{name: "long label", opts: Options{Nodes: 1, Name: "abcdefghijklm"}, errMatch: "Name"},
		{name: "v6 in IPv4", opts: Options{Nodes: 1, IPv4: netip.MustParsePrefix("fd00::/64")}, errMatch: "not an IPv4"},
		{name: "v4 in IPv6", opts: Options{Nodes: 1, IPv6: netip.MustParsePrefix("10.0.0.0/8")}, errMatch: "not an IPv6"},
		{name: "prefix too small", opts: Options{Nodes: 6, IPv4: netip.MustParsePrefix("10.0.0.0/28")}, errMatch: "no room for node 5"},
		{name: "broadcast avoided", opts: Options{Nodes: 246}, errMatch: "no room for node 245"},
		{name: "multicast mac", opts: Options{Nodes: 1, MACBase: net.HardwareAddr{1, 0, 0, 0, 0, 0}}, errMatch: "unicast"},
		{name: "short mac", opts: Options{Nodes: 1, MACBase: net.HardwareAddr{2, 0, 0}}, errMatch: "unicast"},
		{name: "mac overflow", opts: Options{Nodes: 1, MACBase: net.HardwareAddr{2, 0, 0, 0xff, 0xff, 0xff}}, errMatch: "MACBase"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			err := o.normalize()
			if tc.errMatch != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errMatch) {
					t.Fatalf("normalize() = %v, want error containing %q", err, tc.errMatch)
				}
				return
			}
			if err != nil {
				t.Fatalf("normalize(): %v", err)
			}
			a, err := o.addrs(tc.node)
			if err != nil {
				t.Fatalf("addrs(%d): %v", tc.node, err)
			}
			if got := a.v4.String(); got != tc.v4 {
				t.Errorf("v4 = %s, want %s", got, tc.v4)
			}
			gotV6 := ""
			if a.v6.IsValid() {
				gotV6 = a.v6.String()
			}
			if gotV6 != tc.v6 {
				t.Errorf("v6 = %q, want %q", gotV6, tc.v6)
			}
			if got := a.mac.String(); got != tc.mac {
				t.Errorf("mac = %s, want %s", got, tc.mac)
			}
		})
	}
}

func TestStalePID(t *testing.T) {
	dead := deadPID(t)
	tests := []struct {
		name string
		want bool
	}{
		{name: "apl" + itoa(dead) + "-beef-hub", want: true},
		{name: "apl" + itoa(dead) + "-beef-vrrp-n3", want: true},
		{name: "apl" + itoa(dead) + "-beef-logs-123", want: true},
		{name: "apl" + itoa(selfPID()) + "-beef-hub", want: false},
		{name: "apl1-beef-hub", want: false}, // pid 1 is alive
		{name: "apl" + itoa(dead) + "-xyz1-hub", want: false},
		{name: "aplx-beef-hub", want: false},
		{name: "other", want: false},
	}
	for _, tc := range tests {
		if _, got := stalePID(tc.name); got != tc.want {
			t.Errorf("stalePID(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
