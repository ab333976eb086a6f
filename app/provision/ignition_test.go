package provision

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v32 "github.com/coreos/ignition/v2/config/v3_2"

	"appliance/bootstrap"
	"appliance/internal/cluster"
	"appliance/platform"
)

// testImageRef is an appliance image reference as `--image` takes it.
const testImageRef = "registry.example.com/appliance@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// testFiles are node-file options as the command builds them: the role
// runs the static pod and resolves through it, and the LB drains for a
// second before the pod goes.
func testFiles(image string) bootstrap.Options {
	return bootstrap.Options{Image: image, Drain: time.Second, Services: func(cluster.Role) bootstrap.RoleServices {
		return bootstrap.RoleServices{Runs: true, DNS: true}
	}}
}

// onlyWarnings takes prepareIgnition's events: the merge's warnings, as
// the command takes them, and nothing else.
func onlyWarnings(t *testing.T) func(Event) {
	return func(e Event) {
		if _, ok := e.(IgnitionWarning); !ok {
			t.Errorf("preparing the Ignition reported %#v", e)
		}
	}
}

const provisionIgnConfig = `
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}
nodes:
- {name: bootstrap, role: bootstrap, ips: [192.168.126.9]}
- {name: master-0, role: master, ips: [192.168.126.10]}
- {name: worker-0, role: worker, ips: [192.168.126.20]}
provision:
  platform: libvirt
  libvirt: {uri: "qemu:///system", pool: default, network: default}
`

// provisionSpec is the spec apply builds from an asset folder whose
// bootstrap.ign carries pad bytes of an installer file.
func provisionSpec(t *testing.T, pad int) (*platform.Spec, *cluster.Config, string) {
	t.Helper()
	cfg, err := cluster.Parse([]byte(provisionIgnConfig))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	big := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{'x'}, pad))
	for role, doc := range map[string]string{
		"bootstrap": `{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/installer","contents":{"source":"data:;base64,` + big + `"}}]}}`,
		"master":    `{"ignition":{"config":{"merge":[{"source":"https://192.168.126.5:22623/config/master"}]},"version":"3.2.0"}}`,
		"worker":    `{"ignition":{"config":{"merge":[{"source":"https://192.168.126.5:22623/config/worker"}]},"version":"3.2.0"}}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, role+".ign"), []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	assets, err := platform.LoadAssets(dir, platform.Roles(cfg))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := platform.BuildSpec(cfg, assets, platform.Image{})
	if err != nil {
		t.Fatal(err)
	}
	return spec, cfg, dir
}

// assetSums reads every file of dir, to prove apply leaves them alone.
func assetSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// TestPrepareIgnitionInjects: every VM boots its role's asset with the
// appliance's files merged in, as `appliance ignition` would write it, and
// the asset folder is left byte for byte as it was.
func TestPrepareIgnitionInjects(t *testing.T) {
	spec, cfg, dir := provisionSpec(t, 10)
	sums := assetSums(t, dir)
	b, err := prepareIgnition(spec, cfg, Ignition{Files: testFiles(testImageRef)}, onlyWarnings(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if b.server != nil {
		t.Error("a server started for configs that fit")
	}
	for _, m := range spec.Machines {
		want, err := bootstrap.Files(cfg, m.Role, testFiles(testImageRef))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(filepath.Join(dir, string(m.Role)+".ign"))
		merged, err := bootstrap.Merge("x", raw, want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Ignition, merged.Config) {
			t.Errorf("%s: the VM's Ignition is not the asset merged as `appliance ignition` does", m.Name)
		}
		if len(want) > 0 && (!bytes.Contains(m.Ignition, []byte(bootstrap.StaticPodPath)) || !strings.Contains(m.IgnitionSource, "+ appliance")) {
			t.Errorf("%s: no static pod in its Ignition (source %q)", m.Name, m.IgnitionSource)
		}
		if _, rpt, err := v32.Parse(m.Ignition); err != nil {
			t.Errorf("%s: %v %v", m.Name, err, rpt)
		}
	}
	if got := assetSums(t, dir); fmt.Sprint(got) != fmt.Sprint(sums) {
		t.Errorf("the asset folder changed:\n%v", got)
	}
}

func TestPrepareIgnitionFlags(t *testing.T) {
	spec, cfg, dir := provisionSpec(t, 10)
	if _, err := prepareIgnition(spec, cfg, Ignition{}, onlyWarnings(t), nil); err == nil || !strings.Contains(err.Error(), "--image") || !strings.Contains(err.Error(), "--no-inject") {
		t.Errorf("no image: %v, want the error to name --image and --no-inject", err)
	}
	b, err := prepareIgnition(spec, cfg, Ignition{NoInject: true}, onlyWarnings(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	b.close()
	for _, m := range spec.Machines {
		raw, _ := os.ReadFile(filepath.Join(dir, string(m.Role)+".ign"))
		if !bytes.Equal(m.Ignition, raw) {
			t.Errorf("--no-inject: %s does not boot the asset as it is", m.Name)
		}
	}
}

// TestPrepareIgnitionServesLarge: a bootstrap config over the platform's
// 1 MiB needs --serve-ignition (the error names it and the size); with it
// the VM gets a small pointer, and a client trusting only the pointer's CA
// fetches the whole config, the appliance's files in it.
func TestPrepareIgnitionServesLarge(t *testing.T) {
	spec, cfg, _ := provisionSpec(t, platform.MaxIgnitionSize)
	_, err := prepareIgnition(spec, cfg, Ignition{Files: testFiles(testImageRef)}, onlyWarnings(t), nil)
	if err == nil || !strings.Contains(err.Error(), "--serve-ignition") || !strings.Contains(err.Error(), "bootstrap.ign") || !strings.Contains(err.Error(), "bytes, over the 1048576") {
		t.Fatalf("large bootstrap without --serve-ignition: %v", err)
	}
	spec, cfg, _ = provisionSpec(t, platform.MaxIgnitionSize)
	b, err := prepareIgnition(spec, cfg, Ignition{Files: testFiles(testImageRef), Serve: "127.0.0.1:0"}, onlyWarnings(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if b.server == nil || len(b.served) != 1 || b.served[0] != cluster.RoleBootstrap {
		t.Fatalf("served %v", b.served)
	}
	boot := spec.Machines[0]
	if len(boot.Ignition) > 4096 || !strings.Contains(boot.IgnitionSource, "served at "+b.server.URL) {
		t.Errorf("bootstrap VM: %d bytes from %q, want a small pointer", len(boot.Ignition), boot.IgnitionSource)
	}
	if bytes.Contains(spec.Machines[1].Ignition, []byte(b.server.URL)) {
		t.Error("the master, which fits, was given a pointer too")
	}
	ptr, _, err := v32.Parse(boot.Ignition)
	if err != nil {
		t.Fatal(err)
	}
	ca := *ptr.Ignition.Security.TLS.CertificateAuthorities[0].Source
	pem, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(ca, "data:;base64,"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get(*ptr.Ignition.Config.Replace.Source)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(body) <= platform.MaxIgnitionSize || !bytes.Contains(body, []byte(bootstrap.StaticPodPath)) {
		t.Errorf("served %d bytes, want the whole config with the appliance's files", len(body))
	}
	res := &platform.Result{Created: []string{boot.Name}}
	if got := b.awaiting(spec, res); len(got) != 1 || got[0] != cluster.RoleBootstrap {
		t.Errorf("awaiting %v", got)
	}
	if got := b.awaiting(spec, &platform.Result{Existing: []string{boot.Name}}); len(got) != 0 {
		t.Errorf("awaiting %v for a VM built by an earlier run", got)
	}
}
