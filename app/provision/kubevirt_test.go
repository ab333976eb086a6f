package provision

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/bootstrap"
	"appliance/internal/cluster"
	"appliance/platform"
	"appliance/platform/kubevirt"
	"appliance/platform/kubevirt/kubevirttest"
)

// TestProvisionKubeVirt runs provision against a real kube-apiserver with
// KubeVirt's and CDI's CRDs: refusals before anything is made, an apply
// whose result counts what exists, a wait naming the VMs KubeVirt never
// ran, destroy --bootstrap waiting for the control plane, destroy, and a
// config too large for a Secret served until the VM fetches it.
func TestProvisionKubeVirt(t *testing.T) {
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
	log := testLog(t)

	dir := t.TempDir()
	assets := filepath.Join(dir, "assets")
	if err := os.Mkdir(assets, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(path, content string) {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, role := range []string{"bootstrap", "master", "worker"} {
		write(filepath.Join(assets, role+".ign"), `{"ignition":{"version":"3.2.0"}}`)
	}
	write(filepath.Join(assets, "metadata.json"), `{"clusterName":"kv","infraID":"kv-x7k2p"}`)
	config := func(name, namespace, network, storageClass string) string {
		path := filepath.Join(dir, name)
		write(path, fmt.Sprintf(`
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
`, strings.Repeat("ab", 32), srv.Kubeconfig, namespace, network, storageClass))
		return path
	}
	// run opens a session on the config at path as a command does, hands
	// it to fn, and closes it.
	run := func(path string, fn func(*Session)) {
		t.Helper()
		cfg, err := cluster.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(ctx, Options{Config: cfg, ConfigPath: path, Assets: assets, NeedAssets: true}, log)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		fn(s)
	}
	files := Ignition{Files: testFiles(testImageRef)}
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
	built := func(rec *recorder) bool {
		return slices.ContainsFunc(rec.events, func(e Event) bool {
			switch e.(type) {
			case BuildStart, BuildEnd:
				return true
			}
			return false
		})
	}

	// Everything wrong at once: each named, nothing created; the plan is
	// still shown.
	bad := config("bad.yaml", "nope-"+ns, "default/no-such-net", "slow")
	run(bad, func(s *Session) {
		rep, err := s.Plan(ctx)
		for _, want := range []string{"apply would fail", `namespace "nope-` + ns + `" not found`, "NetworkAttachmentDefinition default/no-such-net not found", `StorageClass "slow" not found`} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("plan error lacks %q: %v", want, err)
			}
		}
		if rep == nil || len(rep.Plan.Items) != 6 || slices.ContainsFunc(rep.Plan.Items, func(it platform.PlanItem) bool { return it.Action != ActionCreate }) {
			t.Errorf("plan with refusals: %+v, want 6 to create, 0 to complete, 0 exist", rep)
		}
	})
	run(bad, func(s *Session) {
		rec := &recorder{}
		_, err := s.Apply(ctx, ApplyOptions{Ignition: files}, rec.emit)
		if err == nil || !strings.Contains(err.Error(), "nothing created") || built(rec) {
			t.Errorf("apply with refusals: %v, events %v", err, rec.kinds())
		}
	})
	if left := ours(); len(left) != 0 {
		t.Fatalf("a refused apply made %v", left)
	}

	// A good apply; KubeVirt is not there to run the VMs, so the wait ends
	// by naming them.
	good := config("good.yaml", ns, "machine-net", kubevirttest.StorageClass)
	run(good, func(s *Session) {
		rec := &recorder{}
		res, err := s.Apply(ctx, ApplyOptions{Wait: 3 * time.Second, Ignition: files}, rec.emit)
		if err == nil {
			t.Fatalf("apply --wait succeeded with no KubeVirt to run the VMs: %v", rec.kinds())
		}
		if res == nil || len(res.Created) != 6 || len(res.Completed) != 0 || len(res.Existing) != 0 || len(res.Started) != 6 {
			t.Errorf("apply result %+v, want 6 created, 0 completed, 0 already there, 6 started", res)
		}
		waited := slices.ContainsFunc(rec.events, func(e Event) bool {
			w, ok := e.(WaitStart)
			return ok && w.Timeout == 3*time.Second && len(w.Machines) == 6
		})
		if !waited || !rec.has(WaitEnd{}) || rec.has(AllRunning{VMs: 6}) {
			t.Errorf("apply --wait events %v, want a wait of 3s for 6 VMs that ends unfulfilled", rec.kinds())
		}
		if !strings.Contains(err.Error(), "6 of 6 VMs not running with their addresses") || !strings.Contains(err.Error(), "kv-x7k2p-worker-1 (starting)") {
			t.Errorf("apply --wait error: %v", err)
		}
	})
	if n := len(ours()); n != 12 {
		t.Errorf("%d objects after apply, want 6 VMs and 6 Secrets", n)
	}
	// The golden image records the digest from appliance.yaml, so a later
	// run from another mirror recognises it.
	golden := &cdiv1.DataVolume{}
	if err := srv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: kubevirt.GoldenName("kv-x7k2p")}, golden); err != nil {
		t.Fatal(err)
	}
	if got := golden.Annotations[kubevirt.AnnotationImageSHA256]; got != strings.Repeat("ab", 32) {
		t.Errorf("golden image digest annotation %q", got)
	}

	// Each VM boots its asset with the appliance put in.
	for _, node := range []string{"bootstrap", "master-0", "worker-1"} {
		sec := &corev1.Secret{}
		if err := srv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kv-x7k2p-" + node + "-ignition"}, sec); err != nil {
			t.Fatal(err)
		}
		if ud := sec.Data["userdata"]; !bytes.Contains(ud, []byte(`"path":"`+bootstrap.StaticPodPath+`"`)) {
			t.Errorf("%s's Ignition (%d bytes) lacks the appliance's static pod", node, len(ud))
		}
	}

	run(good, func(s *Session) {
		rep, err := s.Status(ctx, 0)
		if err != nil || len(rep.Rows) != 6 || slices.ContainsFunc(rep.Rows, func(r StatusRow) bool { return r.VM == nil || r.VM.Power != platform.PowerStarting }) {
			t.Errorf("status: %v %+v, want 6 starting", err, rep)
		}
	})

	// destroy --bootstrap waits for the control plane: refused while the
	// masters only start, done once they run; then only the bootstrap's
	// VM and Secret are gone.
	run(good, func(s *Session) {
		rep, err := s.DestroyBootstrap(ctx)
		if err == nil || !strings.Contains(err.Error(), "control plane is not up") || !strings.Contains(err.Error(), "master-2 (starting)") || len(rep.Removed) != 0 || len(ours()) != 12 {
			t.Errorf("destroy --bootstrap before the masters run: %v %+v", err, rep)
		}
	})
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
	run(good, func(s *Session) {
		rep, err := s.DestroyBootstrap(ctx)
		if err != nil || !slices.Contains(rep.Removed, "virtualmachine "+ns+"/kv-x7k2p-bootstrap") || !slices.Contains(rep.Removed, "secret "+ns+"/kv-x7k2p-bootstrap-ignition") {
			t.Errorf("destroy --bootstrap: %v %+v", err, rep)
		}
	})
	if left := ours(); len(left) != 10 || strings.Contains(strings.Join(left, " "), "bootstrap") {
		t.Errorf("left after destroy --bootstrap: %v", left)
	}

	run(good, func(s *Session) {
		rep, err := s.Destroy(ctx)
		vms := 0
		for _, r := range rep.Removed {
			if strings.HasPrefix(r, "virtualmachine "+ns+"/kv-x7k2p-") {
				vms++
			}
		}
		if err != nil || vms != 5 {
			t.Errorf("destroy: %v, %d VMs removed, want 5:\n%v", err, vms, rep.Removed)
		}
	})
	if left := ours(); len(left) != 0 {
		t.Errorf("left after destroy: %v", left)
	}

	// A bootstrap.ign over a Secret's 1 MiB: apply serves it and waits
	// until the VM fetches it. The test fetches as the VM would, from the
	// pointer in the Secret, trusting only the CA the pointer carries.
	big := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("x"), 1<<20))
	write(filepath.Join(assets, "bootstrap.ign"), `{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/big","contents":{"source":"data:;base64,`+big+`"}}]}}`)
	run(good, func(s *Session) {
		rec := &recorder{}
		_, err := s.Apply(ctx, ApplyOptions{Ignition: files}, rec.emit)
		if err == nil || !strings.Contains(err.Error(), "--serve-ignition") || len(ours()) != 0 {
			t.Errorf("apply of a large bootstrap.ign without --serve-ignition: %v, events %v", err, rec.kinds())
		}
	})
	type result struct {
		out string
		err error
	}
	// A process of its own: in this one, its client-go would set klog's
	// logger while the test's client reads it.
	done := make(chan result, 1)
	serve := applyProcess(t, good, assets, "127.0.0.1:0")
	var serveOut bytes.Buffer
	serve.Stdout, serve.Stderr = &serveOut, &serveOut
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { serve.Process.Kill() })
	go func() {
		err := serve.Wait()
		done <- result{serveOut.String(), err}
	}()
	var pointer []byte
	for deadline := time.Now().Add(time.Minute); pointer == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		sec := &corev1.Secret{}
		if err := srv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kv-x7k2p-bootstrap-ignition"}, sec); err == nil {
			pointer = sec.Data["userdata"]
		}
	}
	if len(pointer) == 0 || len(pointer) > 4096 {
		t.Fatalf("the bootstrap's Secret holds %d bytes, want a small pointer", len(pointer))
	}
	var ptr struct {
		Ignition struct {
			Config   struct{ Replace struct{ Source string } }
			Security struct {
				TLS struct{ CertificateAuthorities []struct{ Source string } }
			}
		}
	}
	if err := json.Unmarshal(pointer, &ptr); err != nil || len(ptr.Ignition.Security.TLS.CertificateAuthorities) != 1 {
		t.Fatalf("pointer %s: %v", pointer, err)
	}
	caPEM, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(ptr.Ignition.Security.TLS.CertificateAuthorities[0].Source, "data:;base64,"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest("GET", ptr.Ignition.Config.Replace.Source, nil)
	req.Header.Set("Accept", "application/vnd.coreos.ignition+json;version=3.3.0, */*;q=0.1")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "application/vnd.coreos.ignition+json;version=3.3.0" || len(body) < 1<<20 || !bytes.Contains(body, []byte(bootstrap.StaticPodPath)) {
		t.Errorf("served %s, %q, %d bytes; want the whole config at 3.3.0 with the appliance's files", resp.Status, resp.Header.Get("Content-Type"), len(body))
	}
	select {
	case r := <-done:
		if r.err != nil || !strings.Contains(r.out, "event provision.AllFetched") ||
			!strings.Contains(r.out, "event provision.ServingIgnition {Role:bootstrap URL:https://127.0.0.1:") ||
			!strings.Contains(r.out, "event provision.AwaitingFetch {Roles:[bootstrap]}") {
			t.Errorf("apply --serve-ignition: %v\n%s", r.err, r.out)
		}
	case <-time.After(time.Minute):
		t.Fatal("apply still serving after the bootstrap's config was fetched")
	}
	run(good, func(s *Session) {
		if _, err := s.Destroy(ctx); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
}
