package provision

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"appliance/internal/cluster"
	"appliance/platform"
	"appliance/platform/kubevirt"
	"appliance/platform/libvirt"
	"appliance/platform/ovirt"
)

// TestProvisionControlPlaneUp: destroy --bootstrap waits until every
// master's VM exists and runs, and names each one that does not, with its
// state; a VM is a master's by the node its mark records, or by name.
func TestProvisionControlPlaneUp(t *testing.T) {
	masters := []string{"master-0", "master-1", "master-2"}
	vm := func(node string, p platform.Power) platform.VM {
		return platform.VM{Name: "ocp4-x7k2p-" + node, Node: node, Power: p, Complete: true}
	}
	running := []platform.VM{vm("bootstrap", platform.PowerRunning), vm("master-0", platform.PowerRunning), vm("master-1", platform.PowerRunning), vm("master-2", platform.PowerRunning)}
	for _, c := range []struct {
		name    string
		vms     []platform.VM
		masters []string
		want    []string // "" when up
	}{
		{"all running", running, masters, nil},
		{"no masters in the config", nil, nil, nil},
		{"marked by name only", []platform.VM{{Name: "ocp4-x7k2p-master-0", Power: platform.PowerRunning}}, []string{"master-0"}, nil},
		{"one starting", []platform.VM{vm("master-0", platform.PowerRunning), vm("master-1", platform.PowerRunning), vm("master-2", platform.PowerStarting)}, masters,
			[]string{"master-2 (starting)"}},
		{"absent and stopped", []platform.VM{vm("bootstrap", platform.PowerRunning), vm("master-1", platform.PowerStopped)}, masters,
			[]string{"master-0 (absent)", "master-1 (stopped)", "master-2 (absent)"}},
		{"another cluster's name", []platform.VM{{Name: "other-master-0", Power: platform.PowerRunning}}, []string{"master-0"}, []string{"master-0 (absent)"}},
	} {
		err := controlPlaneUp(c.vms, "ocp4-x7k2p", c.masters)
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v, want the control plane up", c.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "control plane is not up") || !strings.Contains(err.Error(), ": "+strings.Join(c.want, ", ")+";") ||
			!strings.Contains(err.Error(), "openshift-install wait-for bootstrap-complete") {
			t.Errorf("%s: %v, want it to name %v", c.name, err, c.want)
		}
	}
}

func TestProvisionBootstrapAndMasters(t *testing.T) {
	cfg := &cluster.Config{Nodes: []cluster.Node{
		{Name: "master-1", Role: cluster.RoleMaster}, {Name: "bootstrap", Role: cluster.RoleBootstrap},
		{Name: "worker-0", Role: cluster.RoleWorker}, {Name: "master-0", Role: cluster.RoleMaster},
	}}
	boots, masters := bootstrapAndMasters(cfg)
	if fmt.Sprint(boots, masters) != "[bootstrap] [master-1 master-0]" {
		t.Errorf("bootstrap %v, masters %v", boots, masters)
	}
	if boots, _ := bootstrapAndMasters(&cluster.Config{Nodes: cfg.Nodes[2:]}); boots != nil {
		t.Errorf("bootstrap nodes %v in a config with none", boots)
	}
}

func TestProvisionParallelism(t *testing.T) {
	p := &cluster.Provision{Parallel: 3}
	for flag, want := range map[int]int{0: 3, 1: 1, 16: 16} {
		if got := parallelism(p, flag); got != want {
			t.Errorf("--parallel %d with provision.parallel 3: %d, want %d", flag, got, want)
		}
	}
}

// TestProvisionApplyWaitNoStart: --wait and --no-start contradict each other,
// refused before anything is prepared or asked of the platform.
func TestProvisionApplyWaitNoStart(t *testing.T) {
	s := &Session{} // no config, no platform: nothing may be touched
	_, err := s.Apply(context.Background(), ApplyOptions{Wait: 1, NoStart: true}, func(e Event) { t.Errorf("event %#v", e) })
	if err == nil || !strings.Contains(err.Error(), "--wait") || !strings.Contains(err.Error(), "--no-start") {
		t.Errorf("--wait with --no-start: %v", err)
	}
}

// TestProvisionOpenRefuses: a config without a provision section names the
// file; a run that builds needs the assets.
func TestProvisionOpenRefuses(t *testing.T) {
	_, err := Open(context.Background(), Options{Config: &cluster.Config{}, ConfigPath: "/etc/appliance.yaml"}, nil)
	if err == nil || !strings.Contains(err.Error(), "/etc/appliance.yaml has no provision section") || !strings.Contains(err.Error(), "platform: libvirt") {
		t.Errorf("no provision section: %v", err)
	}
	cfg := &cluster.Config{Provision: &cluster.Provision{Platform: cluster.PlatformLibvirt}}
	_, err = Open(context.Background(), Options{Config: cfg, NeedAssets: true}, nil)
	if err == nil || !strings.Contains(err.Error(), "give --assets DIR") {
		t.Errorf("no assets: %v", err)
	}
}

// TestProvisionBareSpec: without the assets a run knows the infra ID from
// provision.infraID, else the cluster name (platform.InfraID's rule).
func TestProvisionBareSpec(t *testing.T) {
	cfg := &cluster.Config{Cluster: cluster.Cluster{Name: "ocp4", BaseDomain: "example.com"}, Provision: &cluster.Provision{}}
	if s := bareSpec(cfg); s.InfraID != "ocp4" || s.ClusterName != "ocp4" || s.BaseDomain != "example.com" || len(s.Machines) != 0 {
		t.Errorf("spec %+v", s)
	}
	cfg.Provision.InfraID = "ocp4-x7k2p"
	if s := bareSpec(cfg); s.InfraID != "ocp4-x7k2p" {
		t.Errorf("infra ID %q, want provision.infraID", s.InfraID)
	}
}

func TestProvisionWhere(t *testing.T) {
	for _, c := range []struct {
		p    cluster.Provision
		want string
	}{
		{cluster.Provision{Platform: cluster.PlatformLibvirt, Libvirt: cluster.LibvirtPlatform{URI: "qemu:///system", Pool: "default"}}, "libvirt (qemu:///system, pool default)"},
		{cluster.Provision{Platform: cluster.PlatformOVirt, OVirt: cluster.OVirtPlatform{ClusterID: "c1"}}, "ovirt (cluster c1)"},
		{cluster.Provision{Platform: cluster.PlatformKubeVirt, KubeVirt: cluster.KubeVirtPlatform{Namespace: "ocp"}}, "kubevirt (namespace ocp)"},
		{cluster.Provision{Platform: "vsphere"}, "vsphere"},
	} {
		if got := Where(&c.p); got != c.want {
			t.Errorf("Where(%s) = %q, want %q", c.p.Platform, got, c.want)
		}
	}
}

// TestProvisionProviderOptions: each provider gets appliance.yaml's fields;
// oVirt's engine and credentials come from the credentials file named in
// appliance.yaml, else ovirt-config.yaml where the oVirt tools keep it,
// else the environment alone, and OVIRT_* override the file field by field.
func TestProvisionProviderOptions(t *testing.T) {
	p := &cluster.Provision{Parallel: 5,
		Libvirt:  cluster.LibvirtPlatform{URI: "qemu+tcp://h/system", Socket: "/s", Pool: "p", Network: "n", Bridge: "b", DomainType: "qemu", Machine: "q35", Firmware: "efi"},
		KubeVirt: cluster.KubeVirtPlatform{Kubeconfig: "/kc", Context: "ctx", Namespace: "ns", Network: "ns/net", StorageClass: "fast"},
	}
	if got, want := libvirtOptions(p), (libvirt.Options{URI: "qemu+tcp://h/system", Socket: "/s", Pool: "p", Network: "n", Bridge: "b", DomainType: "qemu", Machine: "q35", Firmware: "efi"}); got != want {
		t.Errorf("libvirt options %+v\nwant %+v", got, want)
	}
	if got, want := kubevirtOptions(p), (kubevirt.Options{Kubeconfig: "/kc", Context: "ctx", Namespace: "ns", Network: "ns/net", StorageClass: "fast", Parallel: 5}); fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("kubevirt options %+v\nwant %+v", got, want)
	}

	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".ovirt"), 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(path, url string) string {
		doc := fmt.Sprintf("ovirt_url: %s\novirt_username: admin@internal\novirt_password: secret\n", url)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	named := write(filepath.Join(t.TempDir(), "creds.yaml"), "https://named.example.com/ovirt-engine/api")
	envOf := func(kv ...string) func(string) string {
		m := map[string]string{"HOME": home}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	envOnly := envOf(ovirt.EnvURL, "https://env.example.com/ovirt-engine/api", ovirt.EnvUsername, "env@internal", ovirt.EnvPassword, "pw")
	for _, c := range []struct {
		name      string
		o         cluster.OVirtPlatform
		home      bool // ~/.ovirt/ovirt-config.yaml exists
		env       func(string) string
		url, user string
		insecure  bool
		affinity  ovirt.Affinity
		err       string
	}{
		{name: "environment alone", env: envOnly, url: "https://env.example.com/ovirt-engine/api", user: "env@internal"},
		{name: "home file", home: true, env: envOf(), url: "https://home.example.com/ovirt-engine/api", user: "admin@internal"},
		{name: "home file, environment overrides", home: true, env: envOf(ovirt.EnvURL, "https://env.example.com/ovirt-engine/api"),
			url: "https://env.example.com/ovirt-engine/api", user: "admin@internal"},
		{name: "named file over the home file", home: true, o: cluster.OVirtPlatform{CredentialsFile: named}, env: envOf(),
			url: "https://named.example.com/ovirt-engine/api", user: "admin@internal"},
		{name: "insecure and soft", o: cluster.OVirtPlatform{Insecure: true, Affinity: "soft", ClusterID: "c", StorageDomainID: "s", VNICProfileID: "v"}, env: envOnly,
			url: "https://env.example.com/ovirt-engine/api", user: "env@internal", insecure: true, affinity: ovirt.Affinity{Soft: true}},
		{name: "no affinity", o: cluster.OVirtPlatform{Affinity: "none"}, env: envOnly,
			url: "https://env.example.com/ovirt-engine/api", user: "env@internal", affinity: ovirt.Affinity{Disabled: true}},
		{name: "nothing anywhere", env: envOf(), err: "ovirt: credentials from environment"},
		{name: "named file missing", o: cluster.OVirtPlatform{CredentialsFile: filepath.Join(home, "nope.yaml")}, env: envOnly, err: "nope.yaml"},
	} {
		homeFile := filepath.Join(home, ".ovirt", "ovirt-config.yaml")
		os.Remove(homeFile)
		if c.home {
			write(homeFile, "https://home.example.com/ovirt-engine/api")
		}
		o, err := ovirtOptions(&cluster.Provision{OVirt: c.o}, c.env)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: %v, want an error naming %q (and no password)", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if o.Credentials.URL != c.url || o.Credentials.Username != c.user || o.Credentials.Insecure != c.insecure || o.Affinity != c.affinity ||
			o.ClusterID != c.o.ClusterID || o.StorageDomainID != c.o.StorageDomainID || o.VNICProfileID != c.o.VNICProfileID {
			t.Errorf("%s: %+v", c.name, o)
		}
	}
}

// TestProvisionImageSource: where the base image comes from. A container
// disk or a local file is used as given; KubeVirt imports a URL itself,
// recognised by the digest from appliance.yaml; anything else is
// downloaded into the cache once, its bytes reported, and found there
// after. plan says which, in words.
func TestProvisionImageSource(t *testing.T) {
	ctx := context.Background()
	var events []Event
	emit := func(e Event) { events = append(events, e) }
	sum := strings.Repeat("ab", 32)

	kv := &cluster.Provision{Platform: cluster.PlatformKubeVirt, Image: cluster.ProvisionImage{ContainerDisk: "quay.io/rhcos:4.16"}}
	if img, err := fetchImage(ctx, kv, emit, nil); err != nil || img != (platform.Image{ContainerDisk: "quay.io/rhcos:4.16", Flavor: platform.FlavorOpenStack}) {
		t.Errorf("container disk: %+v %v", img, err)
	}
	if got := describeImage(ctx, kv, nil); got != "container disk quay.io/rhcos:4.16" {
		t.Errorf("container disk described as %q", got)
	}
	kv.Image = cluster.ProvisionImage{URL: "https://images.example.test/rhcos-kubevirt.x86_64.qcow2", SHA256: sum}
	img, err := fetchImage(ctx, kv, emit, nil)
	if err != nil || img.URL != kv.Image.URL || img.SHA256 != sum || img.Path != "" || img.Flavor != platform.FlavorOpenStack {
		t.Errorf("KubeVirt import: %+v %v", img, err)
	}
	if got := describeImage(ctx, kv, nil); got != kv.Image.URL+" (imported by the cluster)" {
		t.Errorf("KubeVirt import described as %q", got)
	}

	disk := filepath.Join(t.TempDir(), "rhcos.raw")
	if err := os.WriteFile(disk, []byte("a disk"), 0o600); err != nil {
		t.Fatal(err)
	}
	lv := &cluster.Provision{Platform: cluster.PlatformLibvirt, Image: cluster.ProvisionImage{File: disk}}
	if img, err := fetchImage(ctx, lv, emit, nil); err != nil || img.Path != disk || img.Format != "raw" || img.Flavor != platform.FlavorQEMU || img.Size != 6 {
		t.Errorf("local file: %+v %v", img, err)
	}
	if got := describeImage(ctx, lv, nil); got != "local file "+disk {
		t.Errorf("local file described as %q", got)
	}
	lv.Image.SHA256 = sum
	if _, err := fetchImage(ctx, lv, emit, nil); err == nil || !strings.HasPrefix(err.Error(), "provision.image.file: ") || !strings.Contains(err.Error(), "sha256 mismatch") {
		t.Errorf("local file with another digest: %v", err)
	}
	if len(events) != 0 {
		t.Errorf("no download, yet events %v", events)
	}

	body := []byte(strings.Repeat("qcow", 1<<14))
	h := sha256.Sum256(body)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(body) }))
	defer srv.Close()
	lv.Image = cluster.ProvisionImage{URL: srv.URL + "/rhcos-qemu.x86_64.qcow2", SHA256: hex.EncodeToString(h[:]), CacheDir: t.TempDir()}
	log := testLog(t)
	if got := describeImage(ctx, lv, log); !strings.HasPrefix(got, lv.Image.URL+", not cached yet: apply downloads it to "+lv.Image.CacheDir) {
		t.Errorf("before the download: %q", got)
	}
	img, err = fetchImage(ctx, lv, emit, log)
	if err != nil || img.SHA256 != hex.EncodeToString(h[:]) || img.Size != int64(len(body)) || !strings.HasPrefix(img.Path, lv.Image.CacheDir) {
		t.Fatalf("download: %+v %v", img, err)
	}
	last, ok := events[len(events)-1].(ImageDownloaded)
	if !ok || last.Err != nil || len(events) < 2 {
		t.Errorf("download events %v, want the bytes then the end", events)
	}
	if d, ok := events[len(events)-2].(ImageDownload); !ok || d.Done != int64(len(body)) {
		t.Errorf("last byte count %#v, want all %d", events[len(events)-2], len(body))
	}
	if got := describeImage(ctx, lv, log); got != lv.Image.URL+", cached at "+img.Path {
		t.Errorf("after the download: %q", got)
	}
	events = nil
	if again, err := fetchImage(ctx, lv, emit, log); err != nil || again.Path != img.Path || len(events) != 1 {
		t.Errorf("a cached image: %+v %v, events %v (want only the end)", again, err, events)
	}
}
