package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// checkParseResult holds for any input: either a model, or a
// *ValidationError whose problems are each one non-empty line.
func checkParseResult(t *testing.T, cfg *Config, err error) {
	t.Helper()
	if err == nil {
		if cfg == nil {
			t.Fatal("nil config without error")
		}
		if len(cfg.Network.APIVIPs) == 0 || len(cfg.Network.MachineCIDRs) == 0 || cfg.VRRP.APIVRID == 0 ||
			cfg.VRRP.IngressVRID == 0 || cfg.VRRP.APIVRID == cfg.VRRP.IngressVRID || cfg.Admin.Listen == "" {
			t.Fatalf("accepted config breaks an invariant: %+v", cfg)
		}
		return
	}
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) == 0 {
		t.Fatalf("error is not a non-empty *ValidationError: %T %v", err, err)
	}
	for _, p := range ve.Problems {
		if p.Message == "" || strings.Contains(p.String(), "\n") {
			t.Fatalf("bad problem %#v", p)
		}
	}
}

func seedFuzz(f *testing.F) {
	examples, err := filepath.Glob(filepath.Join("testdata", "install-config*.yaml"))
	if err != nil || len(examples) == 0 {
		f.Fatalf("no install-config examples: %v", err)
	}
	goldens, err := filepath.Glob(filepath.Join("testdata", "marshal", "*.in.yaml"))
	if err != nil || len(goldens) == 0 {
		f.Fatalf("no marshal inputs: %v", err)
	}
	examples = append(examples, goldens...)
	for _, name := range append([]string{filepath.Join("testdata", "appliance.yaml")}, examples...) {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"", "~", "[]", "cluster: 5", "a: [", "cluster:\n  name: a\n  name: b\n",
		"network: {apiVIPs: [10.0.0.300], machineCIDR: 10.0.0.0/24}",
		"nodes: [{name: a, mac: '52:54:00:7e:00'}]",
		"vrrp: {version: 2, advertInterval: 1s, apiVRID: 300, authPass: 123456789}",
		"network: {upstreamDNS: ['[::1]:53', '1.1.1.1:0', 'fe80::1%eth0']}",
		"a: &a [*a, *a]",
		// each platform's VIP spellings, agreeing and not
		"apiVersion: v1\nmetadata: {name: a}\nbaseDomain: b.c\nplatform: {ovirt: {api_vips: [10.0.0.5], api_vip: 10.0.0.5, ingress_vip: 10.0.0.6}}",
		"apiVersion: v1\nmetadata: {name: a}\nbaseDomain: b.c\nplatform: {vSphere: {apiVIPs: [10.0.0.5], apiVIP: 10.0.0.7, api_vips: 1}}",
		"apiVersion: v1\nmetadata: {name: a}\nbaseDomain: b.c\nnetworking: {machineNetwork: [{cidr: 10.0.0.0/30}]}\nplatform: {openstack: {}}",
		"apiVersion: v1\nmetadata: {name: a}\nbaseDomain: b.c\nplatform: {none: {apiVIPs: [10.0.0.5]}}",
	} {
		f.Add([]byte(s))
	}
}

func FuzzParse(f *testing.F) {
	seedFuzz(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		checkParseResult(t, cfg, err)
	})
}

func FuzzParseInstallConfig(f *testing.F) {
	seedFuzz(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseInstallConfig(data)
		checkParseResult(t, cfg, err)
	})
}

// FuzzParseMarshal: whatever Parse (or, for an install-config,
// ParseInstallConfig) accepts, Marshal writes a file that Parse reads back as
// the same model, less provision and Origin, and writing that model again
// gives the same bytes.
func FuzzParseMarshal(f *testing.F) {
	seedFuzz(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		parse := Parse
		if isInstallConfig(data) {
			parse = ParseInstallConfig
		}
		cfg, err := parse(data)
		if err != nil {
			return
		}
		checkMarshalRoundTrip(t, cfg)
	})
}

// FuzzMarshalValues puts fuzzed values into the fields of a valid document
// that take free text or choose a network's shape, so that far more inputs
// are accepted than FuzzParseMarshal's byte mutations reach, and checks the
// same round trip on each.
func FuzzMarshalValues(f *testing.F) {
	f.Add("192.168.126.0/24", "192.168.126.10", "192.168.126.5", "enp1s0", "s3cret", "/var/lib/appliance/l.json", "http://127.0.0.1:1936/healthz/ready", "127.0.0.1:9447", "192.168.126.1:53")
	f.Add("10.0.0.0/31", "10.0.0.0", "10.0.0.1", "", "", "", "", ":0", "[fe80::1%eth0]:53")
	f.Add("fd00::/127", "fd00::", "fd00::1", "e\u0085x", "\x7f", "/a\u2028b", "https://[::1]:1/?q=#f", "[::1]:1", "fd00::53")
	f.Fuzz(func(t *testing.T, cidr, nodeIP, vip, iface, authPass, leaseFile, healthURL, listen, upstream string) {
		doc := map[string]any{
			"cluster": map[string]any{"name": "ocp4", "baseDomain": "example.com"},
			"network": map[string]any{"machineCIDR": cidr, "apiVIPs": []any{vip}, "interface": iface, "upstreamDNS": []any{upstream}},
			"nodes":   []any{map[string]any{"name": "master-0", "role": "master", "ips": []any{nodeIP}}},
			"vrrp":    map[string]any{"version": 2, "authPass": authPass, "ingressHealthURL": healthURL},
			"dhcp":    map[string]any{"leaseFile": leaseFile},
			"admin":   map[string]any{"listen": listen},
		}
		data, err := yaml.Marshal(doc)
		if err != nil {
			return // a value YAML cannot write; FuzzParseMarshal covers odd documents
		}
		if cfg, err := Parse(data); err == nil {
			checkMarshalRoundTrip(t, cfg)
		}
	})
}
