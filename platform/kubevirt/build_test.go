package kubevirt

import (
	"bytes"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/yaml"

	"appliance/internal/cluster"
	"appliance/platform"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

const testInfraID = "ocp4-x7k2p"

// testSpec is a bootstrap + 3 masters + 2 workers cluster.
func testSpec() *platform.Spec {
	s := &platform.Spec{
		InfraID:     testInfraID,
		ClusterName: "ocp4",
		BaseDomain:  "example.com",
		Image: platform.Image{
			Path:   "/nonexistent/rhcos.qcow2",
			Format: "qcow2",
			SHA256: "ab12cd34",
			URL:    "https://images.example.com/rhcos-kubevirt.x86_64.qcow2",
			Size:   1 << 30,
		},
	}
	add := func(node string, role cluster.Role, cpus, mem, disk int, mac string) {
		hw, err := net.ParseMAC(mac)
		if err != nil {
			panic(err)
		}
		s.Machines = append(s.Machines, platform.Machine{
			Name: testInfraID + "-" + node, Node: node, Role: role,
			CPUs: cpus, MemoryMiB: mem, DiskGiB: disk, MAC: hw,
			Ignition:       []byte(`{"ignition":{"version":"3.2.0"},"role":"` + string(role) + `"}`),
			IgnitionSource: "assets/" + string(role) + ".ign",
		})
	}
	add("bootstrap", cluster.RoleBootstrap, 4, 16384, 120, "52:54:00:7e:00:09")
	for i, mac := range []string{"52:54:00:7e:00:10", "52:54:00:7e:00:11", "52:54:00:7e:00:12"} {
		add("master-"+string(rune('0'+i)), cluster.RoleMaster, 4, 16384, 120, mac)
	}
	add("worker-0", cluster.RoleWorker, 2, 8192, 100, "52:54:00:7e:00:20")
	add("worker-1", cluster.RoleWorker, 2, 8192, 100, "52:54:00:7e:00:21")
	return s
}

func testOptions() Options {
	return Options{Namespace: "ocp", Network: "ocp/machine-net", StorageClass: "fast"}.withDefaults()
}

func TestBuildVirtualMachineGolden(t *testing.T) {
	spec := testSpec()
	vm := BuildVirtualMachine(spec, spec.Machines[1], testOptions())
	got, err := yaml.Marshal(vm)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "vm-master-0.yaml")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("VM YAML differs from %s (run with -update after checking):\n%s", path, got)
	}
}

func TestBuildVirtualMachine(t *testing.T) {
	spec := testSpec()
	cd := testSpec()
	cd.Image = platform.Image{ContainerDisk: "quay.io/example/rhcos:4.20"}

	tests := []struct {
		name  string
		spec  *platform.Spec
		m     int
		opts  func(*Options)
		check func(t *testing.T, vm *kubevirtv1.VirtualMachine)
	}{
		{"master clones golden volume", spec, 1, nil, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			dvt := vm.Spec.DataVolumeTemplates
			if len(dvt) != 1 || dvt[0].Name != "ocp4-x7k2p-master-0-rootdisk" {
				t.Fatalf("dataVolumeTemplates = %+v", dvt)
			}
			src := dvt[0].Spec.Source.PVC
			if src == nil || src.Name != "ocp4-x7k2p-rhcos" || src.Namespace != "ocp" {
				t.Errorf("clone source = %+v", src)
			}
			if q := dvt[0].Spec.Storage.Resources.Requests[corev1.ResourceStorage]; q.String() != "120Gi" {
				t.Errorf("root size = %s", q.String())
			}
			if sc := dvt[0].Spec.Storage.StorageClassName; sc == nil || *sc != "fast" {
				t.Errorf("storage class = %v", sc)
			}
			if vol := vm.Spec.Template.Spec.Volumes[0]; vol.DataVolume == nil || vol.DataVolume.Name != dvt[0].Name {
				t.Errorf("root volume = %+v", vol)
			}
		}},
		{"worker sizing and compute group", spec, 4, nil, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			d := vm.Spec.Template.Spec.Domain
			if d.CPU.Cores != 2 || d.Memory.Guest.String() != "8Gi" {
				t.Errorf("cpu %d memory %s", d.CPU.Cores, d.Memory.Guest.String())
			}
			term := vm.Spec.Template.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0]
			if g := term.PodAffinityTerm.LabelSelector.MatchLabels[LabelGroup]; g != GroupCompute {
				t.Errorf("anti-affinity group = %q", g)
			}
			if vm.Labels[LabelRole] != "worker" || vm.Spec.Template.ObjectMeta.Labels[LabelGroup] != GroupCompute {
				t.Errorf("labels = %v / %v", vm.Labels, vm.Spec.Template.ObjectMeta.Labels)
			}
		}},
		{"bootstrap joins control-plane group", spec, 0, nil, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			if vm.Labels[LabelGroup] != GroupControlPlane {
				t.Errorf("group = %q", vm.Labels[LabelGroup])
			}
		}},
		{"required anti-affinity, topology and node selector", spec, 2, func(o *Options) {
			o.RequireAntiAffinity = true
			o.TopologyKey = "topology.kubernetes.io/zone"
			o.NodeSelector = map[string]string{"node-role.kubernetes.io/infra": ""}
		}, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			aa := vm.Spec.Template.Spec.Affinity.PodAntiAffinity
			if len(aa.PreferredDuringSchedulingIgnoredDuringExecution) != 0 || len(aa.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
				t.Fatalf("anti-affinity = %+v", aa)
			}
			if k := aa.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey; k != "topology.kubernetes.io/zone" {
				t.Errorf("topology key = %q", k)
			}
			if _, ok := vm.Spec.Template.Spec.NodeSelector["node-role.kubernetes.io/infra"]; !ok {
				t.Errorf("node selector = %v", vm.Spec.Template.Spec.NodeSelector)
			}
		}},
		{"container disk imported persistently", cd, 1, nil, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			dvt := vm.Spec.DataVolumeTemplates
			if len(dvt) != 1 || dvt[0].Spec.Source.Registry == nil || *dvt[0].Spec.Source.Registry.URL != "docker://quay.io/example/rhcos:4.20" {
				t.Fatalf("dataVolumeTemplates = %+v", dvt)
			}
		}},
		{"ephemeral container disk", cd, 1, func(o *Options) { o.EphemeralContainerDisk = true }, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			if len(vm.Spec.DataVolumeTemplates) != 0 {
				t.Errorf("dataVolumeTemplates = %+v", vm.Spec.DataVolumeTemplates)
			}
			if c := vm.Spec.Template.Spec.Volumes[0].ContainerDisk; c == nil || c.Image != "quay.io/example/rhcos:4.20" {
				t.Errorf("root volume = %+v", vm.Spec.Template.Spec.Volumes[0])
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions()
			if tt.opts != nil {
				tt.opts(&o)
			}
			m := tt.spec.Machines[tt.m]
			vm := BuildVirtualMachine(tt.spec, m, o)
			// Invariants for every VM.
			if vm.Name != m.Name || vm.Namespace != "ocp" {
				t.Errorf("name %s/%s", vm.Namespace, vm.Name)
			}
			if rs := vm.Spec.RunStrategy; rs == nil || *rs != kubevirtv1.RunStrategyHalted {
				t.Errorf("runStrategy = %v, want Halted", rs)
			}
			ifc := vm.Spec.Template.Spec.Domain.Devices.Interfaces
			if len(ifc) != 1 || ifc[0].Bridge == nil || ifc[0].MacAddress != m.MAC.String() {
				t.Errorf("interfaces = %+v", ifc)
			}
			nets := vm.Spec.Template.Spec.Networks
			if len(nets) != 1 || nets[0].Name != ifc[0].Name || nets[0].Multus == nil || nets[0].Multus.NetworkName != "ocp/machine-net" || nets[0].Pod != nil {
				t.Errorf("networks = %+v", nets)
			}
			cdrive := vm.Spec.Template.Spec.Volumes[1].CloudInitConfigDrive
			if cdrive == nil || cdrive.UserDataSecretRef == nil || cdrive.UserDataSecretRef.Name != m.Name+"-ignition" || cdrive.UserData != "" {
				t.Errorf("config drive = %+v", cdrive)
			}
			for _, l := range []map[string]string{vm.Labels, vm.Spec.Template.ObjectMeta.Labels} {
				if l[LabelInfraID] != testInfraID || l[LabelNode] != m.Node || l[LabelRole] != string(m.Role) {
					t.Errorf("labels = %v", l)
				}
			}
			if vm.Spec.Template.Spec.Hostname != m.Node {
				t.Errorf("hostname = %q", vm.Spec.Template.Spec.Hostname)
			}
			tt.check(t, vm)
		})
	}
}

func TestBuildSecretAndGolden(t *testing.T) {
	spec := testSpec()
	o := testOptions()
	m := spec.Machines[1]
	s := BuildSecret(spec, m, o)
	if s.Name != "ocp4-x7k2p-master-0-ignition" || s.Namespace != "ocp" || !bytes.Equal(s.Data["userdata"], m.Ignition) {
		t.Errorf("secret = %s/%s %q", s.Namespace, s.Name, s.Data["userdata"])
	}
	if s.Labels[LabelInfraID] != testInfraID || s.Labels[LabelNode] != "master-0" || len(s.Annotations[AnnotationIgnitionSHA256]) != 64 {
		t.Errorf("secret metadata = %v %v", s.Labels, s.Annotations)
	}

	dv := BuildGoldenDataVolume(spec, o, 17)
	if dv.Name != "ocp4-x7k2p-rhcos" || dv.Labels[LabelInfraID] != testInfraID {
		t.Errorf("golden = %s %v", dv.Name, dv.Labels)
	}
	if dv.Spec.Source.HTTP == nil || dv.Spec.Source.HTTP.URL != spec.Image.URL {
		t.Errorf("golden source = %+v", dv.Spec.Source)
	}
	if q := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]; q.String() != "17Gi" {
		t.Errorf("golden size = %s", q.String())
	}
	if dv.Annotations[annBindImmediate] != "true" || dv.Annotations[AnnotationImageSHA256] != "ab12cd34" {
		t.Errorf("golden annotations = %v", dv.Annotations)
	}
	if _, err := yaml.Marshal(dv); err != nil {
		t.Fatal(err)
	}
	var _ *cdiv1.DataVolume = dv
}

func TestCheckMachine(t *testing.T) {
	ok := testSpec().Machines[1]
	tests := []struct {
		name    string
		infraID string
		mut     func(*platform.Machine)
		opts    func(*Options, *platform.Spec)
		want    string // substring of the error, "" for none
	}{
		{"valid", testInfraID, nil, nil, ""},
		{"empty infra id", "", nil, nil, "infra ID"},
		{"upper-case name", testInfraID, func(m *platform.Machine) { m.Name = "OCP-Master" }, nil, "OCP-Master"},
		{"name too long for suffixes", testInfraID, func(m *platform.Machine) { m.Name = strings.Repeat("a", 60) }, nil, "node master-0"},
		{"bad node", testInfraID, func(m *platform.Machine) { m.Node = "master_0" }, nil, "master_0"},
		{"no cpus", testInfraID, func(m *platform.Machine) { m.CPUs = 0 }, nil, "cpus 0"},
		{"no disk", testInfraID, func(m *platform.Machine) { m.DiskGiB = 0 }, nil, "diskGiB 0"},
		{"no disk with ephemeral container disk", testInfraID, func(m *platform.Machine) { m.DiskGiB = 0 }, func(o *Options, s *platform.Spec) {
			o.EphemeralContainerDisk = true
			s.Image.ContainerDisk = "quay.io/x/y"
		}, ""},
		{"no mac", testInfraID, func(m *platform.Machine) { m.MAC = nil }, nil, "MAC"},
		{"ignition over secret limit", testInfraID, func(m *platform.Machine) { m.Ignition = make([]byte, 1<<20+1) }, nil, "assets/master.ign"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := testSpec()
			spec.InfraID = tt.infraID
			m := ok
			if tt.mut != nil {
				tt.mut(&m)
			}
			o := testOptions()
			if tt.opts != nil {
				tt.opts(&o, spec)
			}
			err := checkMachine(spec, m, o)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}
