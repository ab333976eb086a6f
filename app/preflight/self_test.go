package preflight

import (
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"appliance/internal/cluster"
	"appliance/internal/host"
)

// TestFindSelf: preflight finds its node as every command does, a day-2
// node included, and tells a machine that is no node (whose node-only
// checks are skipped) from a wrong flag (which fails them).
func TestFindSelf(t *testing.T) {
	cfg := testConfig(t, "")
	empty, err := cluster.Parse([]byte("cluster: {name: ocp4, baseDomain: example.com}\nnetwork: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	eth0 := func(addr string) []host.Link {
		return []host.Link{{Name: "eth0", Index: 2, Up: true, Addrs: []netip.Prefix{netip.MustParsePrefix(addr)}}}
	}
	log := slog.New(slog.DiscardHandler)
	cases := []struct {
		name     string
		cfg      *cluster.Config
		opts     host.Options
		hostname string
		links    []host.Link
		want     string // "name role", or "" when no node
		err      string
	}{
		{"configured, by address", cfg, host.Options{}, "x", eth0("192.168.126.10/24"), "master-0 master", ""},
		{"day-2 worker by host name and --role", cfg, host.Options{Role: cluster.RoleWorker}, "worker-7.ocp4.example.com", eth0("192.168.126.17/24"), "worker-7 worker", ""},
		{"the installer's machine", cfg, host.Options{}, "laptop", eth0("192.168.126.99/24"), "", "matches no configured node"},
		{"mistyped --node", cfg, host.Options{Node: "master-9"}, "laptop", eth0("192.168.126.99/24"), "", `--node "master-9"`},
		{"no nodes and no role", empty, host.Options{}, "w7", eth0("192.168.126.70/24"), "", "pass --role"},
		{"link listing failed", cfg, host.Options{}, "x", nil, "", "netlink down"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var lerr error
			if c.links == nil {
				lerr = errors.New("netlink down")
			}
			n, err := findSelf(c.cfg, c.opts, c.hostname, c.links, lerr, log)
			if c.want == "" {
				if n != nil || err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("node %v, err %v; want none and an error naming %q", n, err, c.err)
				}
				return
			}
			if err != nil || n == nil || n.Name+" "+string(n.Role) != c.want {
				t.Fatalf("node %v, err %v; want %s", n, err, c.want)
			}
		})
	}
}
