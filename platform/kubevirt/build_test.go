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

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		o    Options
		want string
	}{
		{Options{Network: "machine-net"}, ""},
		{Options{Network: "ocp/machine-net", Namespace: "ocp", RunStrategy: kubevirtv1.RunStrategyRerunOnFailure}, ""},
		{Options{}, "network: empty"},
		{Options{Network: "a/b/c"}, "a/b/c"},
		{Options{Network: "Bad_NS/x"}, "namespace"},
		{Options{Network: "x", Namespace: "Not_OK"}, "namespace \"Not_OK\""},
		{Options{Network: "x", RunStrategy: kubevirtv1.RunStrategyManual}, "runStrategy"},
		{Options{Network: "x", ImageDiskGiB: -1}, "imageDiskGiB"},
	}
	for _, tt := range tests {
		err := tt.o.validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", tt.o, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%+v: error %v, want one mentioning %q", tt.o, err, tt.want)
		}
	}
}

// qcow2Header is the first 32 bytes of a qcow2 v3 image of size bytes.
func qcow2Header(size uint64) []byte {
	h := make([]byte, 32)
	copy(h, "QFI\xfb")
	h[7] = 3
	for i := 0; i < 8; i++ {
		h[31-i] = byte(size >> (8 * i))
	}
	return h
}

func TestGoldenSize(t *testing.T) {
	dir := t.TempDir()
	q := filepath.Join(dir, "rhcos.qcow2")
	if err := os.WriteFile(q, qcow2Header(16<<30), 0o644); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.qcow2")
	if err := os.WriteFile(junk, []byte("not an image at all, but long enough to read"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		img  platform.Image
		opt  int
		want int
	}{
		{"qcow2 header", platform.Image{Path: q, Format: "qcow2"}, 0, 17},
		{"option wins", platform.Image{Path: q, Format: "qcow2"}, 40, 40},
		{"raw size rounds up", platform.Image{Format: "raw", Size: 10<<30 + 1}, 0, 12},
		{"unreadable qcow2", platform.Image{Path: junk, Format: "qcow2"}, 0, 17},
		{"missing file", platform.Image{Path: filepath.Join(dir, "none"), Format: "qcow2"}, 0, 17},
		{"URL only", platform.Image{URL: "https://x/rhcos.qcow2"}, 0, 17},
	}
	for _, tt := range tests {
		spec := &platform.Spec{Image: tt.img}
		if got := goldenSizeGiB(spec, Options{ImageDiskGiB: tt.opt}); got != tt.want {
			t.Errorf("%s: %d GiB, want %d", tt.name, got, tt.want)
		}
	}
}

func FuzzQcow2VirtualSize(f *testing.F) {
	f.Add(qcow2Header(16 << 30))
	f.Add([]byte("QFI\xfb"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := qcow2VirtualSize(b)
		if err == nil && (n <= 0 || n > 1<<50) {
			t.Fatalf("size %d accepted", n)
		}
	})
}

func TestPowerAndStatus(t *testing.T) {
	halted, always := kubevirtv1.RunStrategyHalted, kubevirtv1.RunStrategyAlways
	tests := []struct {
		printable kubevirtv1.VirtualMachinePrintableStatus
		rs        *kubevirtv1.VirtualMachineRunStrategy
		want      platform.Power
	}{
		{kubevirtv1.VirtualMachineStatusRunning, &always, platform.PowerRunning},
		{kubevirtv1.VirtualMachineStatusStopped, &halted, platform.PowerStopped},
		{kubevirtv1.VirtualMachineStatusPaused, &always, platform.PowerPaused},
		{kubevirtv1.VirtualMachineStatusProvisioning, &always, platform.PowerStarting},
		{kubevirtv1.VirtualMachineStatusCrashLoopBackOff, &always, platform.PowerUnknown},
		{"", &halted, platform.PowerStopped},
		{"", &always, platform.PowerStarting},
	}
	for _, tt := range tests {
		vm := &kubevirtv1.VirtualMachine{}
		vm.Spec.RunStrategy = tt.rs
		vm.Status.PrintableStatus = tt.printable
		if got := power(vm); got != tt.want {
			t.Errorf("%q/%s: %s, want %s", tt.printable, *tt.rs, got, tt.want)
		}
	}

	spec := testSpec()
	vm := BuildVirtualMachine(spec, spec.Machines[1], testOptions())
	vmi := &kubevirtv1.VirtualMachineInstance{}
	vmi.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{
		{Name: "nic0", IP: "192.168.126.10", IPs: []string{"192.168.126.10", "fd00::10/64", "junk"}},
		{Name: "other", IPs: []string{"10.0.0.1"}},
	}
	v := vmStatus(vm, vmi, map[string]bool{"ocp4-x7k2p-master-0-ignition": true})
	if v.Node != "master-0" || v.MAC.String() != "52:54:00:7e:00:10" || !v.Complete || v.Power != platform.PowerStopped {
		t.Errorf("status = %+v", v)
	}
	if len(v.Addresses) != 2 || v.Addresses[0].String() != "192.168.126.10" || v.Addresses[1].String() != "fd00::10" {
		t.Errorf("addresses = %v", v.Addresses)
	}
	if v := vmStatus(vm, nil, nil); v.Complete || len(v.Addresses) != 0 {
		t.Errorf("without secret/instance: %+v", v)
	}
}
