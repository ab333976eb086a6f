//go:build kubelet

package e2e

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"appliance/bootstrap"
	"appliance/internal/apptest"
	"appliance/internal/kubeletnode"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
	"appliance/vrrp"
)

// The kubelet tier (`make kubelet`, build tag kubelet): the appliance run
// only as a node runs it, by a real kubelet (v1.37, with containerd and
// runc) from the image `make image` builds, one kubelet per node namespace,
// no API server (../shared/tools/kubelet/README.md, driven through
// internal/kubeletnode). This file holds the node side: the images, the
// nodes' files, the kubelets with the tests' helpers.

// kubeletToolsDir is the shared kubelet scripts, from e2e/.
const kubeletToolsDir = "../../shared/tools/kubelet"

// kubeletTools finds the scripts and the binaries their build.sh built
// (KUBELET_ASSETS, else build.sh's default cache), or skips the test
// saying how to build them (fails it under CI).
func kubeletTools(t *testing.T) kubeletnode.Tools {
	t.Helper()
	// Network and mount namespaces, cgroups.
	netlabtest.RequireRoot(t)
	tools, err := kubeletnode.FindTools(kubeletToolsDir, os.Getenv("KUBELET_ASSETS"))
	if err != nil {
		msg := err.Error() + "; then `make kubelet`, or go test -tags kubelet -run '^TestKubelet' ./e2e"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return tools
}

// nodeImage is one appliance image as `make image` writes it.
type nodeImage struct {
	version string
	archive string // the OCI archive
	ref     string // localhost/appliance@sha256:..., what the manifests pin
}

var (
	imagesMu sync.Mutex
	images   = map[string]nodeImage{} // by version, built once per test binary
)

// buildNodeImage is apptest.BuildImage, once per version per test binary:
// the archive moves to where it lasts as long.
func buildNodeImage(t *testing.T, version string) nodeImage {
	t.Helper()
	imagesMu.Lock()
	defer imagesMu.Unlock()
	if img, ok := images[version]; ok {
		return img
	}
	archive, ref := apptest.BuildImage(t, version)
	img := nodeImage{version: version, archive: filepath.Join(binDir, "appliance-image-"+version+".tar"), ref: ref}
	if err := os.Rename(archive, img.archive); err != nil {
		t.Fatal(err)
	}
	images[version] = img
	return img
}

// bootstrapFiles runs `appliance ignition` on an empty bootstrap.ign and
// returns the bootstrap node's files: its static pod and node config come
// from there, not from a MachineConfig.
func bootstrapFiles(t *testing.T, exe, config, image string) roleFiles {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "appliance.yaml")
	ign := filepath.Join(dir, "bootstrap.ign")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ign, []byte(`{"ignition":{"version":"3.2.0"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(exe, "ignition", "--config", cfg, "--assets", dir, "--image", image).CombinedOutput(); err != nil {
		t.Fatalf("appliance ignition: %v\n%s", err, out)
	}
	files := roleFiles{}
	for _, f := range ignitionFiles(t, ign) {
		files[f.Path] = f.Contents
	}
	return files
}

// kubeletNode is one node of the tier: a kubeletnode.Node with the
// test's helpers.
type kubeletNode struct {
	*kubeletnode.Node
	n    *netlab.Node
	name string
}

// kubeletSpec says what one node's kubelet starts with (kubeletnode.Spec,
// images by nodeImage).
type kubeletSpec struct {
	n           *netlab.Node
	name        string
	files       roleFiles
	extra       map[string]string
	images      []nodeImage
	configExtra string
}

// startKubelets starts the specs' kubelets side by side and stops them when
// the test ends (stop.sh, gracefully: the pods get their grace period),
// after logging what the kubelets and the containers said if it failed.
// The static pods are not put in place: see put.
func startKubelets(t *testing.T, specs ...kubeletSpec) []*kubeletNode {
	t.Helper()
	tools := kubeletTools(t)
	var ks []kubeletnode.Spec
	for _, sp := range specs {
		files := map[string][]byte{}
		for p, b := range sp.files {
			if p != bootstrap.StaticPodPath {
				files[p] = b
			}
		}
		for p, s := range sp.extra {
			files[p] = []byte(s)
		}
		var archives []string
		for _, img := range sp.images {
			archives = append(archives, img.archive)
		}
		ks = append(ks, kubeletnode.Spec{Node: sp.n, Name: sp.name, Files: files, Images: archives, ConfigExtra: sp.configExtra})
	}
	started, err := kubeletnode.Start(context.Background(), tools, t.TempDir(), ks...)
	var nodes []*kubeletNode
	for i, k := range started {
		if k != nil {
			nodes = append(nodes, &kubeletNode{Node: k, n: specs[i].n, name: specs[i].name})
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, k := range nodes {
				k.dump(t)
			}
		}
		var wg sync.WaitGroup
		for _, k := range nodes {
			wg.Go(func() {
				if err := k.Stop(false); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	})
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}

// dump logs the tail of the kubelet's log and of every container's.
func (k *kubeletNode) dump(t *testing.T) {
	if b, err := os.ReadFile(filepath.Join(k.State(), "kubelet.log")); err == nil {
		t.Logf("---- %s: kubelet.log (tail) ----\n%s", k.name, tail(string(b)))
	}
	if k.Pod() == nil {
		return
	}
	cs, err := k.Containers()
	if err != nil {
		t.Logf("%s: %v", k.name, err)
	}
	for _, c := range cs {
		logs, _ := k.Logs(c.ID)
		t.Logf("---- %s: container %s (%s, attempt %d, %s) ----\n%s", k.name, c.Metadata.Name, c.ID[:12], c.Metadata.Attempt, c.State, tail(logs))
	}
}

// put puts a static pod's manifest in place (kubeletnode.Node.Put).
func (k *kubeletNode) put(t *testing.T, manifest []byte) {
	t.Helper()
	if err := k.Put(manifest); err != nil {
		t.Fatal(err)
	}
}

// remove takes the manifest away (kubeletnode.Node.Remove).
func (k *kubeletNode) remove(t *testing.T) {
	t.Helper()
	if err := k.Remove(); err != nil {
		t.Fatal(err)
	}
}

// container is the pod's one container as its manifest has it.
func (k *kubeletNode) containerSpec() corev1.Container { return k.Pod().Spec.Containers[0] }

// waitReady waits for the kubelet to have the pod Ready.
func (k *kubeletNode) waitReady(t *testing.T, within time.Duration) {
	t.Helper()
	if err := k.WaitReady(context.Background(), within); err != nil {
		t.Fatalf("%s's appliance pod Ready: %v", k.name, err)
	}
}

// mustRunning is the pod's running container, failing t when none runs.
func (k *kubeletNode) mustRunning(t *testing.T) kubeletnode.Container {
	t.Helper()
	c, ok, err := k.Running()
	if err != nil || !ok {
		t.Fatalf("%s: no running appliance container (%v)", k.name, err)
	}
	return c
}

// pid is the running appliance's process id (in this machine's pid
// namespace).
func (k *kubeletNode) pid(t *testing.T) int {
	t.Helper()
	c := k.mustRunning(t)
	s, err := k.Inspect(c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s.Info.Pid <= 0 {
		t.Fatalf("%s: container %s has no pid", k.name, c.ID)
	}
	return s.Info.Pid
}

// waitExited waits for container id to have exited and returns its status.
func (k *kubeletNode) waitExited(t *testing.T, id string, within time.Duration) kubeletnode.Status {
	t.Helper()
	var s kubeletnode.Status
	waitFor(t, k.name+": container "+id[:12]+" exited", within, func() (bool, string) {
		var err error
		if s, err = k.Inspect(id); err != nil {
			return false, err.Error()
		}
		return s.Status.State == "CONTAINER_EXITED", s.Status.State
	})
	return s
}

// status is the appliance's /status, by section.
func (k *kubeletNode) status() (map[string]json.RawMessage, error) {
	body, err := k.Admin("/status")
	if err != nil {
		return nil, err
	}
	var st map[string]json.RawMessage
	return st, json.Unmarshal([]byte(body), &st)
}

// version is the version the running appliance reports in /status.
func (k *kubeletNode) version() (string, error) {
	st, err := k.status()
	if err != nil {
		return "", err
	}
	var n struct {
		Version string `json:"version"`
	}
	err = json.Unmarshal(st["node"], &n)
	return n.Version, err
}

// vipState is the state of the appliance's virtual router holding vip
// (its /status "vips" section), "" when it has none.
func (k *kubeletNode) vipState(vip netip.Addr) (string, error) {
	st, err := k.status()
	if err != nil {
		return "", err
	}
	var vips []vrrp.Status
	if err := json.Unmarshal(st["vips"], &vips); err != nil {
		return "", err
	}
	for _, v := range vips {
		for _, p := range v.VIPs {
			if p.Addr() == vip {
				return v.State, nil
			}
		}
	}
	return "", nil
}

// grace is the manifest's terminationGracePeriodSeconds.
func (k *kubeletNode) grace(t *testing.T) time.Duration {
	t.Helper()
	g := k.Pod().Spec.TerminationGracePeriodSeconds
	if g == nil {
		t.Fatalf("%s: the manifest sets no terminationGracePeriodSeconds", k.name)
	}
	return time.Duration(*g) * time.Second
}
