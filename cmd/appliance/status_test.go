package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"appliance/app/node"
	"appliance/dhcp"
	"appliance/dnsserver"
	"appliance/internal/cluster"
	"appliance/internal/host"
	"appliance/lb"
	"appliance/vrrp"
)

var updateStatus = flag.Bool("update-status", false, "rewrite testdata/status/*.txt")

// statusNow is the clock of the golden tables: every time in the sample
// document is relative to it, so "SINCE" and "EXPIRES" columns are stable.
var statusNow = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func stAgo(d time.Duration) time.Time { return statusNow.Add(-d) }

func stMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

var (
	stAddr     = netip.MustParseAddr
	stPrefix   = netip.MustParsePrefix
	stAddrPort = netip.MustParseAddrPort
)

// statusSample is the /status of master-0 in a three-master cluster with
// DHCP on, built from the services' own types as `appliance run` builds it:
// renaming a JSON field breaks the golden tables instead of silently
// emptying a column.
func statusSample() map[string]any {
	acked := stAgo(20 * time.Minute)
	return map[string]any{
		"node": map[string]any{"name": "master-0", "role": cluster.RoleMaster,
			"plan": node.Plan{APIVIP: true, IngressVIP: true, LB: true, DNS: true, MDNS: true, DHCP: true}.String()},
		"host": &host.View{Version: 4, Name: "master-0", Role: cluster.RoleMaster, Configured: true,
			Interface: "eth0", Index: 2, Up: true, MAC: stMAC("52:54:00:00:00:10"),
			Prefixes: []netip.Prefix{stPrefix("192.168.126.10/24"), stPrefix("fd00:126::10/64")}},
		"vips": []vrrp.Status{
			{Name: "api-v4", Interface: "eth0", VRID: 51, Version: 3, VIPs: []netip.Prefix{stPrefix("192.168.126.5/32")},
				State: vrrp.StateMaster.String(), Priority: 40, Master: stAddr("192.168.126.10"), Since: stAgo(5 * time.Minute),
				Predecessor: stAddr("192.168.126.9"),
				Holders: []vrrp.Holder{{Addr: stAddr("192.168.126.12"), Last: stAgo(5*time.Minute + 2*time.Second), Alive: false},
					{Addr: stAddr("192.168.126.9"), Last: stAgo(5 * time.Minute), Alive: true}},
				Tracks:    []vrrp.TrackResult{{Name: "lb", Healthy: true, Weight: node.WeightLB, Since: stAgo(6 * time.Minute)}},
				Transport: vrrp.TransportUnicast, Peers: []netip.Addr{stAddr("192.168.126.11"), stAddr("192.168.126.12")},
				Strangers: []vrrp.Stranger{{Addr: stAddr("192.168.126.66"), Priority: 255, Count: 1200,
					First: stAgo(2 * time.Minute), Last: stAgo(time.Second)}}},
			{Name: "ingress-v4", Interface: "eth0", VRID: 52, Version: 3, VIPs: []netip.Prefix{stPrefix("192.168.126.6/32")},
				State: vrrp.StateBackup.String(), Priority: 10, Master: stAddr("192.168.126.11"), Since: stAgo(90 * time.Second),
				Transport: vrrp.TransportMulticast,
				Tracks: []vrrp.TrackResult{{Name: "ingress", Healthy: false, Weight: -30,
					Err: "GET http://127.0.0.1:1936/healthz/ready: connection refused", Since: stAgo(2 * time.Minute)}}},
			{Name: "api-v6", Interface: "eth0", VRID: 53, Version: 3, VIPs: []netip.Prefix{stPrefix("fd00:126::5/128")},
				State: vrrp.StateFault.String(), Priority: 40, Since: stAgo(time.Hour), Transport: vrrp.TransportUnicast,
				Fault:     "could not install the VIPs",
				Collision: "VRID 53 collision: fd00:126::99 advertises [fd00:126::77], we hold [fd00:126::5/128]; give one of the routers another VRID"},
		},
		"lb": lb.Status{
			Pools: map[string][]lb.BackendStatus{
				lb.PoolAPI: {
					{Name: "bootstrap/v4", Addr: "192.168.126.9:6443", Family: lb.FamilyIPv4.String(), Backup: true, State: lb.HealthUp.String(), Weight: 100},
					{Name: "master-0/v4", Addr: "192.168.126.10:6443", Family: lb.FamilyIPv4.String(), State: lb.HealthUp.String(), Active: 12, Weight: 100},
					{Name: "master-0/v6", Addr: "[fd00:126::10]:6443", Family: lb.FamilyIPv6.String(), State: lb.HealthUp.String(), Active: 2, Weight: 100},
					{Name: "master-1/v4", Addr: "192.168.126.11:6443", Family: lb.FamilyIPv4.String(), State: lb.HealthUp.String(), Active: 3, Weight: 25},
					{Name: "master-2", Addr: "192.168.126.12:6443", Family: lb.FamilyIPv4.String(), State: lb.HealthDown.String()},
				},
				lb.PoolMCS: {},
			},
			Redirect: []string{"192.168.126.5:6443 -> :9445", "192.168.126.5:22623 -> :9446"},
			Handback: []string{"192.168.126.5:6443 -> 192.168.126.9", "192.168.126.5:22623 -> 192.168.126.9"},
			LastRepair: &lb.RedirectRepair{Time: stAgo(3 * time.Minute), Kind: lb.RepairRule,
				Found:  "table inet " + lb.DefaultTable + ": 1 rule missing",
				Action: "replaced table inet " + lb.DefaultTable + " with its 4 desired rules", Trigger: "monitor"},
		},
		"dns": dnsserver.Status{Listen: "0.0.0.0:53", Zone: "ocp4.example.com.", Serving: true,
			Upstreams: []netip.AddrPort{stAddrPort("192.168.126.1:53"), stAddrPort("[fd00:126::1]:53")},
			Clients: []dnsserver.ClientNet{{Prefix: stPrefix("127.0.0.0/8"), Source: dnsserver.ClientSourceLoopback},
				{Prefix: stPrefix("::1/128"), Source: dnsserver.ClientSourceLoopback},
				{Prefix: stPrefix("192.168.126.0/24"), Source: dnsserver.ClientSourceMachine},
				{Prefix: stPrefix("fd00:126::/64"), Source: dnsserver.ClientSourceMachine},
				{Prefix: stPrefix("10.128.0.0/14"), Source: dnsserver.ClientSourceCluster},
				{Prefix: stPrefix("fd01::/48"), Source: dnsserver.ClientSourceCluster},
				{Prefix: stPrefix("172.30.9.0/24"), Source: dnsserver.ClientSourceAllow}},
			MDNS: &dnsserver.MDNSStatus{Node: "master-0", Interface: "eth0",
				Addrs: []netip.Addr{stAddr("192.168.126.10"), stAddr("fd00:126::10")}, Sockets: []string{"ipv4", "ipv6"},
				Members: []string{"worker-9"},
				RefusedClaims: []dnsserver.RefusedClaim{{From: stAddr("192.168.126.66"), Node: "master-1",
					Addrs: []netip.Addr{stAddr("192.168.126.66")}, Reason: "name",
					Detail: "master-1 is known from config with [192.168.126.11], not 192.168.126.66",
					Count:  7, First: stAgo(10 * time.Minute), Last: stAgo(4 * time.Second)}}}},
		"members": []cluster.Member{
			{Name: "bootstrap", Role: cluster.RoleBootstrap, IPs: []netip.Addr{stAddr("192.168.126.9")}, Source: cluster.SourceConfig},
			{Name: "master-0", Role: cluster.RoleMaster, IPs: []netip.Addr{stAddr("192.168.126.10"), stAddr("fd00:126::10")},
				MAC: stMAC("52:54:00:00:00:10"), Source: cluster.SourceConfig, Healthy: true, LastSeen: stAgo(time.Second)},
			{Name: "master-1", Role: cluster.RoleMaster, IPs: []netip.Addr{stAddr("192.168.126.11")}, Source: cluster.SourceConfig,
				Healthy: true, LastSeen: stAgo(2 * time.Second)},
			{Name: "worker-7", Role: cluster.RoleWorker, IPs: []netip.Addr{stAddr("192.168.126.27")}, Source: cluster.SourceKubernetes,
				Healthy: true, LastSeen: stAgo(15 * time.Second)},
			{Name: "worker-9", Role: cluster.RoleWorker, IPs: []netip.Addr{stAddr("192.168.126.29")}, Source: cluster.SourceMDNS,
				LastSeen: stAgo(3 * time.Minute)},
		},
		"dhcp": dhcp.Status{Interface: "eth0", ServerID: stAddr("192.168.126.10"), Reservations: 2,
			Pool: "192.168.126.100-192.168.126.199", ServingPool: true, LeaseTime: (time.Hour).String(),
			Leases: []dhcp.Lease{
				{IP: stAddr("192.168.126.10"), MACText: "52:54:00:00:00:10", Hostname: "master-0", Expiry: statusNow.Add(40 * time.Minute)},
				{IP: stAddr("192.168.126.100"), MACText: "52:54:00:aa:00:01", Hostname: "laptop", Expiry: statusNow.Add(59 * time.Minute)},
				{IP: stAddr("192.168.126.101"), Declined: true, Expiry: statusNow.Add(10 * time.Minute)},
				{IP: stAddr("192.168.126.102"), MACText: "52:54:00:aa:00:02", Expiry: stAgo(5 * time.Minute)},
			},
			Reserved: []dhcp.ReservedStatus{
				{MAC: "52:54:00:00:00:10", IP: stAddr("192.168.126.10"), Hostname: "master-0", LastAck: &acked},
				{MAC: "52:54:00:00:00:11", IP: stAddr("192.168.126.11"), Hostname: "master-1"},
			},
		},
	}
}

// TestStatusTables compares the tables drawn from each section alone, from
// the whole document, and from documents of other shapes with
// testdata/status/NAME.txt (go test -run StatusTables -update-status
// rewrites them).
func TestStatusTables(t *testing.T) {
	full := statusSample()
	only := func(names ...string) map[string]any {
		m := map[string]any{}
		for _, n := range names {
			m[n] = full[n]
		}
		return m
	}
	all := statusSample()
	// A section of a newer appliance: named, not drawn.
	all["kubernetes"] = map[string]any{"nodes": 6}
	cases := map[string]any{
		"node":           only("node", "host"),
		"node-only-plan": only("node"),
		"vips":           only("vips"),
		"lb":             only("lb"),
		"dns":            only("dns"),
		"members":        only("members"),
		"dhcp":           only("dhcp"),
		"all":            all,
		// `appliance dns` without mDNS: no host, no node, no member seen yet.
		"dns-command": map[string]any{"dns": dnsserver.Status{Listen: "127.0.0.1:53", Zone: "ocp4.example.com.",
			Upstreams: []netip.AddrPort{}, Clients: []dnsserver.ClientNet{{Prefix: stPrefix("127.0.0.0/8"), Source: dnsserver.ClientSourceLoopback},
				{Prefix: stPrefix("::1/128"), Source: dnsserver.ClientSourceLoopback}}}, "members": []cluster.Member(nil)},
		// An appliance from before the sources: bare prefixes.
		"dns-bare-clients": map[string]any{"dns": map[string]any{"listen": "0.0.0.0:53", "zone": "ocp4.example.com.",
			"serving": true, "upstreams": []string{"192.168.126.1:53"}, "clients": []string{"127.0.0.0/8", "192.168.126.0/24"}}},
		"host-problem": map[string]any{"host": &host.View{Name: "worker-3",
			Problem: "no interface holds an address in network.machineCIDRs 192.168.126.0/24; set network.interface"}},
		"empty":   map[string]any{},
		"no-vips": map[string]any{"vips": []vrrp.Status{}, "dhcp": dhcp.Status{Interface: "eth0", LeaseTime: "1h0m0s"}},
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			body, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := printAdminStatus(&out, body, statusNow); err != nil {
				t.Fatal(err)
			}
			statusGolden(t, name, out.String())
		})
	}
}

// TestStatusTolerant feeds sections of another shape, as an appliance of
// another version could send: each costs only its own table.
func TestStatusTolerant(t *testing.T) {
	full := statusSample()
	doc := map[string]any{
		"vips":    map[string]any{"api": "MASTER"}, // an object where a list was
		"lb":      nil,                             // a service with nothing to say
		"dns":     full["dns"],
		"members": "three",
		"node":    []int{1},
		"host":    full["host"],
		"dhcp":    map[string]any{"leases": map[string]any{"bad": true}, "interface": "eth0"},
	}
	body, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printAdminStatus(&out, body, statusNow); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	t.Logf("%s", got)
	for _, want := range []string{
		"cannot read the node section", "cannot read the vips section",
		"cannot read the members section", "cannot read the dhcp section",
		// The readable ones are drawn in full.
		"master-0  master  eth0       192.168.126.10/24,fd00:126::10/64",
		"ocp4.example.com.  0.0.0.0:53", "MDNS REFUSED CLAIMS",
		"LB\nno pool\nredirect: none installed\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q", want)
		}
	}
	if strings.Count(got, "NODE\n") != 1 {
		t.Error("the node and host sections make one NODE table")
	}

	// Only a body that is no JSON object at all is an error.
	for _, body := range []string{`not json`, `[1,2]`, `null`, `"ok"`} {
		if err := printAdminStatus(&out, []byte(body), statusNow); err == nil {
			t.Errorf("%s: want an error", body)
		}
	}
}

func statusGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "status", name+".txt")
	if *updateStatus {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run 'Status' -update-status writes it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs; got:\n%s\nwant:\n%s", path, got, want)
	}
}
