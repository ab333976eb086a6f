//go:build bench

package kubevirt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"appliance/internal/apptest"
	"appliance/internal/cluster"
	"appliance/platform"
)

// TestBenchProvisionKubeVirt times `appliance provision apply` and
// `destroy` of 1 bootstrap + 3 masters + 50 workers against the shared
// kube-apiserver (KubeVirt's and CDI's CRDs, the garbage collector
// running), beside `kubectl create -f` and `kubectl delete -f` of the very
// same 109 objects (54 VMs as apply leaves them, 54 Ignition Secrets, the
// golden DataVolume) in another namespace. Both are whole processes
// started from the shell's point of view: kubeconfig, discovery, requests.
// Rounds alternate which tool goes first.
func TestBenchProvisionKubeVirt(t *testing.T) {
	needAPI(t)
	const workers, rounds = 50, 5
	dir := t.TempDir()
	bin := apptest.Build(t)
	kubectl := filepath.Join(kube.assets, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("no kubectl beside the server binaries: %v", err)
	}

	nsApp, nsKubectl := newNamespace(t), newNamespace(t)
	cfgPath, assets := benchCluster(t, dir, nsApp, workers)
	manifest := benchManifest(t, dir, cfgPath, assets, nsKubectl)

	run := func(name string, args ...string) (time.Duration, string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		d := time.Since(start)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out.String())
		}
		return d, out.String()
	}
	app := func(sub string) (time.Duration, string) {
		return run(bin, "--log-format", "json", "provision", "--config", cfgPath, "--assets", assets, sub)
	}
	kc := func(verb string, more ...string) (time.Duration, string) {
		return run(kubectl, append([]string{"--kubeconfig", kube.kubeconfig, verb, "-f", manifest}, more...)...)
	}
	count := func(ns string) int {
		var vms kubevirtv1.VirtualMachineList
		if err := kube.c.List(context.Background(), &vms, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		return len(vms.Items)
	}

	var appApply, appDestroy, kcCreate, kcDelete, kcDeleteNoWait []time.Duration
	for i := range rounds {
		steps := []func(){
			func() {
				d, out := app("apply")
				if !strings.Contains(out, fmt.Sprintf("%d created, 0 completed, 0 already there, %d started", 4+workers, 4+workers)) {
					t.Fatalf("apply output:\n%s", out)
				}
				checkJSONLog(t, out)
				appApply = append(appApply, d)
			},
			func() { d, _ := kc("create"); kcCreate = append(kcCreate, d) },
		}
		if i%2 == 1 {
			slices.Reverse(steps)
		}
		for _, s := range steps {
			s()
		}
		if a, k := count(nsApp), count(nsKubectl); a != 4+workers || k != 4+workers {
			t.Fatalf("VMs after create: appliance %d, kubectl %d", a, k)
		}
		steps = []func(){
			func() { d, out := app("destroy"); checkJSONLog(t, out); appDestroy = append(appDestroy, d) },
			func() { d, _ := kc("delete"); kcDelete = append(kcDelete, d) },
		}
		if i%2 == 1 {
			slices.Reverse(steps)
		}
		for _, s := range steps {
			s()
		}
		if a, k := count(nsApp), count(nsKubectl); a != 0 || k != 0 {
			t.Fatalf("VMs after delete: appliance %d, kubectl %d", a, k)
		}
		// kubectl delete's own wait checks one object every 200 ms; the
		// deletes alone, for reference:
		kc("create")
		d, _ := kc("delete", "--wait=false")
		kcDeleteNoWait = append(kcDeleteNoWait, d)
		for end := time.Now().Add(time.Minute); count(nsKubectl) > 0 && time.Now().Before(end); {
			time.Sleep(100 * time.Millisecond)
		}
	}
	med := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	span := func(ds []time.Duration) string {
		s := slices.Clone(ds)
		slices.Sort(s)
		return fmt.Sprintf("%s–%s", s[0].Round(10*time.Millisecond), s[len(s)-1].Round(10*time.Millisecond))
	}
	row := func(what string, a, k []time.Duration) string {
		return fmt.Sprintf("| %s | %s (%s) | %s (%s) | %.2fx |\n", what, med(a).Round(10*time.Millisecond), span(a),
			med(k).Round(10*time.Millisecond), span(k), float64(med(a))/float64(med(k)))
	}
	t.Logf("KubeVirt provisioning, 1+3+%d VMs (109 objects), median (range) of %d rounds:\n"+
		"| step | appliance | kubectl | appliance / kubectl |\n|---|---|---|---|\n%s%s%s",
		workers, rounds, row("apply / kubectl create -f", appApply, kcCreate), row("destroy / kubectl delete -f", appDestroy, kcDelete),
		row("destroy / kubectl delete -f --wait=false", appDestroy, kcDeleteNoWait))
}

// checkJSONLog fails when a line of a --log-format json run is not JSON
// (client-go's klog writes text unless routed through slog). Lines that
// are the command's own table and progress output start with a space,
// a digit or a capital and carry no '{'.
func checkJSONLog(t *testing.T, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "{") {
			if strings.Contains(line, "] ") && (strings.HasPrefix(line, "I1") || strings.HasPrefix(line, "W1") || strings.HasPrefix(line, "E1")) {
				t.Errorf("a klog text line in the JSON log: %s", line)
			}
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Errorf("not JSON: %s", line)
		}
	}
}

// benchCluster writes appliance.yaml (KubeVirt in ns) and the installer's
// assets for 1+3+workers nodes.
func benchCluster(t *testing.T, dir, ns string, workers int) (cfgPath, assets string) {
	t.Helper()
	assets = filepath.Join(dir, "assets")
	if err := os.Mkdir(assets, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(path, data string) {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, role := range []string{"bootstrap", "master", "worker"} {
		write(filepath.Join(assets, role+".ign"), fmt.Sprintf(`{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/role","contents":{"source":"data:,%s"}}]}}`, role))
	}
	write(filepath.Join(assets, "metadata.json"), `{"clusterName":"bench","infraID":"bench-x7k2p"}`)
	var nodes strings.Builder
	fmt.Fprintf(&nodes, "- {name: bootstrap, role: bootstrap, ips: [192.168.126.9]}\n")
	for i := range 3 {
		fmt.Fprintf(&nodes, "- {name: master-%d, role: master, ips: [192.168.126.%d]}\n", i, 10+i)
	}
	for i := range workers {
		fmt.Fprintf(&nodes, "- {name: worker-%d, role: worker, ips: [192.168.126.%d]}\n", i, 20+i)
	}
	cfgPath = filepath.Join(dir, "appliance.yaml")
	write(cfgPath, fmt.Sprintf(`
cluster: {name: bench, baseDomain: example.test}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}
nodes:
%sprovision:
  platform: kubevirt
  image: {url: "https://images.example.test/rhcos-kubevirt.x86_64.qcow2", sha256: %s}
  kubevirt: {kubeconfig: %s, namespace: %s, network: machine-net, storageClass: fast}
`, nodes.String(), strings.Repeat("ab", 32), kube.kubeconfig, ns))
	return cfgPath, assets
}

// benchManifest writes, for kubectl, the objects apply leaves behind (VMs
// with their run strategy set), built by the same code from the same
// files, in namespace ns.
func benchManifest(t *testing.T, dir, cfgPath, assetDir, ns string) string {
	t.Helper()
	cfg, err := cluster.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	assets, err := platform.LoadAssets(assetDir, platform.Roles(cfg))
	if err != nil {
		t.Fatal(err)
	}
	img := platform.Image{URL: cfg.Provision.Image.URL, SHA256: cfg.Provision.Image.SHA256, Format: "qcow2"}
	spec, err := platform.BuildSpec(cfg, assets, img)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Namespace: ns, Network: "machine-net", StorageClass: "fast"}.withDefaults()
	var docs [][]byte
	add := func(o any) {
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	add(BuildGoldenDataVolume(spec, opts, goldenSizeGiB(spec, opts)))
	for _, m := range spec.Machines {
		add(BuildSecret(spec, m, opts))
		vm := BuildVirtualMachine(spec, m, opts)
		vm.Spec.RunStrategy = &opts.RunStrategy
		add(vm)
	}
	path := filepath.Join(dir, "objects.yaml")
	if err := os.WriteFile(path, bytes.Join(docs, []byte("---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
