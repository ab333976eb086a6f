package bootstrap

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	t32 "github.com/coreos/ignition/v2/config/v3_2/types"

	"appliance/internal/cluster"
	"appliance/internal/netlab/netlabtest"
)

// Debian's ignition package is Ignition 2.14: it reads spec 3.0.0 to 3.3.0
// (3.4.0 was still experimental then); newer versions are checked by the
// module's validator in the table tests.
var realVersions = []string{"3.0.0", "3.1.0", "3.2.0", "3.3.0"}

const ignitionBin = "ignition"

// writeAssets is an installer asset folder at version v: a full
// bootstrap.ign and the two pointer configs, whose merge source is mcs.
func writeAssets(t *testing.T, v, mcs, ca string) string {
	t.Helper()
	dir := t.TempDir()
	p := func(role string) []byte {
		return fmt.Appendf(nil, `{"ignition":{"config":{"merge":[{"source":"%s/config/%s"}]},"security":{"tls":{"certificateAuthorities":[{"source":"%s"}]}},"version":"%s"}}`, mcs, role, ca, v)
	}
	for name, data := range map[string][]byte{"bootstrap.ign": fullConfig(t, v), "master.ign": p("master"), "worker.ign": p("worker")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestRealIgnitionValidate: every file `appliance ignition` writes, and the
// MachineConfigs' Ignition, pass Ignition's own ignition-validate.
func TestRealIgnitionValidate(t *testing.T) {
	validate := needTool(t, "ignition-validate")
	cfg := mustParse(t, testConfigYAML)
	check := func(t *testing.T, path string) {
		t.Helper()
		out, err := exec.Command(validate, path).CombinedOutput()
		if err != nil {
			t.Errorf("ignition-validate %s: %v\n%s", filepath.Base(path), err, out)
		}
	}
	for _, v := range realVersions {
		t.Run(v, func(t *testing.T) {
			dir := writeAssets(t, v, "https://192.168.126.5:22623", caURL)
			edited, err := EditAssets(dir, cfg, testOptions())
			if err != nil {
				t.Fatal(err)
			}
			if len(edited) != 3 {
				t.Fatalf("edited %d files", len(edited))
			}
			for _, e := range edited {
				if e.Version != v || len(e.Added) != len(OwnedPaths) {
					t.Errorf("%s: version %s, %d files", e.File, e.Version, len(e.Added))
				}
				check(t, e.File)
				check(t, e.File+".orig")
				fi, err := os.Stat(e.File)
				if err != nil || fi.Mode().Perm() != 0o640 {
					t.Errorf("%s: mode %v (%v), want the original's 0640", e.File, fi.Mode(), err)
				}
			}
		})
	}
	t.Run("machineconfigs", func(t *testing.T) {
		dir := t.TempDir()
		for _, role := range []cluster.Role{cluster.RoleMaster, cluster.RoleWorker} {
			files, err := Files(cfg, role, testOptions())
			if err != nil {
				t.Fatal(err)
			}
			mc, err := MachineConfigFor(role, files)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, string(role)+".ign")
			os.WriteFile(p, mc.Spec.Config, 0o600)
			check(t, p)
		}
	})
}

// ignitionRoot is a scratch root the files stage can write users and
// files into: root in passwd and group, SELinux off.
func ignitionRoot(t *testing.T) string {
	t.Helper()
	// Ignition writes a user's SSH keys as that user: the root and the
	// folders above it must let others through (t.TempDir's are 0700).
	root, err := os.MkdirTemp("", "appliance-ignition-root-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"etc/passwd":         "root:x:0:0:root:/root:/bin/bash\n",
		"etc/group":          "root:x:0:\n",
		"etc/selinux/config": "SELINUX=disabled\nSELINUXTYPE=targeted\n", // the files stage reads the type even when disabled
	} {
		p := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// runIgnition runs Ignition's fetch and files stages on config with the
// file platform, into root.
func runIgnition(t *testing.T, config, root string) {
	t.Helper()
	bin := needTool(t, ignitionBin)
	// Ignition's files stage creates users and owners: it needs root, and
	// under CI a missing root fails rather than skips.
	netlabtest.RequireRoot(t)
	run := t.TempDir()
	// The files stage relabels what it wrote with setfiles; SELinux is off
	// in the scratch root, so a no-op stands in for it.
	stub := filepath.Join(run, "bin")
	os.MkdirAll(stub, 0o755)
	os.WriteFile(filepath.Join(stub, "setfiles"), []byte("#!/bin/sh\nexit 0\n"), 0o755)
	env := []string{"PATH=" + stub + ":" + os.Getenv("PATH"), "IGNITION_CONFIG_FILE=" + config, "HOME=" + run}
	for _, stage := range []string{"fetch", "files"} {
		cmd := exec.Command(bin, "-platform", "file", "-stage", stage, "-root", root, "-log-to-stdout",
			"-config-cache", filepath.Join(run, "ignition.json"), "-state-file", filepath.Join(run, "state"),
			"-neednet", filepath.Join(run, "neednet"))
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ignition %s stage: %v\n%s", stage, err, tail(out))
		}
	}
}

func tail(b []byte) string {
	l := lines(string(b))
	if len(l) > 30 {
		l = l[len(l)-30:]
	}
	return strings.Join(l, "\n")
}

// checkApplied reads the files back from root: contents and modes.
func checkApplied(t *testing.T, root string, want []File) {
	t.Helper()
	for _, f := range want {
		p := filepath.Join(root, f.Path)
		got, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("%s: %v", f.Path, err)
			continue
		}
		if !bytes.Equal(got, f.Contents) {
			t.Errorf("%s: contents differ", f.Path)
		}
		fi, _ := os.Stat(p)
		if fi.Mode().Perm() != fs.FileMode(f.Mode) {
			t.Errorf("%s: mode %#o, want %#o", f.Path, fi.Mode().Perm(), f.Mode)
		}
	}
}

// TestRealIgnitionAppliesBootstrap: Ignition itself applies the edited
// bootstrap.ign: the appliance's files with their modes, and everything
// the installer put there (a compressed static pod, a unit with a dropin,
// a user) as before.
func TestRealIgnitionAppliesBootstrap(t *testing.T) {
	needTool(t, ignitionBin)
	cfg := mustParse(t, testConfigYAML)
	want, err := Files(cfg, cluster.RoleBootstrap, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range realVersions {
		t.Run(v, func(t *testing.T) {
			dir := writeAssets(t, v, "https://192.168.126.5:22623", caURL)
			if _, err := EditAssets(dir, cfg, testOptions()); err != nil {
				t.Fatal(err)
			}
			root := ignitionRoot(t)
			runIgnition(t, filepath.Join(dir, "bootstrap.ign"), root)
			checkApplied(t, root, want)
			// The node's config holds vrrp.authPass: root only.
			if fi, err := os.Stat(filepath.Join(root, NodeConfigPath)); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v %v, want 0600", NodeConfigPath, fi.Mode(), err)
			}
			// What was there before is still applied.
			for p, c := range map[string][]byte{
				"/etc/kubernetes/manifests/kube-apiserver-pod.yaml": apiserverPod,
				"/etc/motd": []byte("welcome\n"),
				"/etc/systemd/system/bootkube.service.d/10-env.conf": []byte("[Service]\nEnvironment=X=1\n"),
			} {
				got, err := os.ReadFile(filepath.Join(root, p))
				if err != nil || !bytes.Equal(got, c) {
					t.Errorf("%s: %q %v, want %q", p, got, err, c)
				}
			}
			if pw, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); !strings.Contains(string(pw), "core:") {
				t.Errorf("user core not created:\n%s", pw)
			}
			// The resolv scripts as Ignition wrote them run: NetworkManager's
			// `up` restarts the unit, whose script writes resolv.conf.
			e := newResolvEnv(t, cfg)
			e.dispatcher = filepath.Join(root, ResolvDispatcherPath)
			e.script = filepath.Join(root, ResolvScriptPath)
			e.ipOut = ipVIPThenSelf
			e.setNM("nameserver 192.168.126.1\n")
			e.event("ens3", "up")
			if got := e.resolv(); !slices.Equal(got, []string{"search ocp4.example.com", "nameserver 192.168.126.10", "nameserver 192.168.126.1"}) || !e.done() {
				t.Errorf("the applied scripts wrote %q, done %v", got, e.done())
			}
			// The static pod on disk is the one the kubelet will read.
			y, _ := os.ReadFile(filepath.Join(root, StaticPodPath))
			pod := decodePod(t, y)
			if pod.Spec.Containers[0].Args[4] != string(cluster.RoleBootstrap) {
				t.Errorf("args %q", pod.Spec.Containers[0].Args)
			}
		})
	}
}

// TestRealIgnitionPointer: Ignition fetches a pointer config's merge source
// over TLS with the pointer's CA from a stand-in Machine Config Server, and
// the node gets both the server's files and the ones the pointer carries.
func TestRealIgnitionPointer(t *testing.T) {
	needTool(t, ignitionBin)
	var mu sync.Mutex
	var accept []string
	mcsFile := []byte("from the machine config server\n")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		accept = append(accept, r.Header.Get("Accept"))
		mu.Unlock()
		if r.URL.Path != "/config/master" {
			http.NotFound(w, r)
			return
		}
		// The server's answer, in the module's 3.2.0 types (a version
		// every Ignition here reads).
		cfg := t32.Config{Ignition: t32.Ignition{Version: "3.2.0"}}
		cfg.Storage.Files = []t32.File{c32.file(File{Path: "/etc/mcs-file", Mode: 0o644, Contents: mcsFile})}
		json.NewEncoder(w).Encode(cfg)
	}))
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	ca := "data:text/plain;charset=utf-8;base64," + base64.StdEncoding.EncodeToString(caPEM)

	cfg := mustParse(t, testConfigYAML)
	want, _ := Files(cfg, cluster.RoleMaster, testOptions())
	for _, v := range realVersions {
		t.Run(v, func(t *testing.T) {
			dir := writeAssets(t, v, srv.URL, ca)
			if _, err := EditAssets(dir, cfg, testOptions()); err != nil {
				t.Fatal(err)
			}
			root := ignitionRoot(t)
			runIgnition(t, filepath.Join(dir, "master.ign"), root)
			checkApplied(t, root, append(want, File{Path: "/etc/mcs-file", Mode: 0o644, Contents: mcsFile}))
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(accept) == 0 || !strings.Contains(accept[0], "application/vnd.coreos.ignition+json") {
		t.Errorf("Accept headers %q: Ignition names the spec versions it reads", accept)
	}
}
