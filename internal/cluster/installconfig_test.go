package cluster

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestInstallConfigTestdata(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "install-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseInstallConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	want := &Config{
		Cluster: Cluster{Name: "ocp4", BaseDomain: "example.com"},
		Network: Network{
			MachineCIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.126.0/24")},
			APIVIPs:      []netip.Addr{netip.MustParseAddr("192.168.126.5")},
			IngressVIPs:  []netip.Addr{netip.MustParseAddr("192.168.126.6")},
			// networking.clusterNetwork as the installer defaults it.
			ClusterNetworks: []netip.Prefix{DefaultClusterNetworkV4},
			NodeIPHints:     []netip.Addr{netip.MustParseAddr("192.168.126.0")},
		},
		Nodes: []Node{
			{Name: "master-0", Role: RoleMaster, MAC: mac("52:54:00:7e:00:10"), IPs: []netip.Addr{netip.MustParseAddr("192.168.126.10")}},
			{Name: "master-1", Role: RoleMaster, MAC: mac("52:54:00:7e:00:11")},
			{Name: "master-2", Role: RoleMaster, MAC: mac("52:54:00:7e:00:12")},
			{Name: "worker-0", Role: RoleWorker, MAC: mac("52:54:00:7e:00:20")},
			{Name: "worker-1", Role: RoleWorker, MAC: mac("52:54:00:7e:00:21")},
		},
		VRRP:  VRRP{Enabled: true, IngressHealthURL: DefaultIngressHealthURL, Mode: VRRPModeNative, Transport: VRRPTransportUnicast, Version: 3, AdvertInterval: DefaultAdvertInterval, Preempt: true, APIVRID: 222, IngressVRID: 61},
		DHCP:  DHCP{LeaseTime: DefaultDHCPLeaseTime, LeaseFile: DefaultDHCPLeaseFile},
		LB:    LB{Enabled: true, Balance: LBRoundRobin, MCS: true, Redirect: true},
		DNS:   DNS{Enabled: true},
		Admin: Admin{Listen: DefaultAdminListen, MetricsPort: DefaultMetricsPort},
		// Where it came from: MCO deploys its own stack for this platform.
		Origin: &InstallConfigOrigin{Platform: "baremetal"},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}

	// Load tells the two formats apart by content.
	lc, err := Load(filepath.Join("testdata", "install-config.yaml"))
	if err != nil || !reflect.DeepEqual(lc, want) {
		t.Errorf("Load(install-config.yaml) = %+v, %v", lc, err)
	}
	if !isInstallConfig(data) {
		t.Error("testdata install-config not detected")
	}
	app, _ := os.ReadFile(filepath.Join("testdata", "appliance.yaml"))
	if isInstallConfig(app) {
		t.Error("appliance.yaml detected as install-config")
	}
}

const icHeader = `apiVersion: v1
baseDomain: example.com
metadata:
  name: lab
pullSecret: '{"auths":{}}'
sshKey: ssh-ed25519 AAAA user@host
compute:
- name: worker
  replicas: 0
`

func TestInstallConfigVariants(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		check func(t *testing.T, c *Config)
	}{
		{
			name: "vsphere singular VIPs and old machineCIDR",
			body: `networking:
  machineCIDR: 10.10.0.0/16
platform:
  vsphere:
    apiVIP: 10.10.0.5
    ingressVIP: 10.10.0.6
    vCenter: vcenter.example.com
    datacenter: dc1
`,
			check: func(t *testing.T, c *Config) {
				if c.Network.APIVIPs[0] != netip.MustParseAddr("10.10.0.5") || c.Network.IngressVIPs[0] != netip.MustParseAddr("10.10.0.6") ||
					c.Network.MachineCIDRs[0] != netip.MustParsePrefix("10.10.0.0/16") {
					t.Errorf("network = %+v", c.Network)
				}
			},
		},
		{
			name: "ovirt dual-stack lists",
			body: `networking:
  machineNetwork:
  - cidr: 192.168.10.0/24
  - cidr: fd00:10::/64
platform:
  ovirt:
    ovirt_cluster_id: 0b1e9cb2-0000-0000-0000-000000000000
    api_vips: [192.168.10.5, "fd00:10::5"]
    ingress_vips: [192.168.10.6, "fd00:10::6"]
`,
			check: func(t *testing.T, c *Config) {
				if len(c.Network.APIVIPs) != 2 || len(c.Network.MachineCIDRs) != 2 {
					t.Errorf("network = %+v", c.Network)
				}
			},
		},
		{
			name: "cluster network",
			body: `networking:
  machineNetwork:
  - cidr: 192.168.10.0/24
  clusterNetwork:
  - cidr: 10.132.0.0/14
    hostPrefix: 23
platform:
  baremetal:
    apiVIPs: [192.168.10.5]
    ingressVIPs: [192.168.10.6]
`,
			check: func(t *testing.T, c *Config) {
				if want := []netip.Prefix{netip.MustParsePrefix("10.132.0.0/14")}; !slices.Equal(c.Network.ClusterNetworks, want) {
					t.Errorf("clusterNetworks = %v, want %v", c.Network.ClusterNetworks, want)
				}
			},
		},
		{
			name: "default machine network",
			body: `platform:
  nutanix:
    apiVIPs: [10.0.0.5]
    ingressVIPs: [10.0.0.6]
`,
			check: func(t *testing.T, c *Config) {
				if c.Network.MachineCIDRs[0] != netip.MustParsePrefix(icDefaultMachineNetwork) {
					t.Errorf("network = %+v", c.Network)
				}
			},
		},
		{
			name: "roleless hosts fill the control plane",
			body: `controlPlane: {name: master, replicas: 1}
networking:
  machineNetwork: [{cidr: 10.1.0.0/24}]
platform:
  baremetal:
    apiVIPs: [10.1.0.5]
    hosts:
    - {name: h0, bootMACAddress: "52:54:00:00:00:01"}
    - {name: h1, bootMACAddress: "52:54:00:00:00:02"}
    - {name: h2, role: worker, bootMACAddress: "52:54:00:00:00:03"}
`,
			check: func(t *testing.T, c *Config) {
				got := []Role{c.Nodes[0].Role, c.Nodes[1].Role, c.Nodes[2].Role}
				if !reflect.DeepEqual(got, []Role{RoleMaster, RoleWorker, RoleWorker}) {
					t.Errorf("roles = %v", got)
				}
			},
		},
		{
			name: "nmstate addresses outside the machine network are skipped",
			body: `networking:
  machineNetwork: [{cidr: 10.1.0.0/24}]
platform:
  baremetal:
    apiVIPs: [10.1.0.5]
    hosts:
    - name: h0
      role: master
      networkConfig:
        interfaces:
        - name: eth0
          ipv4: {enabled: true, address: [{ip: 10.1.0.10, prefix-length: 24}, {ip: 172.16.0.10, prefix-length: 24}]}
          ipv6: {enabled: true, address: [{ip: "fe80::1", prefix-length: 64}]}
        - name: eth1
          ipv4: "nonsense"
`,
			check: func(t *testing.T, c *Config) {
				if !reflect.DeepEqual(c.Nodes[0].IPs, []netip.Addr{netip.MustParseAddr("10.1.0.10")}) {
					t.Errorf("ips = %v", c.Nodes[0].IPs)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseInstallConfig([]byte(icHeader + tc.body))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

// An install-config for an on-prem platform with VIPs makes the Machine
// Config Operator put its own keepalived, haproxy and CoreDNS on the nodes;
// with a user-managed load balancer, CoreDNS alone. appliance.yaml has none.
func TestInstallConfigOnPremStack(t *testing.T) {
	for _, c := range []struct {
		body string
		want string
	}{
		{"platform:\n  baremetal: {apiVIPs: [10.0.0.5]}\n", "keepalived haproxy coredns"},
		{"platform:\n  vsphere: {apiVIPs: [10.0.0.5], loadBalancer: {type: OpenShiftManagedDefault}}\n", "keepalived haproxy coredns"},
		{"platform:\n  openstack: {apiVIPs: [10.0.0.5], ingressVIPs: [10.0.0.7], loadBalancer: {type: UserManaged}}\n", "coredns"},
		{"platform:\n  ovirt: {api_vips: [10.0.0.5]}\n", "keepalived haproxy coredns"},
	} {
		cfg, err := ParseInstallConfig([]byte(icHeader + c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		if got := strings.Join(cfg.Origin.OnPremStack(), " "); got != c.want {
			t.Errorf("%s: stack %q, want %q", c.body, got, c.want)
		}
	}
	cfg := mustParseVIPs(t, dualStack)
	if cfg.Origin != nil || cfg.Origin.OnPremStack() != nil {
		t.Errorf("an appliance.yaml has no origin: %+v", cfg.Origin)
	}
}

func TestInstallConfigBad(t *testing.T) {
	cases := []struct {
		name, doc, wantPath, wantMsg string
	}{
		{"bad api VIP", icHeader + "platform:\n  baremetal:\n    apiVIPs: [10.0.0.300]\n", "platform.baremetal.apiVIPs[0]", `"10.0.0.300" is not an IP address`},
		{"bad singular VIP", icHeader + "platform:\n  vsphere:\n    apiVIP: 10.0.0.300\n", "platform.vsphere.apiVIP", "not an IP address"},
		{"singular disagrees", icHeader + "platform:\n  vsphere:\n    apiVIPs: [10.0.0.5]\n    apiVIP: 10.0.0.7\n", "platform.vsphere.apiVIP", "10.0.0.7 is not in platform.vsphere.apiVIPs (10.0.0.5)"},
		{"VIP outside default network", icHeader + "platform:\n  baremetal:\n    apiVIPs: [192.168.1.5]\n", "platform.baremetal.apiVIPs[0]", "10.0.0.0/16"},
		{"no VIPs", icHeader + "platform:\n  vsphere: {}\n", "platform.vsphere.apiVIPs", "required"},
		{"platform none", icHeader + "platform:\n  none: {}\n", "platform.none", "write an appliance.yaml instead, with network.apiVIPs, network.ingressVIPs and nodes"},
		{"cloud platform", icHeader + "platform:\n  aws: {region: us-east-1}\n", "platform.aws", "write an appliance.yaml"},
		{"two platforms", icHeader + "platform:\n  ovirt: {api_vips: [10.0.0.5]}\n  vsphere: {apiVIPs: [10.0.0.5]}\n", "platform", "sets ovirt and vsphere"},
		{"no platform", icHeader, "platform", "required"},
		{"bad name", strings.Replace(icHeader, "name: lab", "name: Lab_1", 1) + "platform:\n  baremetal: {apiVIPs: [10.0.0.5]}\n", "metadata.name", "not a DNS label"},
		{"bad base domain", strings.Replace(icHeader, "baseDomain: example.com", "baseDomain: -bad", 1) + "platform:\n  baremetal: {apiVIPs: [10.0.0.5]}\n", "baseDomain", "not a DNS name"},
		{"bad machine network", icHeader + "networking:\n  machineNetwork: [{cidr: 10.0.0.1/16}]\nplatform:\n  baremetal: {apiVIPs: [10.0.0.5]}\n", "networking.machineNetwork[0].cidr", "host bits"},
		{"cluster network overlaps", icHeader + "networking:\n  clusterNetwork: [{cidr: 10.0.0.0/8, hostPrefix: 23}]\nplatform:\n  baremetal: {apiVIPs: [10.0.0.5]}\n", "networking.clusterNetwork[0].cidr", "holds platform.baremetal.apiVIPs[0] (10.0.0.5)"},
		{"bad cluster network", icHeader + "networking:\n  clusterNetwork: [{cidr: pods}]\nplatform:\n  baremetal: {apiVIPs: [10.0.0.5]}\n", "networking.clusterNetwork[0].cidr", "not a CIDR"},
		{"bad old machineCIDR", icHeader + "networking:\n  machineCIDR: nope\nplatform:\n  baremetal: {apiVIPs: [10.0.0.5]}\n", "networking.machineCIDR", "not a CIDR"},
		{"bad host mac", icHeader + "platform:\n  baremetal:\n    apiVIPs: [10.0.0.5]\n    hosts:\n    - {name: m0, role: master, bootMACAddress: 'zz'}\n", "platform.baremetal.hosts[0].bootMACAddress", "not a MAC address"},
		{"duplicate host", icHeader + "platform:\n  baremetal:\n    apiVIPs: [10.0.0.5]\n    hosts:\n    - {name: m0, role: master}\n    - {name: m0, role: master}\n", "platform.baremetal.hosts[1].name", "used twice (also platform.baremetal.hosts[0])"},
		{"bad host role", icHeader + "platform:\n  baremetal:\n    apiVIPs: [10.0.0.5]\n    hosts:\n    - {name: m0, role: arbiter}\n", "platform.baremetal.hosts[0].role", "not a role"},
		{"VIP is a host", icHeader + "platform:\n  baremetal:\n    apiVIPs: [10.0.0.5]\n    hosts:\n    - name: m0\n      role: master\n      networkConfig: {interfaces: [{ipv4: {address: [{ip: 10.0.0.5}]}}]}\n", "platform.baremetal.apiVIPs[0]", "(platform.baremetal.hosts[0].networkConfig)"},
		{"wrong type", icHeader + "platform:\n  baremetal:\n    apiVIPs: 10.0.0.5\n", "platform.baremetal.apiVIPs", "want a list"},
		{"wrong apiVersion", strings.Replace(icHeader, "apiVersion: v1", "apiVersion: v2", 1) + "platform:\n  baremetal: {apiVIPs: [10.0.0.5]}\n", "apiVersion", "want v1"},
		{"not a mapping", "[1, 2]", "", "want a mapping"},
		{"not yaml", "a: [", "", "not valid YAML"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseInstallConfig([]byte(tc.doc))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want a *ValidationError, got %v", err)
			}
			for _, p := range ve.Problems {
				if p.Path == tc.wantPath && strings.Contains(p.Message, tc.wantMsg) {
					return
				}
			}
			t.Errorf("no problem at %q containing %q; got:\n%v", tc.wantPath, tc.wantMsg, err)
		})
	}
}
