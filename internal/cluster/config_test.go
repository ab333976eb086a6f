package cluster

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// baseDoc is a valid dual-stack appliance.yaml as a tree; cases mutate a copy.
func baseDoc() map[string]any {
	return map[string]any{
		"cluster": map[string]any{"name": "ocp4", "baseDomain": "example.com"},
		"network": map[string]any{
			"machineCIDRs": []any{"192.168.126.0/24", "fd00:126::/64"},
			"gateway":      "192.168.126.1",
			"apiVIPs":      []any{"192.168.126.5", "fd00:126::5"},
			"ingressVIPs":  []any{"192.168.126.6", "fd00:126::6"},
			"upstreamDNS":  []any{"192.168.126.1"},
		},
		"nodes": []any{
			map[string]any{"name": "bootstrap", "role": "bootstrap", "mac": "52:54:00:7e:00:09", "ips": []any{"192.168.126.9"}},
			map[string]any{"name": "master-0", "role": "master", "mac": "52:54:00:7e:00:10", "ips": []any{"192.168.126.10", "fd00:126::10"}},
			map[string]any{"name": "worker-0", "role": "worker", "mac": "52:54:00:7e:00:20", "ips": []any{"192.168.126.20"}},
		},
	}
}

var pathElem = regexp.MustCompile(`^([A-Za-z]+)(?:\[(\d+)\])?$`)

// set changes doc at a dotted path such as "nodes[1].mac"; a nil value
// deletes the key.
func set(t *testing.T, doc map[string]any, path string, val any) {
	t.Helper()
	parts := strings.Split(path, ".")
	var cur any = doc
	for i, p := range parts {
		m := pathElem.FindStringSubmatch(p)
		if m == nil {
			t.Fatalf("bad test path %q", path)
		}
		obj, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("path %q: %q is not a mapping", path, p)
		}
		last := i == len(parts)-1
		if m[2] == "" {
			if last {
				if val == nil {
					delete(obj, m[1])
				} else {
					obj[m[1]] = val
				}
				return
			}
			if obj[m[1]] == nil {
				obj[m[1]] = map[string]any{}
			}
			cur = obj[m[1]]
			continue
		}
		idx, _ := strconv.Atoi(m[2])
		list, _ := obj[m[1]].([]any)
		for len(list) <= idx {
			list = append(list, map[string]any{})
		}
		obj[m[1]] = list
		if last {
			list[idx] = val
			return
		}
		cur = list[idx]
	}
}

func render(t *testing.T, doc map[string]any) []byte {
	t.Helper()
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type mut struct {
	path string
	val  any
}

func TestParseBad(t *testing.T) {
	cases := []struct {
		name     string
		muts     []mut
		yaml     string // used instead of muts when set
		wantPath string
		wantMsg  string // substring of that problem's message
	}{
		// document level
		{name: "yaml syntax", yaml: "cluster: [name", wantPath: "", wantMsg: "not valid YAML"},
		{name: "duplicate key", yaml: "cluster:\n  name: a\n  name: b\n", wantPath: "", wantMsg: `key "name" already set`},
		{name: "top level list", yaml: "- a\n- b\n", wantPath: "", wantMsg: "want a mapping"},
		{name: "install-config given to Parse", yaml: "apiVersion: v1\nmetadata: {name: x}\nplatform: {none: {}}\n", wantPath: "", wantMsg: "install-config.yaml"},
		{name: "unknown top-level", muts: []mut{{"netwrok", map[string]any{}}}, wantPath: "netwrok", wantMsg: "unknown field (did you mean network?)"},
		{name: "typo apiVIP", muts: []mut{{"network.apiVIP", "192.168.126.5"}}, wantPath: "network.apiVIP", wantMsg: "did you mean apiVIPs?"},
		{name: "wrong case", muts: []mut{{"network.ApiVIPs", []any{"192.168.126.7"}}}, wantPath: "network.ApiVIPs", wantMsg: "did you mean apiVIPs?"},
		{name: "unknown node field", muts: []mut{{"nodes[0].ip", "192.168.126.9"}}, wantPath: "nodes[0].ip", wantMsg: "did you mean ips?"},
		{name: "far-off field", muts: []mut{{"vrrp.xyzzyfoo", 1}}, wantPath: "vrrp.xyzzyfoo", wantMsg: "known fields: mode, transport, version"},
		{name: "section not mapping", muts: []mut{{"network", "192.168.126.0/24"}}, wantPath: "network", wantMsg: "want a mapping"},
		{name: "list where scalar", muts: []mut{{"cluster.name", []any{"a"}}}, wantPath: "cluster.name", wantMsg: "want a single value, got a list"},
		{name: "scalar where list", muts: []mut{{"network.apiVIPs", "192.168.126.5"}}, wantPath: "network.apiVIPs", wantMsg: "want a list"},
		{name: "nodes not list", muts: []mut{{"nodes", map[string]any{"name": "x"}}}, wantPath: "nodes", wantMsg: "want a list"},
		{name: "version not number", muts: []mut{{"vrrp.version", "three"}}, wantPath: "vrrp.version", wantMsg: `want a whole number, got the text "three"`},
		{name: "version fraction", muts: []mut{{"vrrp.version", 2.5}}, wantPath: "vrrp.version", wantMsg: "want a whole number, got 2.5"},
		{name: "control character", yaml: "cluster: {name: a, baseDomain: b.c}\nnetwork: {machineCIDR: 10.0.0.0/24, apiVIPs: [10.0.0.5]}\ndhcp: {leaseFile: \"/a\\u0085b\"}\n",
			wantPath: "dhcp.leaseFile", wantMsg: "holds the control character U+0085; remove it"},
		{name: "DEL", yaml: "cluster: {name: a, baseDomain: b.c}\nnetwork: {machineCIDR: 10.0.0.0/24, apiVIPs: [10.0.0.5]}\nvrrp: {version: 2, authPass: \"a\\x7f\"}\n",
			wantPath: "vrrp.authPass", wantMsg: "holds the control character U+007F; remove it"},
		{name: "preempt not bool", muts: []mut{{"vrrp.preempt", "maybe"}}, wantPath: "vrrp.preempt", wantMsg: "want true or false"},

		// cluster
		{name: "name missing", muts: []mut{{"cluster.name", nil}}, wantPath: "cluster.name", wantMsg: "required"},
		{name: "name uppercase", muts: []mut{{"cluster.name", "OCP4"}}, wantPath: "cluster.name", wantMsg: `"OCP4" is not a DNS label`},
		{name: "name uppercase hint", muts: []mut{{"cluster.name", "OCP4"}}, wantPath: "cluster.name", wantMsg: "did you mean ocp4?"},
		{name: "name with dot", muts: []mut{{"cluster.name", "ocp4.lab"}}, wantPath: "cluster.name", wantMsg: "not a DNS label"},
		{name: "name too long", muts: []mut{{"cluster.name", strings.Repeat("a", 64)}}, wantPath: "cluster.name", wantMsg: "not a DNS label"},
		{name: "name trailing dash", muts: []mut{{"cluster.name", "ocp-"}}, wantPath: "cluster.name", wantMsg: "not a DNS label"},
		{name: "baseDomain missing", muts: []mut{{"cluster.baseDomain", nil}}, wantPath: "cluster.baseDomain", wantMsg: "required"},
		{name: "baseDomain underscore", muts: []mut{{"cluster.baseDomain", "ex_ample.com"}}, wantPath: "cluster.baseDomain", wantMsg: "not a DNS name"},
		{name: "baseDomain trailing dot", muts: []mut{{"cluster.baseDomain", "example.com."}}, wantPath: "cluster.baseDomain", wantMsg: "ends with a dot; write example.com"},
		{name: "domain too long", muts: []mut{{"cluster.baseDomain", strings.Repeat(strings.Repeat("a", 61)+".", 4) + "com"}}, wantPath: "cluster.baseDomain", wantMsg: "longer than 253"},

		// machine networks
		{name: "no machine network", muts: []mut{{"network.machineCIDRs", nil}}, wantPath: "network.machineCIDRs", wantMsg: "required"},
		{name: "both cidr forms", muts: []mut{{"network.machineCIDR", "10.0.0.0/24"}}, wantPath: "network.machineCIDRs", wantMsg: "not both"},
		{name: "cidr garbage", muts: []mut{{"network.machineCIDRs", nil}, {"network.machineCIDR", "192.168.126/24"}}, wantPath: "network.machineCIDR", wantMsg: `"192.168.126/24" is not a CIDR`},
		{name: "cidr no length", muts: []mut{{"network.machineCIDRs[0]", "192.168.126.0"}}, wantPath: "network.machineCIDRs[0]", wantMsg: "has no prefix length (want a CIDR like 192.168.126.0/24)"},
		{name: "cidr host bits", muts: []mut{{"network.machineCIDRs[0]", "192.168.126.10/24"}}, wantPath: "network.machineCIDRs[0]", wantMsg: "did you mean 192.168.126.0/24?"},
		{name: "cidr overlap", muts: []mut{{"network.machineCIDRs[1]", "192.168.0.0/16"}}, wantPath: "network.machineCIDRs[1]", wantMsg: "overlaps network.machineCIDRs[0] (192.168.126.0/24)"},
		{name: "cidr everything", muts: []mut{{"network.machineCIDRs[1]", "::/0"}}, wantPath: "network.machineCIDRs[1]", wantMsg: "covers every address"},
		{name: "cidr loopback", muts: []mut{{"network.machineCIDRs[1]", "127.0.0.0/8"}}, wantPath: "network.machineCIDRs[1]", wantMsg: "loopback"},
		{name: "cidr empty", muts: []mut{{"network.machineCIDRs[1]", ""}}, wantPath: "network.machineCIDRs[1]", wantMsg: "is empty"},

		// interface, gateway
		{name: "interface too long", muts: []mut{{"network.interface", "enp0s31f6-very-long"}}, wantPath: "network.interface", wantMsg: "longer than 15 bytes"},
		{name: "interface slash", muts: []mut{{"network.interface", "eth/0"}}, wantPath: "network.interface", wantMsg: "not an interface name"},
		{name: "gateway garbage", muts: []mut{{"network.gateway", "router"}}, wantPath: "network.gateway", wantMsg: `"router" is not an IP address`},
		{name: "gateway outside", muts: []mut{{"network.gateway", "10.0.0.1"}}, wantPath: "network.gateway", wantMsg: "not inside a machine network (192.168.126.0/24, fd00:126::/64)"},
		{name: "gateway is VIP", muts: []mut{{"network.gateway", "192.168.126.5"}}, wantPath: "network.gateway", wantMsg: "also network.apiVIPs[0]"},

		// VIPs
		{name: "api VIP bad octet", muts: []mut{{"network.apiVIPs[0]", "10.0.0.300"}}, wantPath: "network.apiVIPs[0]", wantMsg: `"10.0.0.300" is not an IP address`},
		{name: "api VIPs missing", muts: []mut{{"network.apiVIPs", nil}}, wantPath: "network.apiVIPs", wantMsg: "required"},
		{name: "api VIPs empty", muts: []mut{{"network.apiVIPs", []any{}}}, wantPath: "network.apiVIPs", wantMsg: "required"},
		{name: "api VIP with prefix", muts: []mut{{"network.apiVIPs[0]", "192.168.126.5/24"}}, wantPath: "network.apiVIPs[0]", wantMsg: "without the /prefix"},
		{name: "api VIP two v4", muts: []mut{{"network.apiVIPs[1]", "192.168.126.7"}}, wantPath: "network.apiVIPs[1]", wantMsg: "a second IPv4 VIP (network.apiVIPs[0] is IPv4 too)"},
		{name: "api VIP outside", muts: []mut{{"network.apiVIPs[0]", "192.168.127.5"}}, wantPath: "network.apiVIPs[0]", wantMsg: "not inside a machine network"},
		{name: "api VIP network address", muts: []mut{{"network.apiVIPs[0]", "192.168.126.0"}}, wantPath: "network.apiVIPs[0]", wantMsg: "the network address of 192.168.126.0/24"},
		{name: "api VIP broadcast", muts: []mut{{"network.apiVIPs[0]", "192.168.126.255"}}, wantPath: "network.apiVIPs[0]", wantMsg: "the broadcast address of 192.168.126.0/24"},
		{name: "api VIP v6 anycast", muts: []mut{{"network.apiVIPs[1]", "fd00:126::"}}, wantPath: "network.apiVIPs[1]", wantMsg: "subnet-router anycast"},
		{name: "api VIP is node", muts: []mut{{"network.apiVIPs[0]", "192.168.126.10"}}, wantPath: "network.apiVIPs[0]", wantMsg: "the address of node master-0 (nodes[1].ips[0])"},
		{name: "api VIP zone", muts: []mut{{"network.apiVIPs[1]", "fd00:126::5%eth0"}}, wantPath: "network.apiVIPs[1]", wantMsg: "has a zone"},
		{name: "api VIP mapped", muts: []mut{{"network.apiVIPs[0]", "::ffff:192.168.126.5"}}, wantPath: "network.apiVIPs[0]", wantMsg: "write it as 192.168.126.5"},
		{name: "ingress VIP same as api", muts: []mut{{"network.ingressVIPs[0]", "192.168.126.5"}}, wantPath: "network.ingressVIPs[0]", wantMsg: "used twice (also network.apiVIPs[0])"},
		{name: "ingress VIP empty string", muts: []mut{{"network.ingressVIPs[0]", ""}}, wantPath: "network.ingressVIPs[0]", wantMsg: "is empty"},
		{name: "ingress VIP multicast", muts: []mut{{"network.ingressVIPs[0]", "224.0.0.18"}}, wantPath: "network.ingressVIPs[0]", wantMsg: "not a host address"},

		// upstream DNS
		{name: "upstream garbage", muts: []mut{{"network.upstreamDNS[0]", "dns.example.com"}}, wantPath: "network.upstreamDNS[0]", wantMsg: "not an IP address or IP:port"},
		{name: "upstream port 0", muts: []mut{{"network.upstreamDNS[0]", "192.168.126.1:0"}}, wantPath: "network.upstreamDNS[0]", wantMsg: "port 0"},
		{name: "upstream bad port", muts: []mut{{"network.upstreamDNS[0]", "192.168.126.1:99999"}}, wantPath: "network.upstreamDNS[0]", wantMsg: "not an IP address or IP:port"},
		{name: "upstream v6 unbracketed port", muts: []mut{{"network.upstreamDNS[0]", "[2001:db8::1]53"}}, wantPath: "network.upstreamDNS[0]", wantMsg: "not an IP address or IP:port"},
		{name: "upstream duplicate", muts: []mut{{"network.upstreamDNS[1]", "192.168.126.1:53"}}, wantPath: "network.upstreamDNS[1]", wantMsg: "used twice (also network.upstreamDNS[0])"},

		// nodes
		{name: "node name missing", muts: []mut{{"nodes[2].name", nil}}, wantPath: "nodes[2].name", wantMsg: "required"},
		{name: "node name bad", muts: []mut{{"nodes[2].name", "Worker_0"}}, wantPath: "nodes[2].name", wantMsg: `"Worker_0" is not a DNS label`},
		{name: "node name twice", muts: []mut{{"nodes[2].name", "master-0"}}, wantPath: "nodes[2].name", wantMsg: `"master-0" is used twice (also nodes[1])`},
		{name: "node role missing", muts: []mut{{"nodes[1].role", nil}}, wantPath: "nodes[1].role", wantMsg: "required"},
		{name: "node role bad", muts: []mut{{"nodes[1].role", "control-plane"}}, wantPath: "nodes[1].role", wantMsg: `"control-plane" is not a role (want bootstrap, master or worker)`},
		{name: "two bootstraps", muts: []mut{{"nodes[2].role", "bootstrap"}}, wantPath: "nodes[2].role", wantMsg: "a second bootstrap node (nodes[0] is one)"},
		{name: "mac short", muts: []mut{{"nodes[2].mac", "52:54:00:7e:00"}}, wantPath: "nodes[2].mac", wantMsg: `"52:54:00:7e:00" is not a MAC address (want 6 bytes like 52:54:00:7e:00:10)`},
		{name: "mac eui64", muts: []mut{{"nodes[2].mac", "52:54:00:7e:00:20:00:01"}}, wantPath: "nodes[2].mac", wantMsg: "not a MAC address"},
		{name: "mac multicast", muts: []mut{{"nodes[2].mac", "01:00:5e:00:00:01"}}, wantPath: "nodes[2].mac", wantMsg: "multicast MAC"},
		{name: "mac zero", muts: []mut{{"nodes[2].mac", "00:00:00:00:00:00"}}, wantPath: "nodes[2].mac", wantMsg: "all-zero"},
		{name: "mac twice", muts: []mut{{"nodes[2].mac", "52-54-00-7E-00-10"}}, wantPath: "nodes[2].mac", wantMsg: "52:54:00:7e:00:10 is used twice (also nodes[1].mac)"},
		{name: "node ip bad", muts: []mut{{"nodes[2].ips[0]", "192.168.126"}}, wantPath: "nodes[2].ips[0]", wantMsg: "not an IP address"},
		{name: "node ip outside", muts: []mut{{"nodes[2].ips[0]", "10.1.1.1"}}, wantPath: "nodes[2].ips[0]", wantMsg: "not inside a machine network"},
		{name: "node ip twice", muts: []mut{{"nodes[2].ips[0]", "192.168.126.10"}}, wantPath: "nodes[2].ips[0]", wantMsg: "used twice (also nodes[1].ips[0])"},
		{name: "node ip broadcast", muts: []mut{{"nodes[2].ips[0]", "192.168.126.255"}}, wantPath: "nodes[2].ips[0]", wantMsg: "broadcast"},

		// vrrp
		{name: "mode bad", muts: []mut{{"vrrp.mode", "keepalived"}}, wantPath: "vrrp.mode", wantMsg: `"keepalived" is not a mode (want native or keepalived-openshift)`},
		{name: "version bad", muts: []mut{{"vrrp.version", 4}}, wantPath: "vrrp.version", wantMsg: "4 is not a VRRP version"},
		{name: "compat with v3", muts: []mut{{"vrrp.mode", "keepalived-openshift"}, {"vrrp.version", 3}}, wantPath: "vrrp.version", wantMsg: "speaks VRRPv2; remove version or set it to 2"},
		{name: "compat advert", muts: []mut{{"vrrp.mode", "keepalived-openshift"}, {"vrrp.advertInterval", "2s"}}, wantPath: "vrrp.advertInterval", wantMsg: "advertises every 1s"},
		{name: "compat authPass", muts: []mut{{"vrrp.mode", "keepalived-openshift"}, {"vrrp.authPass", "secret"}}, wantPath: "vrrp.authPass", wantMsg: "derives the password"},
		{name: "compat explicit VRID", muts: []mut{{"vrrp.mode", "keepalived-openshift"}, {"vrrp.apiVRID", 7}}, wantPath: "vrrp.apiVRID", wantMsg: "derived from the cluster name (222)"},
		{name: "advert not duration", muts: []mut{{"vrrp.advertInterval", "fast"}}, wantPath: "vrrp.advertInterval", wantMsg: `"fast" is not a duration`},
		{name: "advert bare number", muts: []mut{{"vrrp.advertInterval", 1}}, wantPath: "vrrp.advertInterval", wantMsg: "did you mean 1s?"},
		{name: "advert v3 step", muts: []mut{{"vrrp.advertInterval", "15ms"}}, wantPath: "vrrp.advertInterval", wantMsg: "does not fit VRRPv3"},
		{name: "advert v3 too long", muts: []mut{{"vrrp.advertInterval", "41s"}}, wantPath: "vrrp.advertInterval", wantMsg: "does not fit VRRPv3"},
		{name: "advert v2 fraction", muts: []mut{{"vrrp.version", 2}, {"vrrp.advertInterval", "1500ms"}}, wantPath: "vrrp.advertInterval", wantMsg: "1.5s does not fit VRRPv2"},
		{name: "advert v2 too long", muts: []mut{{"vrrp.version", 2}, {"vrrp.advertInterval", "256s"}}, wantPath: "vrrp.advertInterval", wantMsg: "does not fit VRRPv2"},
		{name: "advert negative", muts: []mut{{"vrrp.advertInterval", "-1s"}}, wantPath: "vrrp.advertInterval", wantMsg: "does not fit"},
		{name: "preemptDelay bad", muts: []mut{{"vrrp.preemptDelay", "soon"}}, wantPath: "vrrp.preemptDelay", wantMsg: "not a duration"},
		{name: "preemptDelay negative", muts: []mut{{"vrrp.preemptDelay", "-5s"}}, wantPath: "vrrp.preemptDelay", wantMsg: "out of range"},
		{name: "preemptDelay huge", muts: []mut{{"vrrp.preemptDelay", "2h"}}, wantPath: "vrrp.preemptDelay", wantMsg: "out of range"},
		{name: "apiVRID range", muts: []mut{{"vrrp.apiVRID", 256}}, wantPath: "vrrp.apiVRID", wantMsg: "256 is out of range (want 1..255"},
		{name: "ingressVRID negative", muts: []mut{{"vrrp.ingressVRID", -1}}, wantPath: "vrrp.ingressVRID", wantMsg: "out of range"},
		{name: "VRIDs equal", muts: []mut{{"vrrp.apiVRID", 10}, {"vrrp.ingressVRID", 10}}, wantPath: "vrrp.ingressVRID", wantMsg: "10 is also vrrp.apiVRID"},
		{name: "VRID huge", muts: []mut{{"vrrp.apiVRID", 1e12}}, wantPath: "vrrp.apiVRID", wantMsg: "1000000000000 is out of range"},
		{name: "VRID enormous", muts: []mut{{"vrrp.apiVRID", 1e300}}, wantPath: "vrrp.apiVRID", wantMsg: "want a whole number"},
		{name: "authPass v3", muts: []mut{{"vrrp.authPass", "secret"}}, wantPath: "vrrp.authPass", wantMsg: "VRRPv3 has no authentication"},
		{name: "authPass long", muts: []mut{{"vrrp.version", 2}, {"vrrp.authPass", "much-too-long"}}, wantPath: "vrrp.authPass", wantMsg: "is 13 bytes; VRRPv2 simple authentication carries at most 8"},
		{name: "peer bad", muts: []mut{{"vrrp.unicastPeers", []any{"192.168.126.11", "node-2"}}}, wantPath: "vrrp.unicastPeers[1]", wantMsg: `"node-2" is not an IP address`},
		{name: "peer twice", muts: []mut{{"vrrp.unicastPeers", []any{"192.168.126.11", "192.168.126.11"}}}, wantPath: "vrrp.unicastPeers[1]", wantMsg: "used twice (also vrrp.unicastPeers[0])"},
		{name: "peer is VIP", muts: []mut{{"vrrp.unicastPeers", []any{"192.168.126.6"}}}, wantPath: "vrrp.unicastPeers[0]", wantMsg: "is network.ingressVIPs[0]"},
		{name: "priority 255", muts: []mut{{"vrrp.priority", 255}}, wantPath: "vrrp.priority", wantMsg: "255 is out of range (want 1..254"},
		{name: "priority negative", muts: []mut{{"vrrp.priority", -3}}, wantPath: "vrrp.priority", wantMsg: "out of range"},

		// dhcp
		{name: "dhcp unknown field", muts: []mut{{"dhcp.leasetime", "1h"}}, wantPath: "dhcp.leasetime", wantMsg: "did you mean leaseTime?"},
		{name: "dhcp lease time not duration", muts: []mut{{"dhcp.leaseTime", "3600"}}, wantPath: "dhcp.leaseTime", wantMsg: "did you mean 3600s?"},
		{name: "dhcp lease time too short", muts: []mut{{"dhcp.leaseTime", "10s"}}, wantPath: "dhcp.leaseTime", wantMsg: "want 1m to 136y"},
		{name: "dhcp lease file relative", muts: []mut{{"dhcp.leaseFile", "leases.json"}}, wantPath: "dhcp.leaseFile", wantMsg: "not an absolute path"},
		{name: "dhcp pool start bad", muts: []mut{{"dhcp.pool", map[string]any{"start": "192.168.126.300", "end": "192.168.126.199"}}}, wantPath: "dhcp.pool.start", wantMsg: "not an IP address"},
		{name: "dhcp pool reversed", muts: []mut{{"dhcp.pool", map[string]any{"start": "192.168.126.199", "end": "192.168.126.100"}}}, wantPath: "dhcp.pool", wantMsg: "swap them"},
		{name: "dhcp pool off network", muts: []mut{{"dhcp.pool", map[string]any{"start": "10.0.0.100", "end": "10.0.0.199"}}}, wantPath: "dhcp.pool.start", wantMsg: "not inside a machine network"},
		{name: "dhcp pool v6", muts: []mut{{"dhcp.pool", map[string]any{"start": "fd00::100", "end": "fd00::199"}}}, wantPath: "dhcp.pool", wantMsg: "IPv4 only"},
		{name: "dhcp pool broadcast", muts: []mut{{"dhcp.pool", map[string]any{"start": "192.168.126.200", "end": "192.168.126.255"}}}, wantPath: "dhcp.pool.end", wantMsg: "pick a host address"},
		{name: "dhcp dns v6", muts: []mut{{"dhcp.dns", []any{"fd00::53"}}}, wantPath: "dhcp.dns[0]", wantMsg: "IPv4 addresses only"},
		{name: "dhcp ntp bad", muts: []mut{{"dhcp.ntp", []any{"ntp.example.com"}}}, wantPath: "dhcp.ntp[0]", wantMsg: "not an IP address"},
		{name: "dhcp search bad", muts: []mut{{"dhcp.searchDomains", []any{"not a domain"}}}, wantPath: "dhcp.searchDomains[0]", wantMsg: "not a DNS name"},
		{name: "dhcp pool not mapping", muts: []mut{{"dhcp.pool", "192.168.126.100-192.168.126.199"}}, wantPath: "dhcp.pool", wantMsg: "want a mapping"},

		// lb, dns
		{name: "lb balance unknown", muts: []mut{{"lb.balance", "random"}}, wantPath: "lb.balance", wantMsg: "want roundrobin or leastconn"},
		{name: "lb redirect not bool", muts: []mut{{"lb.redirect", "yes please"}}, wantPath: "lb.redirect", wantMsg: "want true or false"},
		{name: "lb unknown field", muts: []mut{{"lb.algorithm", "leastconn"}}, wantPath: "lb.algorithm", wantMsg: "unknown field"},
		{name: "dns mdns not bool", muts: []mut{{"dns.mdns", "on"}}, wantPath: "dns.mdns", wantMsg: "want true or false"},
		{name: "dns unknown field", muts: []mut{{"dns.listen", ":53"}}, wantPath: "dns.listen", wantMsg: "unknown field"},
		{name: "dns allowFrom not a CIDR", muts: []mut{{"dns.allowFrom", []any{"10.128.0.0/14", "pods"}}}, wantPath: "dns.allowFrom[1]", wantMsg: `"pods" is not a CIDR`},
		{name: "dns allowFrom no length", muts: []mut{{"dns.allowFrom", []any{"10.0.0.7"}}}, wantPath: "dns.allowFrom[0]", wantMsg: "want 10.0.0.7/32 for this one address"},
		{name: "dns allowFrom host bits", muts: []mut{{"dns.allowFrom", []any{"10.128.0.1/14"}}}, wantPath: "dns.allowFrom[0]", wantMsg: "did you mean 10.128.0.0/14?"},
		{name: "dns allowFrom everyone", muts: []mut{{"dns.allowFrom", []any{"::/0"}}}, wantPath: "dns.allowFrom[0]", wantMsg: "open resolver"},
		{name: "dns allowFrom mapped", muts: []mut{{"dns.allowFrom", []any{"::ffff:10.0.0.0/104"}}}, wantPath: "dns.allowFrom[0]", wantMsg: "write it as IPv4"},
		{name: "dns allowFrom empty", muts: []mut{{"dns.allowFrom", []any{""}}}, wantPath: "dns.allowFrom[0]", wantMsg: "is empty"},
		// network.clusterNetwork: the pods' networks, apart from the nodes'
		{name: "clusterNetwork overlaps machine network", muts: []mut{{"network.clusterNetwork", []any{"192.168.0.0/16"}}}, wantPath: "network.clusterNetwork[0]", wantMsg: "holds network.apiVIPs[0] (192.168.126.5)"},
		{name: "clusterNetwork inside machine network, no VIP", muts: []mut{{"network.clusterNetwork", []any{"192.168.126.128/25"}}}, wantPath: "network.clusterNetwork[0]", wantMsg: "overlaps the machine network 192.168.126.0/24"},
		{name: "clusterNetwork default overlaps", muts: []mut{{"network.machineCIDRs", []any{"10.128.0.0/16", "fd00:126::/64"}}, {"network.apiVIPs", []any{"10.128.0.5"}}, {"network.ingressVIPs", nil}, {"network.gateway", nil}, {"nodes", nil}, {"network.upstreamDNS", nil}}, wantPath: "network.clusterNetwork", wantMsg: "OpenShift's default pod network 10.128.0.0/14 (no network.clusterNetwork given) holds network.apiVIPs[0] (10.128.0.5); pod networks and VIPs must be apart; set network.clusterNetwork"},
		{name: "clusterNetwork twice", muts: []mut{{"network.clusterNetwork", []any{"10.128.0.0/14", "10.130.0.0/16"}}}, wantPath: "network.clusterNetwork[1]", wantMsg: "overlaps network.clusterNetwork[0] (10.128.0.0/14)"},
		{name: "clusterNetwork not a CIDR", muts: []mut{{"network.clusterNetwork", []any{"pods"}}}, wantPath: "network.clusterNetwork[0]", wantMsg: `"pods" is not a CIDR`},
		{name: "clusterNetwork host bits", muts: []mut{{"network.clusterNetwork", []any{"10.128.0.1/14"}}}, wantPath: "network.clusterNetwork[0]", wantMsg: "did you mean 10.128.0.0/14?"},
		{name: "clusterNetwork everything", muts: []mut{{"network.clusterNetwork", []any{"0.0.0.0/0"}}}, wantPath: "network.clusterNetwork[0]", wantMsg: "covers every address"},
		{name: "clusterNetwork not a list", muts: []mut{{"network.clusterNetwork", "10.128.0.0/14"}}, wantPath: "network.clusterNetwork", wantMsg: "want a list"},
		{name: "too many upstreams", muts: []mut{{"network.upstreamDNS", []any{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.8", "10.0.0.9", "10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14", "10.0.0.15", "10.0.0.16"}}}, wantPath: "network.upstreamDNS", wantMsg: "lists 16 resolvers; the DNS forwards to at most 15"},
		// network.nodeIPHint: where OpenShift's nodeip-configuration looks
		{name: "nodeIPHint outside", muts: []mut{{"network.nodeIPHint", []any{"10.0.0.1"}}}, wantPath: "network.nodeIPHint[0]", wantMsg: "10.0.0.1 is in no machine network (192.168.126.0/24, fd00:126::/64)"},
		{name: "nodeIPHint a node's", muts: []mut{{"network.nodeIPHint", []any{"192.168.126.10"}}}, wantPath: "network.nodeIPHint[0]", wantMsg: "node master-0's own address, which OpenShift's nodeip-configuration skips; give an address no node has, e.g. the network's own 192.168.126.0"},
		{name: "nodeIPHint two of a family", muts: []mut{{"network.nodeIPHint", []any{"192.168.126.0", "192.168.126.1"}}}, wantPath: "network.nodeIPHint[1]", wantMsg: "a second IPv4 hint"},
		{name: "default nodeIPHint a node's", yaml: "cluster: {name: a, baseDomain: b.c}\nnetwork: {machineCIDR: 10.0.0.0/31, apiVIPs: [10.0.0.1]}\nnodes: [{name: m, role: master, ips: [10.0.0.0]}]\n",
			wantPath: "network.nodeIPHint", wantMsg: "the default hint 10.0.0.0 (the first address of 10.0.0.0/31; no network.nodeIPHint given) is node m's own address"},
		{name: "nodeIPHint not an address", muts: []mut{{"network.nodeIPHint", []any{"192.168.126.0/24"}}}, wantPath: "network.nodeIPHint[0]", wantMsg: "without the /prefix"},
		// vrrp.transport
		{name: "transport unknown", muts: []mut{{"vrrp.transport", "broadcast"}}, wantPath: "vrrp.transport", wantMsg: `"broadcast" is not a transport (want unicast, the default, or multicast)`},
		{name: "mode unicast", muts: []mut{{"vrrp.mode", "unicast"}}, wantPath: "vrrp.mode", wantMsg: "is a transport, not a mode; write vrrp.transport: unicast"},
		{name: "mode unknown", muts: []mut{{"vrrp.mode", "fast"}}, wantPath: "vrrp.mode", wantMsg: `"fast" is not a mode`},
		{name: "unicast peers on multicast", muts: []mut{{"vrrp.transport", "multicast"}, {"vrrp.unicastPeers", []any{"192.168.126.50"}}}, wantPath: "vrrp.unicastPeers[0]", wantMsg: "need vrrp.transport: unicast"},
		{name: "dns allowFrom not a list", muts: []mut{{"dns.allowFrom", "10.128.0.0/14"}}, wantPath: "dns.allowFrom", wantMsg: "want a list"},

		// admin
		{name: "listen no port", muts: []mut{{"admin.listen", "127.0.0.1"}}, wantPath: "admin.listen", wantMsg: "is not host:port"},
		{name: "listen bad port", muts: []mut{{"admin.listen", "127.0.0.1:http"}}, wantPath: "admin.listen", wantMsg: `has port "http"`},
		{name: "listen port range", muts: []mut{{"admin.listen", "127.0.0.1:70000"}}, wantPath: "admin.listen", wantMsg: "want a number 0..65535"},
		{name: "listen bad host", muts: []mut{{"admin.listen", "bad_host:9447"}}, wantPath: "admin.listen", wantMsg: "neither an IP address nor a host name"},
		{name: "listen v6 unbracketed", muts: []mut{{"admin.listen", "::1:9447"}}, wantPath: "admin.listen", wantMsg: "is not host:port"},
		{name: "metrics port range", muts: []mut{{"admin.metricsPort", 70000}}, wantPath: "admin.metricsPort", wantMsg: "want 1..65535"},
		{name: "metrics port negative", muts: []mut{{"admin.metricsPort", -1}}, wantPath: "admin.metricsPort", wantMsg: "is not a port"},
		{name: "metrics port is the admin port", muts: []mut{{"admin.listen", ":9500"}, {"admin.metricsPort", 9500}}, wantPath: "admin.metricsPort", wantMsg: "admin.listen's port too"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.yaml)
			if tc.yaml == "" {
				doc := baseDoc()
				for _, m := range tc.muts {
					set(t, doc, m.path, m.val)
				}
				data = render(t, doc)
			}
			cfg, err := Parse(data)
			if err == nil {
				t.Fatalf("Parse succeeded (%+v); want a problem at %q\n%s", cfg, tc.wantPath, data)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %T is not a *ValidationError: %v", err, err)
			}
			for _, p := range ve.Problems {
				if p.Path == tc.wantPath && strings.Contains(p.Message, tc.wantMsg) {
					return
				}
			}
			t.Errorf("no problem at %q containing %q; got:\n%v\ndocument:\n%s", tc.wantPath, tc.wantMsg, err, data)
		})
	}
}

// TestParseBadIsolated checks that each single mistake yields exactly one
// problem: checks below a bad value stay quiet.
func TestParseBadIsolated(t *testing.T) {
	for _, m := range []mut{
		{"network.apiVIPs[0]", "10.0.0.300"},
		{"network.apiVIPs", "192.168.126.5"},
		{"network.machineCIDRs", "192.168.126.0/24"},
		{"nodes[1].mac", "52:54:00:7e:00"},
		{"nodes[1].name", "worker-0"},
		{"vrrp.version", "three"},
		{"cluster", "ocp4"},
	} {
		doc := baseDoc()
		set(t, doc, m.path, m.val)
		_, err := Parse(render(t, doc))
		var ve *ValidationError
		if !errors.As(err, &ve) || len(ve.Problems) != 1 {
			t.Errorf("%s=%v: want exactly one problem, got:\n%v", m.path, m.val, err)
		}
	}
}

func TestParseGood(t *testing.T) {
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	cases := []struct {
		name  string
		muts  []mut
		check func(t *testing.T, c *Config)
	}{
		{name: "base dual-stack", check: func(t *testing.T, c *Config) {
			want := &Config{
				Cluster: Cluster{Name: "ocp4", BaseDomain: "example.com"},
				Network: Network{
					MachineCIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.126.0/24"), netip.MustParsePrefix("fd00:126::/64")},
					Gateway:      netip.MustParseAddr("192.168.126.1"),
					APIVIPs:      []netip.Addr{netip.MustParseAddr("192.168.126.5"), netip.MustParseAddr("fd00:126::5")},
					IngressVIPs:  []netip.Addr{netip.MustParseAddr("192.168.126.6"), netip.MustParseAddr("fd00:126::6")},
					UpstreamDNS:  []netip.AddrPort{netip.MustParseAddrPort("192.168.126.1:53")},
					// OpenShift's default pod networks, both families, and
					// each machine network's first address as the hint.
					ClusterNetworks: []netip.Prefix{DefaultClusterNetworkV4, DefaultClusterNetworkV6},
					NodeIPHints:     []netip.Addr{netip.MustParseAddr("192.168.126.0"), netip.MustParseAddr("fd00:126::")},
				},
				Nodes: []Node{
					{Name: "bootstrap", Role: RoleBootstrap, MAC: mac("52:54:00:7e:00:09"), IPs: []netip.Addr{netip.MustParseAddr("192.168.126.9")}},
					{Name: "master-0", Role: RoleMaster, MAC: mac("52:54:00:7e:00:10"), IPs: []netip.Addr{netip.MustParseAddr("192.168.126.10"), netip.MustParseAddr("fd00:126::10")}},
					{Name: "worker-0", Role: RoleWorker, MAC: mac("52:54:00:7e:00:20"), IPs: []netip.Addr{netip.MustParseAddr("192.168.126.20")}},
				},
				VRRP:  VRRP{Enabled: true, IngressHealthURL: DefaultIngressHealthURL, Mode: VRRPModeNative, Transport: VRRPTransportUnicast, Version: 3, AdvertInterval: DefaultAdvertInterval, Preempt: true, APIVRID: 222, IngressVRID: 61},
				DHCP:  DHCP{LeaseTime: DefaultDHCPLeaseTime, LeaseFile: DefaultDHCPLeaseFile},
				LB:    LB{Enabled: true, Balance: LBRoundRobin, MCS: true, Redirect: true},
				DNS:   DNS{Enabled: true},
				Admin: Admin{Listen: DefaultAdminListen, MetricsPort: DefaultMetricsPort},
			}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("got  %+v\nwant %+v", c, want)
			}
		}},
		{name: "single machineCIDR", muts: []mut{{"network.machineCIDRs", nil}, {"network.machineCIDR", "192.168.126.0/24"}, {"network.apiVIPs", []any{"192.168.126.5"}}, {"network.ingressVIPs", nil}, {"nodes[1].ips", []any{"192.168.126.10"}}},
			check: func(t *testing.T, c *Config) {
				if len(c.Network.MachineCIDRs) != 1 || len(c.Network.IngressVIPs) != 0 {
					t.Errorf("network = %+v", c.Network)
				}
			}},
		{name: "no nodes, no gateway, no upstream", muts: []mut{{"nodes", nil}, {"network.gateway", nil}, {"network.upstreamDNS", nil}},
			check: func(t *testing.T, c *Config) {
				if len(c.Nodes) != 0 || c.Network.Gateway.IsValid() || c.Network.UpstreamDNS != nil {
					t.Errorf("got %+v", c)
				}
			}},
		{name: "null sections", muts: []mut{{"vrrp", map[string]any{}}, {"admin", map[string]any{}}},
			check: func(t *testing.T, c *Config) {
				if c.VRRP.Version != 3 || c.Admin.Listen != DefaultAdminListen {
					t.Errorf("defaults not applied: %+v", c)
				}
			}},
		{name: "node without mac and ips", muts: []mut{{"nodes[2]", map[string]any{"name": "worker-0", "role": "worker"}}},
			check: func(t *testing.T, c *Config) {
				if n, _ := c.NodeByName("worker-0"); n.MAC != nil || n.IPs != nil {
					t.Errorf("worker-0 = %+v", n)
				}
			}},
		{name: "mac forms normalised", muts: []mut{{"nodes[2].mac", "52-54-00-7E-00-20"}},
			check: func(t *testing.T, c *Config) {
				if n, _ := c.NodeByName("worker-0"); n.MAC.String() != "52:54:00:7e:00:20" {
					t.Errorf("mac = %s", n.MAC)
				}
			}},
		{name: "upstream forms", muts: []mut{{"network.upstreamDNS", []any{"192.168.126.1", "10.0.0.53:5353", "2001:db8::53", "[2001:db8::54]", "[2001:db8::55]:5300", "fe80::1%eth0"}}},
			check: func(t *testing.T, c *Config) {
				want := []netip.AddrPort{
					netip.MustParseAddrPort("192.168.126.1:53"), netip.MustParseAddrPort("10.0.0.53:5353"),
					netip.MustParseAddrPort("[2001:db8::53]:53"), netip.MustParseAddrPort("[2001:db8::54]:53"),
					netip.MustParseAddrPort("[2001:db8::55]:5300"), netip.MustParseAddrPort("[fe80::1%eth0]:53"),
				}
				if !reflect.DeepEqual(c.Network.UpstreamDNS, want) {
					t.Errorf("upstreamDNS = %v", c.Network.UpstreamDNS)
				}
			}},
		{name: "dns allowFrom", muts: []mut{{"dns.allowFrom", []any{"10.128.0.0/14", "fd01::/48", "10.0.0.7/32"}}},
			check: func(t *testing.T, c *Config) {
				want := []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14"), netip.MustParsePrefix("fd01::/48"), netip.MustParsePrefix("10.0.0.7/32")}
				if !reflect.DeepEqual(c.DNS.AllowFrom, want) {
					t.Errorf("dns.allowFrom = %v", c.DNS.AllowFrom)
				}
			}},
		{name: "compat mode", muts: []mut{{"vrrp.mode", "keepalived-openshift"}},
			check: func(t *testing.T, c *Config) {
				v := c.VRRP
				if v.Version != 2 || v.AdvertInterval != time.Second || v.APIVRID != 222 || v.IngressVRID != 61 || v.AuthPass != "" {
					t.Errorf("vrrp = %+v", v)
				}
				if got := c.AuthPassFor(VIPAPI); got != "ocp4_api" {
					t.Errorf("api pass = %q", got)
				}
				if got := c.AuthPassFor(VIPIngress); got != "ocp4_ing" {
					t.Errorf("ingress pass = %q", got)
				}
			}},
		{name: "compat explicit matching VRID and v2", muts: []mut{{"vrrp.mode", "keepalived-openshift"}, {"vrrp.version", 2}, {"vrrp.apiVRID", 222}, {"vrrp.advertInterval", "1s"}},
			check: func(t *testing.T, c *Config) {
				if c.VRRP.APIVRID != 222 {
					t.Errorf("vrrp = %+v", c.VRRP)
				}
			}},
		{name: "native v2 defaults to 1s", muts: []mut{{"vrrp.version", 2}, {"vrrp.authPass", "s3cret"}},
			check: func(t *testing.T, c *Config) {
				if c.VRRP.AdvertInterval != time.Second || c.AuthPassFor(VIPAPI) != "s3cret" || c.AuthPassFor(VIPIngress) != "s3cret" {
					t.Errorf("vrrp = %+v", c.VRRP)
				}
			}},
		{name: "v3 bounds", muts: []mut{{"vrrp.advertInterval", "40.95s"}},
			check: func(t *testing.T, c *Config) {
				if c.VRRP.AdvertInterval != 40950*time.Millisecond {
					t.Errorf("advert = %s", c.VRRP.AdvertInterval)
				}
			}},
		{name: "v2 bounds", muts: []mut{{"vrrp.version", 2}, {"vrrp.advertInterval", "255s"}},
			check: func(t *testing.T, c *Config) {
				if c.VRRP.AdvertInterval != 255*time.Second {
					t.Errorf("advert = %s", c.VRRP.AdvertInterval)
				}
			}},
		{name: "preempt off with delay", muts: []mut{{"vrrp.preempt", false}, {"vrrp.preemptDelay", "30s"}},
			check: func(t *testing.T, c *Config) {
				if c.VRRP.Preempt || c.VRRP.PreemptDelay != 30*time.Second {
					t.Errorf("vrrp = %+v", c.VRRP)
				}
			}},
		{name: "explicit VRIDs", muts: []mut{{"vrrp.apiVRID", 1}, {"vrrp.ingressVRID", 255}},
			check: func(t *testing.T, c *Config) {
				if c.VRRP.APIVRID != 1 || c.VRRP.IngressVRID != 255 {
					t.Errorf("vrrp = %+v", c.VRRP)
				}
			}},
		{name: "explicit api VRID equal to derived ingress bumps ingress", muts: []mut{{"vrrp.apiVRID", 61}},
			check: func(t *testing.T, c *Config) {
				if c.VRRP.APIVRID != 61 || c.VRRP.IngressVRID != 62 {
					t.Errorf("vrrp = %+v", c.VRRP)
				}
			}},
		{name: "explicit ingress VRID equal to derived api bumps api", muts: []mut{{"vrrp.ingressVRID", 222}},
			check: func(t *testing.T, c *Config) {
				if c.VRRP.APIVRID != 223 || c.VRRP.IngressVRID != 222 {
					t.Errorf("vrrp = %+v", c.VRRP)
				}
			}},
		{name: "priority and peers", muts: []mut{{"vrrp.priority", 100}, {"vrrp.unicastPeers", []any{"192.168.126.10", "fd00:126::10"}}},
			check: func(t *testing.T, c *Config) {
				if c.PriorityFor(RoleMaster, VIPAPI) != 100 || c.PriorityFor(RoleWorker, VIPAPI) != 0 || len(c.VRRP.UnicastPeers) != 2 {
					t.Errorf("vrrp = %+v", c.VRRP)
				}
			}},
		{name: "admin listen forms", muts: []mut{{"admin.listen", "[::1]:9447"}},
			check: func(t *testing.T, c *Config) {
				if c.Admin.Listen != "[::1]:9447" {
					t.Errorf("admin = %+v", c.Admin)
				}
			}},
		{name: "admin listen all", muts: []mut{{"admin.listen", ":0"}}, check: func(t *testing.T, c *Config) {}},
		{name: "metrics port default", muts: []mut{{"admin.listen", "127.0.0.1:9447"}},
			check: func(t *testing.T, c *Config) {
				if c.Admin.MetricsPort != DefaultMetricsPort {
					t.Errorf("admin.metricsPort = %d, want %d", c.Admin.MetricsPort, DefaultMetricsPort)
				}
			}},
		{name: "metrics port on loopback's admin port", muts: []mut{{"admin.listen", "127.0.0.1:9600"}, {"admin.metricsPort", 9600}},
			check: func(t *testing.T, c *Config) {
				if c.Admin.MetricsPort != 9600 {
					t.Errorf("admin = %+v", c.Admin)
				}
			}},
		{name: "admin listen hostname", muts: []mut{{"admin.listen", "localhost:9447"}}, check: func(t *testing.T, c *Config) {}},
		{name: "interface set", muts: []mut{{"network.interface", "br-ex"}},
			check: func(t *testing.T, c *Config) {
				if c.Network.Interface != "br-ex" {
					t.Errorf("interface = %q", c.Network.Interface)
				}
			}},
		{name: "slash-31 has no reserved addresses", muts: []mut{{"network.machineCIDRs", []any{"10.0.0.0/31"}}, {"network.apiVIPs", []any{"10.0.0.0"}}, {"network.ingressVIPs", []any{"10.0.0.1"}}, {"nodes", nil}, {"network.gateway", nil}},
			check: func(t *testing.T, c *Config) {}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := baseDoc()
			for _, m := range tc.muts {
				set(t, doc, m.path, m.val)
			}
			data := render(t, doc)
			c, err := Parse(data)
			if err != nil {
				t.Fatalf("Parse: %v\n%s", err, data)
			}
			tc.check(t, c)
		})
	}
}

// TestParseGolden pins the exact text a person sees for a few broken files.
func TestParseGolden(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{
			name: "design example errors",
			yaml: `
cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: 10.0.0.0/24
  apiVIPs: [10.0.0.300]
nodes:
  - {name: master-0, role: master, mac: "52:54:00:7e:00:10", ips: [10.0.0.10]}
  - {name: master-0, role: master, mac: "52:54:00:7e:00", ips: [10.0.0.11]}
`,
			want: `network.apiVIPs[0]: "10.0.0.300" is not an IP address
nodes[1].name: "master-0" is used twice (also nodes[0])
nodes[1].mac: "52:54:00:7e:00" is not a MAC address (want 6 bytes like 52:54:00:7e:00:10)`,
		},
		{
			name: "typos and missing",
			yaml: `
cluster: {name: OCP4}
network:
  machineCIDR: 10.0.0.0/24
  apiVIP: 10.0.0.5
vrrp: {version: 4, authPass: "hunter2hunter2"}
`,
			want: `cluster.name: "OCP4" is not a DNS label (want lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters) (did you mean ocp4?)
cluster.baseDomain: required: a DNS name like example.com
network.apiVIP: unknown field (did you mean apiVIPs?)
network.apiVIPs: required: the API virtual IP, one per address family, e.g. [192.168.126.5]
vrrp.version: 4 is not a VRRP version (want 2 or 3)
vrrp.authPass: VRRPv3 has no authentication; remove authPass or set vrrp.version: 2`,
		},
		{
			name: "empty document",
			yaml: "",
			want: `cluster.name: required: a DNS label like ocp4 (with baseDomain it makes the cluster domain)
cluster.baseDomain: required: a DNS name like example.com
network.machineCIDRs: required: the nodes' network, e.g. machineCIDR: 192.168.126.0/24 (or machineCIDRs: [...] when dual-stack)
network.apiVIPs: required: the API virtual IP, one per address family, e.g. [192.168.126.5]`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestTestdataAppliance(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "appliance.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster.Domain() != "ocp4.example.com" || len(c.Nodes) != 6 || c.VRRP.APIVRID != 222 || c.VRRP.IngressVRID != 61 ||
		c.Network.Gateway != netip.MustParseAddr("192.168.126.1") || c.Admin.Listen != "127.0.0.1:9447" || !c.VRRP.Preempt {
		t.Errorf("unexpected model: %+v", c)
	}
	n, ok := c.NodeByAddr(netip.MustParseAddr("192.168.126.11"))
	if !ok || n.Name != "master-1" {
		t.Errorf("NodeByAddr = %+v, %v", n, ok)
	}
	if _, ok := c.NodeByAddr(netip.MustParseAddr("192.168.126.99")); ok {
		t.Error("NodeByAddr found an unknown address")
	}
	if _, ok := c.NodeByName("nope"); ok {
		t.Error("NodeByName found an unknown node")
	}
	if p, ok := c.Network.PrefixFor(c.Network.APIVIPs[0]); !ok || p.Bits() != 24 {
		t.Errorf("PrefixFor = %v, %v", p, ok)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("cluster: {name: x}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad)
	var ve *ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad file: %v", err)
	}
	if _, err := Parse(make([]byte, maxConfigSize+1)); err == nil {
		t.Error("oversized document accepted")
	}
}

func TestDefaultPriority(t *testing.T) {
	for _, tc := range []struct {
		role Role
		kind VIPKind
		want uint8
	}{
		{RoleBootstrap, VIPAPI, 50}, {RoleMaster, VIPAPI, 40}, {RoleWorker, VIPAPI, 0},
		{RoleBootstrap, VIPIngress, 0}, {RoleMaster, VIPIngress, 20}, {RoleWorker, VIPIngress, 40},
		{"other", VIPAPI, 0}, {RoleMaster, "other", 0},
	} {
		if got := DefaultPriority(tc.role, tc.kind); got != tc.want {
			t.Errorf("DefaultPriority(%s, %s) = %d, want %d", tc.role, tc.kind, got, tc.want)
		}
	}
	c := &Config{}
	if c.PriorityFor(RoleBootstrap, VIPAPI) != 50 {
		t.Error("PriorityFor without override")
	}
}

func TestAuthPassForShortName(t *testing.T) {
	c := &Config{Cluster: Cluster{Name: "a"}, VRRP: VRRP{Mode: VRRPModeKeepalivedOpenShift}}
	if got := c.AuthPassFor(VIPAPI); got != "a_api_vi" {
		t.Errorf("got %q", got)
	}
	c.Cluster.Name = "ab"
	if got := c.AuthPassFor(VIPIngress); got != "ab_ingre" {
		t.Errorf("got %q", got)
	}
}

func TestVIPName(t *testing.T) {
	for _, tc := range []struct {
		kind VIPKind
		a    string
		want string
	}{{VIPAPI, "10.0.0.5", "api-v4"}, {VIPIngress, "fd00::6", "ingress-v6"}} {
		if got := VIPName(tc.kind, netip.MustParseAddr(tc.a)); got != tc.want {
			t.Errorf("VIPName(%s, %s) = %s", tc.kind, tc.a, got)
		}
	}
}

func ExampleParse() {
	_, err := Parse([]byte(`
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.300]}
`))
	var ve *ValidationError
	if errors.As(err, &ve) {
		for _, p := range ve.Problems {
			fmt.Println(p.Path, "=>", p.Message)
		}
	}
	// Output: network.apiVIPs[0] => "192.168.126.300" is not an IP address
}
