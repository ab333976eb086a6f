package cluster

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// icExample is one platform's documented install-config in testdata, with
// the names the installer's types give that platform's VIP fields (read from
// pkg/types/<platform>/platform.go) and the VIPs the example sets.
type icExample struct {
	platform, file string
	list, single   [2]string // api, ingress: the lists and the deprecated single forms
	wrong          [2]string // the other spelling's lists, which the installer refuses here
	api, ingress   string
	name, domain   string
	machine        string
	nodes          int
}

var icExamples = []icExample{
	{"baremetal", "install-config.yaml", [2]string{"apiVIPs", "ingressVIPs"}, [2]string{"apiVIP", "ingressVIP"}, [2]string{"api_vips", "ingress_vips"},
		"192.168.126.5", "192.168.126.6", "ocp4", "example.com", "192.168.126.0/24", 5},
	{"ovirt", "install-config-ovirt.yaml", [2]string{"api_vips", "ingress_vips"}, [2]string{"api_vip", "ingress_vip"}, [2]string{"apiVIPs", "ingressVIPs"},
		"10.35.17.201", "10.35.17.202", "prod", "rhv.example.org", "10.35.16.0/22", 0},
	{"vsphere", "install-config-vsphere.yaml", [2]string{"apiVIPs", "ingressVIPs"}, [2]string{"apiVIP", "ingressVIP"}, [2]string{"api_vips", "ingress_vips"},
		"172.20.8.10", "172.20.8.11", "vcluster", "vmw.example.net", "172.20.8.0/23", 0},
	{"openstack", "install-config-openstack.yaml", [2]string{"apiVIPs", "ingressVIPs"}, [2]string{"apiVIP", "ingressVIP"}, [2]string{"api_vips", "ingress_vips"},
		"10.0.0.5", "10.0.0.7", "stack", "osp.example.com", "10.0.0.0/16", 0},
	{"nutanix", "install-config-nutanix.yaml", [2]string{"apiVIPs", "ingressVIPs"}, [2]string{"apiVIP", "ingressVIP"}, [2]string{"api_vips", "ingress_vips"},
		"10.40.142.7", "10.40.142.8", "ahv", "ntnx.example.com", "10.40.142.0/24", 0},
}

// The examples write each VIP list as a block; these render the forms a
// row swaps in for it.
func icList(key string, addrs ...string) string {
	return "    " + key + ":\n    - " + strings.Join(addrs, "\n    - ") + "\n"
}

func icOne(key, addr string) string { return "    " + key + ": " + addr + "\n" }

// icCase is one row: an example, edits made to it (pairs of old and new
// text; each old text must occur), and either the VIPs it gives or the
// problem it must be refused with.
type icCase struct {
	name         string
	file         string
	edit         []string
	api, ingress []string
	errPath      string
	errMsgs      []string // each must occur in the problem's message
}

func icCases() []icCase {
	var cases []icCase
	for _, e := range icExamples {
		at := "platform." + e.platform
		apiList, ingressList := icList(e.list[0], e.api), icList(e.list[1], e.ingress)
		cases = append(cases,
			icCase{name: e.platform + ": the documented example", file: e.file,
				api: []string{e.api}, ingress: []string{e.ingress}},
			icCase{name: e.platform + ": deprecated single forms", file: e.file,
				edit: []string{apiList, icOne(e.single[0], e.api), ingressList, icOne(e.single[1], e.ingress)},
				api:  []string{e.api}, ingress: []string{e.ingress}},
			icCase{name: e.platform + ": deprecated API form, ingress list", file: e.file,
				edit: []string{apiList, icOne(e.single[0], e.api)},
				api:  []string{e.api}, ingress: []string{e.ingress}},
			icCase{name: e.platform + ": both forms agree", file: e.file,
				edit: []string{apiList, apiList + icOne(e.single[0], e.api), ingressList, ingressList + icOne(e.single[1], e.ingress)},
				api:  []string{e.api}, ingress: []string{e.ingress}},
			icCase{name: e.platform + ": both API forms disagree", file: e.file,
				edit:    []string{apiList, apiList + icOne(e.single[0], e.ingress)},
				errPath: at + "." + e.single[0], errMsgs: []string{e.ingress + " is not in " + at + "." + e.list[0] + " (" + e.api + ")", "deprecated form of " + e.list[0], "remove it"}},
			icCase{name: e.platform + ": both ingress forms disagree", file: e.file,
				edit:    []string{ingressList, ingressList + icOne(e.single[1], e.api)},
				errPath: at + "." + e.single[1], errMsgs: []string{e.api + " is not in " + at + "." + e.list[1]}},
			icCase{name: e.platform + ": another platform's spelling", file: e.file,
				edit:    []string{apiList, icList(e.wrong[0], e.api)},
				errPath: at + "." + e.wrong[0], errMsgs: []string{"the " + e.platform + " platform spells this " + e.list[0], "rename it"}},
			icCase{name: e.platform + ": another platform's spelling of ingress", file: e.file,
				edit:    []string{ingressList, icList(e.wrong[1], e.ingress)},
				errPath: at + "." + e.wrong[1], errMsgs: []string{"spells this " + e.list[1]}},
			icCase{name: e.platform + ": a bad address names the platform's field", file: e.file,
				edit:    []string{apiList, icList(e.list[0], "10.0.0.300")},
				errPath: at + "." + e.list[0] + "[0]", errMsgs: []string{`"10.0.0.300" is not an IP address`}},
			icCase{name: e.platform + ": a bad deprecated address names the deprecated field", file: e.file,
				edit:    []string{ingressList, icOne(e.single[1], "nope")},
				errPath: at + "." + e.single[1], errMsgs: []string{`"nope" is not an IP address`}},
			icCase{name: e.platform + ": a list where one address goes", file: e.file,
				edit:    []string{apiList, "    " + e.single[0] + ": [" + e.api + "]\n"},
				errPath: at + "." + e.single[0], errMsgs: []string{"want a single IP address, got a list", at + "." + e.list[0]}},
			icCase{name: e.platform + ": one address where a list goes", file: e.file,
				edit:    []string{apiList, icOne(e.list[0], e.api)},
				errPath: at + "." + e.list[0], errMsgs: []string{"want a list", "write [" + e.api + "]"}},
			icCase{name: e.platform + ": names match regardless of case, as the installer's decoder does", file: e.file,
				edit: []string{apiList, icList(strings.ToLower(e.list[0]), e.api)},
				api:  []string{e.api}, ingress: []string{e.ingress}},
		)
		if e.platform != "openstack" { // openstack has defaults, below
			cases = append(cases, icCase{name: e.platform + ": no API VIP", file: e.file,
				edit:    []string{apiList, ""},
				errPath: at + "." + e.list[0], errMsgs: []string{"required"}})
		}
	}

	// Dual stack, and the deprecated form agreeing with either family, as the
	// installer accepts it.
	const ovirtAPI = "    api_vips:\n    - 10.35.17.201\n"
	cases = append(cases,
		icCase{name: "ovirt: dual stack", file: "install-config-ovirt.yaml",
			edit: []string{"  - cidr: 10.35.16.0/22\n", "  - cidr: 10.35.16.0/22\n  - cidr: fd00:35::/64\n",
				ovirtAPI, icList("api_vips", "10.35.17.201", "fd00:35::201"), "    - 10.35.17.202\n", "    - 10.35.17.202\n    - fd00:35::202\n"},
			api: []string{"10.35.17.201", "fd00:35::201"}, ingress: []string{"10.35.17.202", "fd00:35::202"}},
		icCase{name: "ovirt: the deprecated form names the second family", file: "install-config-ovirt.yaml",
			edit: []string{"  - cidr: 10.35.16.0/22\n", "  - cidr: 10.35.16.0/22\n  - cidr: fd00:35::/64\n",
				ovirtAPI, icList("api_vips", "10.35.17.201", "fd00:35::201") + icOne("api_vip", "fd00:35:0::201")},
			api: []string{"10.35.17.201", "fd00:35::201"}, ingress: []string{"10.35.17.202"}},
		icCase{name: "ovirt: an older file with api_vip, ingress_vip and dns_vip", file: "install-config-ovirt.yaml",
			edit: []string{ovirtAPI, icOne("api_vip", "10.35.17.201") + icOne("dns_vip", "10.35.17.203"), "    ingress_vips:\n    - 10.35.17.202\n", icOne("ingress_vip", "10.35.17.202")},
			api:  []string{"10.35.17.201"}, ingress: []string{"10.35.17.202"}},
		icCase{name: "ovirt: the deprecated form beside a bad list entry", file: "install-config-ovirt.yaml",
			edit:    []string{ovirtAPI, "    api_vips:\n    - {ip: 10.35.17.201}\n" + icOne("api_vip", "10.35.17.201")},
			errPath: "platform.ovirt.api_vips[0]", errMsgs: []string{"want an IP address, got a mapping"}},
		icCase{name: "ovirt: a VIP outside the machine network", file: "install-config-ovirt.yaml",
			edit:    []string{ovirtAPI, icList("api_vips", "10.35.20.1")},
			errPath: "platform.ovirt.api_vips[0]", errMsgs: []string{"not inside a machine network (10.35.16.0/22)"}},
		icCase{name: "ovirt: the same VIP twice names both fields", file: "install-config-ovirt.yaml",
			edit:    []string{"    - 10.35.17.202\n", "    - 10.35.17.201\n"},
			errPath: "platform.ovirt.ingress_vips[0]", errMsgs: []string{"used twice (also platform.ovirt.api_vips[0])"}},
		icCase{name: "ovirt: section is not a mapping", file: "install-config-ovirt.yaml",
			edit:    []string{"  ovirt:\n    api_vips", "  ovirt: 5\n  x:\n    api_vips"},
			errPath: "platform", errMsgs: []string{"sets ovirt and x"}},

		// openstack: the installer makes hosts 5 and 7 of the first machine
		// network the VIPs when none are given, unless the load balancer is
		// the user's.
		icCase{name: "openstack: VIPs left to the installer's defaults", file: "install-config-openstack.yaml",
			edit: []string{icList("apiVIPs", "10.0.0.5"), "", icList("ingressVIPs", "10.0.0.7"), "",
				"  - cidr: 10.0.0.0/16\n", "  - cidr: 10.20.0.0/16\n"},
			api: []string{"10.20.0.5"}, ingress: []string{"10.20.0.7"}},
		icCase{name: "openstack: one VIP given, the other defaulted", file: "install-config-openstack.yaml",
			edit: []string{icList("apiVIPs", "10.0.0.5"), icOne("apiVIP", "10.0.0.9"), icList("ingressVIPs", "10.0.0.7"), ""},
			api:  []string{"10.0.0.9"}, ingress: []string{"10.0.0.7"}},
		icCase{name: "openstack: a bad defaulted VIP names the default", file: "install-config-openstack.yaml",
			edit:    []string{icList("ingressVIPs", "10.0.0.7"), "", "  - cidr: 10.0.0.0/16\n", "  - cidr: 10.0.0.0/29\n"},
			errPath: "platform.openstack.ingressVIPs[0] (the installer's default: host 7 of networking.machineNetwork[0])", errMsgs: []string{"broadcast address"}},
		icCase{name: "openstack: a user-managed load balancer gets no defaults", file: "install-config-openstack.yaml",
			edit:    []string{icList("apiVIPs", "10.0.0.5"), "    loadBalancer:\n      type: UserManaged\n"},
			errPath: "platform.openstack.apiVIPs", errMsgs: []string{"required"}},
		icCase{name: "openstack: a misspelt list is not replaced by the default", file: "install-config-openstack.yaml",
			edit:    []string{icList("apiVIPs", "10.0.0.5"), icList("api_vips", "10.0.0.9")},
			errPath: "platform.openstack.api_vips", errMsgs: []string{"spells this apiVIPs"}},

		// vSphere's static-IP hosts carry no names; they are not nodes here.
		icCase{name: "vsphere: static-IP hosts are left to discovery", file: "install-config-vsphere.yaml",
			edit: []string{"    diskType: thin\n", "    diskType: thin\n    hosts:\n    - role: bootstrap\n      networkDevice:\n        ipAddrs:\n        - 172.20.8.20/23\n        gateway: 172.20.8.1\n        nameservers:\n        - 172.20.8.1\n    - role: control-plane\n      failureDomain: east-1\n      networkDevice:\n        ipAddrs:\n        - 172.20.8.21/23\n        gateway: 172.20.8.1\n"},
			api:  []string{"172.20.8.10"}, ingress: []string{"172.20.8.11"}},
		icCase{name: "vsphere: an older file (vCenter, datacenter, apiVIP)", file: "install-config-vsphere.yaml",
			edit: []string{icList("apiVIPs", "172.20.8.10"), icOne("apiVIP", "172.20.8.10") + "    vCenter: vcenter.vmw.example.net\n    username: ocp-installer@vsphere.local\n    password: secret\n    datacenter: dc-east\n    defaultDatastore: vsan-a\n    network: ocp-segment\n",
				icList("ingressVIPs", "172.20.8.11"), icOne("ingressVIP", "172.20.8.11")},
			api: []string{"172.20.8.10"}, ingress: []string{"172.20.8.11"}},
		icCase{name: "vsphere: platform name in another case", file: "install-config-vsphere.yaml",
			edit: []string{"  vsphere:\n    apiVIPs", "  vSphere:\n    apiVIPs"},
			api:  []string{"172.20.8.10"}, ingress: []string{"172.20.8.11"}},
		icCase{name: "vsphere: VIPs under a misspelt platform case keep its spelling in paths", file: "install-config-vsphere.yaml",
			edit:    []string{"  vsphere:\n    apiVIPs", "  vSphere:\n    apiVIPs", icList("apiVIPs", "172.20.8.10"), icList("apiVIPs", "1.2.3.4")},
			errPath: "platform.vSphere.apiVIPs[0]", errMsgs: []string{"not inside a machine network"}},

		// Platforms whose install-config carries no VIPs point to appliance.yaml.
		icCase{name: "none (kcli, UPI)", file: "install-config-none.yaml",
			errPath: "platform.none", errMsgs: []string{"platform none gives the cluster no VIPs", "write an appliance.yaml",
				"network.apiVIPs, network.ingressVIPs and nodes", "cluster.name: kcli, cluster.baseDomain: karmalabs.local, network.machineCIDRs: [192.168.122.0/24]"}},
		icCase{name: "none with VIPs the installer would refuse", file: "install-config-none.yaml",
			edit:    []string{"  none: {}\n", "  none:\n    apiVIPs: [192.168.122.5]\n"},
			errPath: "platform.none", errMsgs: []string{"the installer refuses apiVIPs there", "write an appliance.yaml"}},
		icCase{name: "external", file: "install-config-none.yaml",
			edit:    []string{"  none: {}\n", "  external:\n    platformName: oci\n"},
			errPath: "platform.external", errMsgs: []string{"platform external gives the cluster no VIPs in an install-config (only baremetal, nutanix, openstack, ovirt or vsphere do)", "network.apiVIPs, network.ingressVIPs and nodes"}},
		icCase{name: "none with a bad name still says what is known", file: "install-config-none.yaml",
			edit:    []string{"name: kcli", "name: KCLI"},
			errPath: "platform.none", errMsgs: []string{"and from this file cluster.baseDomain: karmalabs.local, network.machineCIDRs"}},
	)
	return cases
}

func TestInstallConfigPlatforms(t *testing.T) {
	for _, tc := range icCases() {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			doc := string(data)
			for i := 0; i+1 < len(tc.edit); i += 2 {
				if !strings.Contains(doc, tc.edit[i]) {
					t.Fatalf("edit %d: %q is not in %s", i/2, tc.edit[i], tc.file)
				}
				doc = strings.Replace(doc, tc.edit[i], tc.edit[i+1], 1)
			}
			c, err := ParseInstallConfig([]byte(doc))
			if !isInstallConfig([]byte(doc)) {
				t.Error("not detected as an install-config")
			}
			if tc.errPath != "" || tc.errMsgs != nil {
				var ve *ValidationError
				if !errors.As(err, &ve) {
					t.Fatalf("want a *ValidationError, got %v", err)
				}
				for _, p := range ve.Problems {
					if p.Path == tc.errPath && containsAll(p.Message, tc.errMsgs) {
						return
					}
				}
				t.Fatalf("no problem at %q containing %q; got:\n%v", tc.errPath, tc.errMsgs, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := c.Network.APIVIPs, addrs(tc.api); !reflect.DeepEqual(got, want) {
				t.Errorf("API VIPs = %v, want %v", got, want)
			}
			if got, want := c.Network.IngressVIPs, addrs(tc.ingress); !reflect.DeepEqual(got, want) {
				t.Errorf("ingress VIPs = %v, want %v", got, want)
			}
		})
	}
}

// TestInstallConfigExamples loads each documented example as a user would,
// through Load, and checks the whole cluster picture it gives.
func TestInstallConfigExamples(t *testing.T) {
	for _, e := range icExamples {
		t.Run(e.platform, func(t *testing.T) {
			c, err := Load(filepath.Join("testdata", e.file))
			if err != nil {
				t.Fatal(err)
			}
			if c.Cluster != (Cluster{Name: e.name, BaseDomain: e.domain}) {
				t.Errorf("cluster = %+v", c.Cluster)
			}
			if want := []netip.Prefix{netip.MustParsePrefix(e.machine)}; !reflect.DeepEqual(c.Network.MachineCIDRs, want) {
				t.Errorf("machine networks = %v, want %v", c.Network.MachineCIDRs, want)
			}
			if !reflect.DeepEqual(c.Network.APIVIPs, addrs([]string{e.api})) || !reflect.DeepEqual(c.Network.IngressVIPs, addrs([]string{e.ingress})) {
				t.Errorf("VIPs = %v / %v", c.Network.APIVIPs, c.Network.IngressVIPs)
			}
			if len(c.Nodes) != e.nodes {
				t.Errorf("%d nodes, want %d", len(c.Nodes), e.nodes)
			}
		})
	}
	_, err := Load(filepath.Join("testdata", "install-config-none.yaml"))
	if err == nil || !strings.Contains(err.Error(), "platform.none: ") || !strings.Contains(err.Error(), "write an appliance.yaml") {
		t.Errorf("Load(platform none) = %v, want a pointer to appliance.yaml", err)
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func addrs(ss []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}
