package bootstrap

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v32 "github.com/coreos/ignition/v2/config/v3_2"
	"sigs.k8s.io/yaml"

	"appliance/bootstrap/monitoring"
	"appliance/internal/cluster"
)

func TestWriteManifests(t *testing.T) {
	cfg := mustParse(t, testConfigYAML)
	dir := t.TempDir()
	// Twice: the second run rewrites, never adds.
	for range 2 {
		written, err := WriteManifests(dir, cfg, testOptions())
		if err != nil {
			t.Fatal(err)
		}
		want := []string{MachineConfigFile(cluster.RoleMaster), MachineConfigFile(cluster.RoleWorker), NodeReaderFile, NamespaceFile, MonitoringFile,
			monitoring.PrometheusRuleFile, monitoring.DashboardFile}
		if len(written) != len(want) {
			t.Fatalf("wrote %q, want %q", written, want)
		}
		for i, w := range want {
			if written[i] != filepath.Join(dir, w) {
				t.Errorf("wrote %q, want %q", written, want)
			}
		}
	}
	for _, f := range []string{monitoring.PrometheusRuleFile, monitoring.DashboardFile} {
		want, _ := monitoring.Manifests(monitoring.Options{})
		got, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || !slices.ContainsFunc(want, func(m monitoring.File) bool { return m.Path == f && bytes.Equal(m.Data, got) }) {
			t.Errorf("%s: not monitoring's manifest (%v)", f, err)
		}
	}
	for _, role := range []cluster.Role{cluster.RoleMaster, cluster.RoleWorker} {
		y, err := os.ReadFile(filepath.Join(dir, "openshift", "99-appliance-"+string(role)+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		// Strictly: a field the MachineConfig type does not document is an
		// error, as the API server's strict field validation makes it.
		j, err := yaml.YAMLToJSON(y)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.DisallowUnknownFields()
		var mc MachineConfig
		if err := dec.Decode(&mc); err != nil {
			t.Fatalf("%s: strict decode: %v\n%s", role, err, y)
		}
		if mc.APIVersion != "machineconfiguration.openshift.io/v1" || mc.Kind != "MachineConfig" ||
			mc.Metadata.Name != "99-appliance-"+string(role) || mc.Metadata.Labels[RoleLabel] != string(role) {
			t.Errorf("%s: %+v", role, mc)
		}
		ign, _, err := v32.Parse(mc.Spec.Config)
		if err != nil {
			t.Fatalf("%s: spec.config is not Ignition %s: %v", role, MachineConfigVersion, err)
		}
		want, _ := Files(cfg, role, testOptions())
		got := ours(t, mc.Spec.Config)
		if len(ign.Storage.Files) != len(want) || len(got) != len(want) {
			t.Errorf("%s: %d files, want %d", role, len(ign.Storage.Files), len(want))
		}
		for _, f := range want {
			if g, ok := got[f.Path]; !ok || *g.Mode != f.Mode || !bytes.Equal(contents(t, g), f.Contents) {
				t.Errorf("%s: %s differs", role, f.Path)
			}
		}
		if fi, _ := os.Stat(filepath.Join(dir, MachineConfigFile(role))); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", role, fi.Mode())
		}
	}

	// Workers that run nothing get no manifest, and lose an earlier one.
	o := testOptions()
	o.Services = func(r cluster.Role) RoleServices { return RoleServices{Runs: r != cluster.RoleWorker, DNS: true} }
	written, err := WriteManifests(dir, cfg, o)
	// The master's MachineConfig, the node reader, the namespace, the
	// monitoring objects, the rules and the dashboard.
	if err != nil || len(written) != 6 {
		t.Fatalf("%q %v", written, err)
	}
	if _, err := os.Stat(filepath.Join(dir, MachineConfigFile(cluster.RoleWorker))); !os.IsNotExist(err) {
		t.Errorf("the worker manifest is still there: %v", err)
	}
}

func TestMachineConfigRefusesBootstrap(t *testing.T) {
	if _, err := MachineConfigFor(cluster.RoleBootstrap, nil); err == nil {
		t.Error("a bootstrap MachineConfig: the bootstrap node has no pool")
	}
}
