package bootstrap

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"appliance/internal/cluster"
)

// TestNodeConfigRoundTrip: what the node reads back is the model the
// installer's machine validated, minus the provision section, whatever the
// input's shape.
func TestNodeConfigRoundTrip(t *testing.T) {
	inputs := map[string]*cluster.Config{
		"every section": mustParse(t, testConfigYAML),
		"keepalived-openshift": mustParse(t, `
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}
vrrp: {mode: keepalived-openshift}
`),
		"dual-stack, no nodes": mustParse(t, `
cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDRs: [192.168.126.0/24, "fd00:126::/64"]
  apiVIPs: [192.168.126.5, "fd00:126::5"]
  ingressVIPs: [192.168.126.6, "fd00:126::6"]
vrrp: {enabled: false}
dns: {enabled: false}
lb: {enabled: false, redirect: false}
`),
	}
	matches, _ := filepath.Glob("../internal/cluster/testdata/*.yaml")
	for _, m := range matches {
		cfg, err := cluster.Load(m)
		if err != nil {
			continue // the folder also holds configs meant to fail
		}
		inputs[filepath.Base(m)] = cfg
	}
	if len(inputs) < 5 {
		t.Fatalf("only %d inputs", len(inputs))
	}
	for name, cfg := range inputs {
		t.Run(name, func(t *testing.T) {
			y, err := NodeConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			back, err := cluster.Parse(y)
			if err != nil {
				t.Fatalf("the node cannot read its config: %v\n%s", err, y)
			}
			want := *cfg
			// Neither is part of a node's appliance.yaml: the installer's
			// machine alone provisions, and where the model came from
			// matters only there (config check, preflight).
			want.Provision, want.Origin = nil, nil
			if !reflect.DeepEqual(back, &want) {
				t.Errorf("read back differs:\n got %+v\nwant %+v\n%s", back, &want, y)
			}
			for _, secret := range []string{"pullSecret", "sshKey", "dXNlcjpwYXNz", "ssh-ed25519", "password", "provision", "credentials"} {
				if strings.Contains(string(y), secret) {
					t.Errorf("the node's config holds %q:\n%s", secret, y)
				}
			}
		})
	}
}

// TestNodeConfigCoversTheModel fails when cluster.Config gains a field that
// NodeConfig does not write: add it to nodeDoc, then here.
func TestNodeConfigCoversTheModel(t *testing.T) {
	written := map[string][]string{
		"Config":  {"Cluster", "Network", "Nodes", "VRRP", "DHCP", "LB", "DNS", "Admin", "Provision", "Origin"},
		"Cluster": {"Name", "BaseDomain"},
		"Network": {"MachineCIDRs", "Interface", "Gateway", "APIVIPs", "IngressVIPs", "UpstreamDNS", "ClusterNetworks", "NodeIPHints"},
		"Node":    {"Name", "Role", "MAC", "IPs"},
		"VRRP": {"Enabled", "IngressHealthURL", "Mode", "Transport", "Version", "AdvertInterval", "Preempt", "PreemptDelay",
			"APIVRID", "IngressVRID", "AuthPass", "UnicastPeers", "Priority"},
		"DHCP":  {"Enabled", "LeaseTime", "LeaseFile", "Pool", "DNS", "NTP", "SearchDomains"},
		"Range": {"Start", "End"},
		"LB":    {"Enabled", "Balance", "MCS", "Redirect"},
		"DNS":   {"Enabled", "MDNS", "AllowFrom"},
		"Admin": {"Listen"},
	}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[cluster.Config](), reflect.TypeFor[cluster.Cluster](), reflect.TypeFor[cluster.Network](),
		reflect.TypeFor[cluster.Node](), reflect.TypeFor[cluster.VRRP](), reflect.TypeFor[cluster.DHCP](),
		reflect.TypeFor[cluster.Range](), reflect.TypeFor[cluster.LB](), reflect.TypeFor[cluster.DNS](),
		reflect.TypeFor[cluster.Admin](),
	} {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if f.IsExported() && !slices.Contains(written[typ.Name()], f.Name) {
				t.Errorf("cluster.%s.%s is not written into the node's appliance.yaml: add it to NodeConfig (bootstrap/nodeconfig.go) and to this list", typ.Name(), f.Name)
			}
		}
	}
}

var updateGolden = flag.Bool("update", false, "rewrite the node config goldens in internal/cluster/testdata/marshal")

// TestNodeConfigGolden pins the node's appliance.yaml byte for byte: nodes in
// the field hold these files, and a change of key order or of what is left
// out must be a decision, not an accident. Each X.in.yaml is read as `appliance
// ignition` reads it; X.out.yaml is the node's file after the header.
func TestNodeConfigGolden(t *testing.T) {
	ins, _ := filepath.Glob("../internal/cluster/testdata/marshal/*.in.yaml")
	if len(ins) < 5 {
		t.Fatalf("only %d golden inputs", len(ins))
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			cfg, err := cluster.Load(in)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.VRRP.Mode == cluster.VRRPModeKeepalivedOpenShift {
				// Parse never leaves a password in a compat-mode model, but
				// one put there by hand must not reach the node either.
				cfg.VRRP.AuthPass = "s3cret"
			}
			y, err := NodeConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			body, ok := bytes.CutPrefix(y, []byte(nodeConfigHeader))
			if !ok {
				t.Fatalf("no header:\n%s", y)
			}
			out := strings.TrimSuffix(in, ".in.yaml") + ".out.yaml"
			if *updateGolden {
				if err := os.WriteFile(out, body, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(body, want) {
				t.Errorf("the node's appliance.yaml changed:\n got:\n%s\nwant (%s):\n%s", body, out, want)
			}
		})
	}
}
