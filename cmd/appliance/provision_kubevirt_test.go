package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/bootstrap"
	"appliance/platform/kubevirt"
	"appliance/platform/kubevirt/kubevirttest"
)

// TestProvisionKubeVirtCommand runs `appliance provision` against a real
// kube-apiserver with KubeVirt's and CDI's CRDs and reads what it prints:
// refusals before anything is made, an apply whose summary counts what
// exists, --wait naming the VMs KubeVirt never ran, one JSON log, destroy
// --bootstrap and destroy. What the runs do (the image's digest, a config
// served until the VM fetches it) is app/provision's TestProvisionKubeVirt.
func TestProvisionKubeVirtCommand(t *testing.T) {
	srv, skip, err := kubevirttest.Start(true)
	t.Cleanup(srv.Stop)
	if err != nil {
		t.Fatal(err)
	}
	if srv == nil {
		kubevirttest.Skip(t, skip)
	}
	ns := srv.Namespace(t)
	ctx := context.Background()

	dir := t.TempDir()
	assets := filepath.Join(dir, "assets")
	if err := os.Mkdir(assets, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"bootstrap", "master", "worker"} {
		if err := writeFileAt(filepath.Join(assets, role+".ign"), `{"ignition":{"version":"3.2.0"}}`); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeFileAt(filepath.Join(assets, "metadata.json"), `{"clusterName":"kv","infraID":"kv-x7k2p"}`); err != nil {
		t.Fatal(err)
	}
	config := func(name, namespace, network, storageClass string) string {
		path := filepath.Join(dir, name)
		if err := writeFileAt(path, fmt.Sprintf(`
cluster: {name: kv, baseDomain: example.test}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}
nodes:
- {name: bootstrap, role: bootstrap, ips: [192.168.126.9]}
- {name: master-0, role: master, ips: [192.168.126.10]}
- {name: master-1, role: master, ips: [192.168.126.11]}
- {name: master-2, role: master, ips: [192.168.126.12]}
- {name: worker-0, role: worker, ips: [192.168.126.20]}
- {name: worker-1, role: worker, ips: [192.168.126.21]}
provision:
  platform: kubevirt
  image: {url: "https://images.example.test/rhcos-kubevirt.x86_64.qcow2", sha256: %s}
  kubevirt: {kubeconfig: %s, namespace: %s, network: %s, storageClass: %s}
`, strings.Repeat("ab", 32), srv.Kubeconfig, namespace, network, storageClass)); err != nil {
			t.Fatal(err)
		}
		return path
	}
	ours := func() []string {
		var vms kubevirtv1.VirtualMachineList
		var secrets corev1.SecretList
		var names []string
		for _, l := range []client.ObjectList{&vms, &secrets} {
			if err := srv.Client.List(ctx, l, client.MatchingLabels{kubevirt.LabelInfraID: "kv-x7k2p"}); err != nil {
				t.Fatal(err)
			}
		}
		for _, v := range vms.Items {
			names = append(names, v.Namespace+"/"+v.Name)
		}
		for _, s := range secrets.Items {
			names = append(names, s.Namespace+"/"+s.Name)
		}
		return names
	}

	// Everything wrong at once: each named, nothing created.
	bad := config("bad.yaml", "nope-"+ns, "default/no-such-net", "slow")
	out, err := runCmd(t, "provision", "--config", bad, "--assets", assets, "plan")
	for _, want := range []string{"apply would fail", `namespace "nope-` + ns + `" not found`, "NetworkAttachmentDefinition default/no-such-net not found", `StorageClass "slow" not found`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("plan error lacks %q: %v", want, err)
		}
	}
	if !strings.Contains(out, "6 to create, 0 to complete, 0 exist.") {
		t.Errorf("plan output:\n%s", out)
	}
	out, err = runCmd(t, "provision", "--config", bad, "--assets", assets, "apply", "--image", testImageRef)
	if err == nil || !strings.Contains(err.Error(), "nothing created") || strings.Contains(out, "created,") {
		t.Errorf("apply with refusals: %v\n%s", err, out)
	}
	if left := ours(); len(left) != 0 {
		t.Fatalf("a refused apply made %v", left)
	}

	// A good apply, as a process with a JSON log; KubeVirt is not there to
	// run the VMs, so --wait ends by naming them.
	good := config("good.yaml", ns, "machine-net", kubevirttest.StorageClass)
	cmd := exec.Command(selfExe(t), "--log-format", "json", "provision", "--config", good, "--assets", assets, "apply", "--image", testImageRef, "--wait", "3s")
	cmd.Env = append(os.Environ(), envRunMain+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err == nil {
		t.Fatalf("apply --wait succeeded with no KubeVirt to run the VMs:\n%s\n%s", stdout.String(), stderr.String())
	}
	for _, want := range []string{"6 created, 0 completed, 0 already there, 6 started", "waiting up to 3s for every VM to run"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("apply output lacks %q:\n%s", want, stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), "6 of 6 VMs not running with their addresses") || !strings.Contains(stderr.String(), "kv-x7k2p-worker-1 (starting)") {
		t.Errorf("apply --wait error:\n%s", stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if strings.HasPrefix(line, "appliance: ") || strings.HasPrefix(line, "run 'appliance") || strings.HasPrefix(line, "'appliance provision status'") {
			continue // main's error, its lines
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Errorf("a line of the JSON log is not JSON: %s", line)
		}
	}
	if n := len(ours()); n != 12 {
		t.Errorf("%d objects after apply, want 6 VMs and 6 Secrets", n)
	}
	// Each VM boots its asset with the appliance put in (--image).
	for _, node := range []string{"bootstrap", "master-0", "worker-1"} {
		sec := &corev1.Secret{}
		if err := srv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kv-x7k2p-" + node + "-ignition"}, sec); err != nil {
			t.Fatal(err)
		}
		if ud := sec.Data["userdata"]; !bytes.Contains(ud, []byte(`"path":"`+bootstrap.StaticPodPath+`"`)) {
			t.Errorf("%s's Ignition (%d bytes) lacks the appliance's static pod", node, len(ud))
		}
	}

	out, err = runCmd(t, "provision", "--config", good, "--assets", assets, "status")
	if err != nil || strings.Count(out, "starting") != 6 {
		t.Errorf("status: %v\n%s", err, out)
	}

	// destroy --bootstrap waits for the control plane: refused while the
	// masters only start, done once they run; then only the bootstrap's
	// VM and Secret are gone.
	out, err = runCmd(t, "provision", "--config", good, "--assets", assets, "destroy", "--bootstrap")
	if err == nil || !strings.Contains(err.Error(), "control plane is not up") || !strings.Contains(err.Error(), "master-2 (starting)") || len(ours()) != 12 {
		t.Errorf("destroy --bootstrap before the masters run: %v\n%s", err, out)
	}
	for _, m := range []string{"master-0", "master-1", "master-2"} {
		vm := &kubevirtv1.VirtualMachine{}
		if err := srv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kv-x7k2p-" + m}, vm); err != nil {
			t.Fatal(err)
		}
		vm.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusRunning
		if err := srv.Client.Status().Update(ctx, vm); err != nil {
			t.Fatal(err)
		}
	}
	out, err = runCmd(t, "provision", "--config", good, "--assets", assets, "destroy", "--bootstrap")
	if err != nil || !strings.Contains(out, "removed virtualmachine "+ns+"/kv-x7k2p-bootstrap") || !strings.Contains(out, "removed secret "+ns+"/kv-x7k2p-bootstrap-ignition") {
		t.Errorf("destroy --bootstrap: %v\n%s", err, out)
	}
	if left := ours(); len(left) != 10 || strings.Contains(strings.Join(left, " "), "bootstrap") {
		t.Errorf("left after destroy --bootstrap: %v", left)
	}

	out, err = runCmd(t, "provision", "--config", good, "--assets", assets, "destroy")
	if err != nil || strings.Count(out, "removed virtualmachine "+ns+"/kv-x7k2p-") != 5 {
		t.Errorf("destroy: %v\n%s", err, out)
	}
	if left := ours(); len(left) != 0 {
		t.Errorf("left after destroy: %v", left)
	}

	// A bootstrap.ign over a Secret's 1 MiB needs --serve-ignition.
	big := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("x"), 1<<20))
	if err := writeFileAt(filepath.Join(assets, "bootstrap.ign"), `{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/big","contents":{"source":"data:;base64,`+big+`"}}]}}`); err != nil {
		t.Fatal(err)
	}
	out, err = runCmd(t, "provision", "--config", good, "--assets", assets, "apply", "--image", testImageRef)
	if err == nil || !strings.Contains(err.Error(), "--serve-ignition") || len(ours()) != 0 {
		t.Errorf("apply of a large bootstrap.ign without --serve-ignition: %v\n%s", err, out)
	}
	// With it, apply says where it serves; VMs left off cannot fetch, so it
	// warns instead of waiting.
	out, err = runCmd(t, "provision", "--config", good, "--assets", assets, "apply", "--image", testImageRef, "--serve-ignition", "127.0.0.1:0", "--no-start")
	if err != nil || !strings.Contains(out, "serving the bootstrap Ignition at https://127.0.0.1:") || !strings.Contains(out, "warning: the VMs are off, and the Ignition server stops now") {
		t.Errorf("apply --serve-ignition --no-start: %v\n%s", err, out)
	}
	if out, err := runCmd(t, "provision", "--config", good, "--assets", assets, "destroy"); err != nil {
		t.Errorf("destroy: %v\n%s", err, out)
	}
}
