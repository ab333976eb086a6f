package bootstrap

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	igerrors "github.com/coreos/ignition/v2/config/shared/errors"
	v36 "github.com/coreos/ignition/v2/config/v3_6"
	t36 "github.com/coreos/ignition/v2/config/v3_6/types"

	"appliance/internal/cluster"
)

// Inputs: the shapes the installer writes and the ones users add.
const (
	caURL = "data:text/plain;charset=utf-8;base64,LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUR0ZXN0Ci0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K"
	// pointer is master.ign / worker.ign as openshift-install writes them.
	pointer = `{"ignition":{"config":{"merge":[{"source":"https://192.168.126.5:22623/config/%s"}]},"security":{"tls":{"certificateAuthorities":[{"source":"` + caURL + `"}]}},"version":"%s"}}`
	// full is a bootstrap.ign-like config: users, units with dropins, files,
	// a directory, a link, and another static pod.
	full = `{
  "ignition": {"version": "%s"},
  "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAAtest core@example"]}]},
  "storage": {
    "directories": [{"path": "/opt/openshift", "mode": 493}],
    "links": [{"path": "/usr/local/bin/oc", "target": "/usr/bin/kubectl"}],
    "files": [
      {"path": "/etc/motd", "mode": 420, "overwrite": true, "contents": {"source": "data:,welcome%%0A"}},
      {"path": "/etc/kubernetes/manifests/kube-apiserver-pod.yaml", "mode": 420, "contents": {"source": "data:;base64,%s"%s}},
      {"path": "/usr/local/bin/bootkube.sh", "mode": 365, "contents": {"source": "data:,%%23!%%2Fbin%%2Fbash%%0Aexit%%200%%0A"}}
    ]
  },
  "systemd": {"units": [
    {"name": "bootkube.service", "enabled": true, "contents": "[Service]\nExecStart=/usr/local/bin/bootkube.sh\n[Install]\nWantedBy=multi-user.target\n",
     "dropins": [{"name": "10-env.conf", "contents": "[Service]\nEnvironment=X=1\n"}]},
    {"name": "kubelet.service", "dropins": [{"name": "20-appliance-unrelated.conf", "contents": "[Service]\nEnvironment=Y=2\n"}]}
  ]}
}`
)

var apiserverPod = []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: kube-apiserver, namespace: openshift-kube-apiserver}\n")

func gz(t testing.TB, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

// fullConfig is full at version v, its static pod gzip-compressed where the
// version can say so (3.1.0 on).
func fullConfig(t testing.TB, v string) []byte {
	if v == "3.0.0" {
		return fmt.Appendf(nil, full, v, base64.StdEncoding.EncodeToString(apiserverPod), "")
	}
	return fmt.Appendf(nil, full, v, gz(t, apiserverPod), `, "compression": "gzip"`)
}

// ours reads back the appliance's files of a merged config, through the
// module's own parser translated to its newest stable types.
func ours(t testing.TB, raw []byte) map[string]t36.File {
	t.Helper()
	cfg, _, err := v36.ParseCompatibleVersion(raw)
	if err != nil {
		t.Fatalf("merged config does not parse: %v", err)
	}
	got := map[string]t36.File{}
	for _, f := range cfg.Storage.Files {
		if Owned(f.Path) {
			if _, dup := got[f.Path]; dup {
				t.Errorf("%s is in the config twice", f.Path)
			}
			got[f.Path] = f
		}
	}
	return got
}

func versionOf(t testing.TB, raw []byte) string {
	t.Helper()
	var v struct{ Ignition struct{ Version string } }
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v.Ignition.Version
}

func contents(t testing.TB, f t36.File) []byte {
	t.Helper()
	src := *f.Contents.Source
	b64, ok := strings.CutPrefix(src, "data:;base64,")
	if !ok {
		t.Fatalf("%s: source %.40q is not our data URL", f.Path, src)
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkMerged is every property a merge must have.
func checkMerged(t testing.TB, in []byte, m *Merged, files []File) {
	t.Helper()
	if got, want := versionOf(t, m.Config), versionOf(t, in); got != want || m.Version != want {
		t.Errorf("version %s (reported %s), want the input's %s", got, m.Version, want)
	}
	a, err := Strip(in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Strip(m.Config)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("the rest of the config changed:\n in %s\nout %s", a, b)
	}
	got := ours(t, m.Config)
	if len(got) != len(files) {
		t.Errorf("%d appliance files, want %d", len(got), len(files))
	}
	for _, f := range files {
		g, ok := got[f.Path]
		if !ok {
			t.Errorf("%s missing", f.Path)
			continue
		}
		if g.Mode == nil || *g.Mode != f.Mode {
			t.Errorf("%s: mode %v, want %#o", f.Path, g.Mode, f.Mode)
		}
		if !bytes.Equal(contents(t, g), f.Contents) {
			t.Errorf("%s: contents differ", f.Path)
		}
	}
	again, err := Merge("again", m.Config, files)
	if err != nil {
		t.Fatalf("merging the merged config: %v", err)
	}
	if !bytes.Equal(again.Config, m.Config) {
		t.Errorf("a second run changed the config:\nonce  %s\ntwice %s", m.Config, again.Config)
	}
}

func TestMergeVersionsAndShapes(t *testing.T) {
	cfg := mustParse(t, testConfigYAML)
	files, err := Files(cfg, cluster.RoleMaster, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(OwnedPaths) {
		t.Fatalf("%d files for a master, want one at each of the %d owned paths", len(files), len(OwnedPaths))
	}
	type input struct {
		name string
		raw  []byte
	}
	var inputs []input
	for _, v := range Versions {
		inputs = append(inputs,
			input{"pointer " + v, fmt.Appendf(nil, pointer, "master", v)},
			input{"full " + v, fullConfig(t, v)},
		)
	}
	// Already edited, by an older run whose files differ and sit between
	// others: replaced, not duplicated.
	stale := []File{{Path: StaticPodPath, Mode: 0o600, Contents: []byte("old pod")}, {Path: NodeConfigPath, Mode: 0o644, Contents: []byte("old")}}
	m, err := Merge("stale", fullConfig(t, "3.2.0"), stale)
	if err != nil {
		t.Fatal(err)
	}
	var mixed t36.Config
	if err := json.Unmarshal(m.Config, &mixed); err != nil {
		t.Fatal(err)
	}
	mixed.Storage.Files = append(mixed.Storage.Files[len(mixed.Storage.Files)-1:], mixed.Storage.Files[:len(mixed.Storage.Files)-1]...)
	mixedRaw, _ := json.Marshal(mixed)
	inputs = append(inputs, input{"already edited 3.2.0", bytes.Replace(mixedRaw, []byte(`"3.6.0"`), []byte(`"3.2.0"`), 1)})

	for _, in := range inputs {
		t.Run(in.name, func(t *testing.T) {
			m, err := Merge(in.name, in.raw, files)
			if err != nil {
				t.Fatal(err)
			}
			checkMerged(t, in.raw, m, files)
			if strings.HasPrefix(in.name, "pointer") {
				cfg, _, err := v36.ParseCompatibleVersion(m.Config)
				if err != nil {
					t.Fatal(err)
				}
				if len(cfg.Ignition.Config.Merge) != 1 || *cfg.Ignition.Config.Merge[0].Source != "https://192.168.126.5:22623/config/master" {
					t.Errorf("merge source %+v", cfg.Ignition.Config.Merge)
				}
				if cas := cfg.Ignition.Security.TLS.CertificateAuthorities; len(cas) != 1 || *cas[0].Source != caURL {
					t.Errorf("CA %+v", cas)
				}
			}
		})
	}
}

// TestMergeRemovesFromARoleThatRunsNothing: a config edited for a role that
// no longer runs the appliance loses the appliance's files.
func TestMergeRemovesFromARoleThatRunsNothing(t *testing.T) {
	cfg := mustParse(t, testConfigYAML)
	files, _ := Files(cfg, cluster.RoleWorker, testOptions())
	in := fmt.Appendf(nil, pointer, "worker", "3.1.0")
	m, err := Merge("worker.ign", in, files)
	if err != nil {
		t.Fatal(err)
	}
	none, err := Merge("worker.ign", m.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := ours(t, none.Config); len(got) != 0 {
		t.Errorf("left %d appliance files", len(got))
	}
	a, _ := Strip(in)
	if !bytes.Equal(none.Config, a) {
		t.Errorf("not back to the original:\n%s\n%s", none.Config, a)
	}
}

func TestMergeErrorsNameFileAndPath(t *testing.T) {
	files := []File{{Path: NodeConfigPath, Mode: 0o600, Contents: []byte("x")}}
	for _, tc := range []struct {
		name string
		raw  string
		want []string
		is   error
	}{
		{"not JSON", `{"ignition": {"version": "3.2.0"},}`, []string{"master.ign", "line 1"}, nil},
		{"empty", ``, []string{"master.ign", "empty"}, igerrors.ErrEmpty},
		{"spec 2", `{"ignition": {"version": "2.2.0"}}`, []string{"master.ign", "$.ignition.version", "2.2.0", "3.2.0"}, nil},
		{"experimental", `{"ignition": {"version": "3.7.0-experimental"}}`, []string{"master.ign", "3.7.0-experimental"}, nil},
		{"relative path", `{"ignition": {"version": "3.2.0"}, "storage": {"files": [{"path": "etc/x"}]}}`,
			[]string{"master.ign", "$.storage.files.0.path", "absolute"}, igerrors.ErrInvalid},
		{"bad type", `{"ignition": {"version": "3.1.0"}, "storage": {"files": [{"path": "/etc/x", "mode": "0644"}]}}`,
			[]string{"master.ign", "$.storage.files.0.mode"}, nil},
		{"a directory where our file goes", `{"ignition": {"version": "3.3.0"}, "storage": {"directories": [{"path": "` + NodeConfigPath + `"}]}}`,
			[]string{"master.ign", "$.storage", NodeConfigPath}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Merge("master.ign", []byte(tc.raw), files)
			if err == nil {
				t.Fatal("no error")
			}
			var ie *IgnitionError
			if !errors.As(err, &ie) {
				t.Errorf("%T is not an *IgnitionError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
		})
	}
}

func TestMergeWarnsOfUnknownKeys(t *testing.T) {
	in := []byte(`{"ignition": {"version": "3.2.0"}, "storage": {"files": [{"path": "/etc/x", "contents": {"source": "data:,x"}, "colour": "blue"}]}}`)
	m, err := Merge("bootstrap.ign", in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], "bootstrap.ign: $.storage.files.0.colour") {
		t.Errorf("warnings %q", m.Warnings)
	}
}

func TestMergeWarnsOfAReplacingPointer(t *testing.T) {
	for _, v := range []string{"3.0.0", "3.2.0", "3.6.0"} {
		in := fmt.Appendf(nil, `{"ignition": {"version": %q, "config": {"replace": {"source": "https://192.168.126.5:22623/config/worker"}}}}`, v)
		m, err := Merge("worker.ign", in, []File{{Path: NodeConfigPath, Mode: 0o600, Contents: []byte("x")}})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], "worker.ign: $.ignition.config.replace.source: this config is replaced") {
			t.Errorf("%s: warnings %q", v, m.Warnings)
		}
	}
}

// FuzzMerge: on any input Merge either refuses with an error or returns a
// config of the same version that parses, holds the appliance's files once,
// keeps everything else, and is its own fixed point.
func FuzzMerge(f *testing.F) {
	for _, v := range Versions {
		f.Add(fmt.Appendf(nil, pointer, "master", v))
		f.Add(fullConfig(f, v))
	}
	f.Add([]byte(`{"ignition": {"version": "3.2.0"}, "storage": {"files": [{"path": "` + StaticPodPath + `", "append": [{"source": "data:,x"}]}]}}`))
	f.Add([]byte(`{"ignition": {"version": "3.4.0"}, "storage": {"links": [{"path": "/etc/appliance", "target": "/tmp"}]}}`))
	cfg := mustParse(f, testConfigYAML)
	files, err := Files(cfg, cluster.RoleBootstrap, testOptions())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := Merge("fuzz.ign", raw, files)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.ign: ") {
				t.Errorf("error does not name the file: %v", err)
			}
			return
		}
		checkMerged(t, raw, m, files)
	})
}
