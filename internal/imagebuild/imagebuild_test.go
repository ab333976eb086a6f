package imagebuild

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"
)

var created = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

var tiny struct {
	once sync.Once
	dir  string
	err  error
}

// tinyBinary builds testdata/tiny once (static, version baked in) and
// returns its path: a small stand-in for bin/appliance.
func tinyBinary(t *testing.T) string {
	t.Helper()
	tiny.once.Do(func() {
		tiny.dir, tiny.err = os.MkdirTemp("", "imagebuild-tiny-")
		if tiny.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version=v1.2.3-test", "-o", filepath.Join(tiny.dir, "tiny"), "./testdata/tiny")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if out, err := cmd.CombinedOutput(); err != nil {
			tiny.err = errors.New("go build testdata/tiny: " + err.Error() + "\n" + string(out))
		}
	})
	if tiny.err != nil {
		t.Fatal(tiny.err)
	}
	return filepath.Join(tiny.dir, "tiny")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if tiny.dir != "" {
		os.RemoveAll(tiny.dir)
	}
	os.Exit(code)
}

func options(t *testing.T) Options {
	return Options{Binary: tinyBinary(t), Version: "v1.2.3-test", Revision: "0123456789abcdef", Created: created}
}

func build(t *testing.T, o Options) (Result, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "image.tar")
	res, err := Build(o, "localhost/appliance:"+o.Version, path)
	if err != nil {
		t.Fatal(err)
	}
	return res, path
}

// The same inputs give the same archive, byte for byte, so the same digest;
// any label that changes changes the digest.
func TestBuildIsReproducible(t *testing.T) {
	o := options(t)
	r1, p1 := build(t, o)
	r2, p2 := build(t, o)
	if r1.Digest != r2.Digest {
		t.Fatalf("digests differ: %s, %s", r1.Digest, r2.Digest)
	}
	b1, _ := os.ReadFile(p1)
	b2, _ := os.ReadFile(p2)
	if !bytes.Equal(b1, b2) {
		t.Fatal("the two archives differ")
	}
	o.Version = "v1.2.4-test"
	if r3, _ := build(t, o); r3.Digest == r1.Digest {
		t.Fatal("another version gave the same digest")
	}
	o = options(t)
	o.Created = created.Add(time.Second)
	if r4, _ := build(t, o); r4.Digest == r1.Digest {
		t.Fatal("another creation time gave the same digest")
	}
}

// The archive, read back with go-containerregistry's layout reader, holds
// the config and the one layer the node needs, and the binary runs from it.
func TestArchiveContent(t *testing.T) {
	o := options(t)
	res, path := build(t, o)
	img, err := Open(path, filepath.Join(t.TempDir(), "layout"))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := img.Digest(); d != res.Digest {
		t.Errorf("digest read back %s, Build said %s", d, res.Digest)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("manifest %s, config %s: want OCI media types", m.MediaType, m.Config.MediaType)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer || m.Layers[0].Size != res.LayerSize {
		t.Fatalf("layers %+v, want one gzip OCI layer of %d bytes", m.Layers, res.LayerSize)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || !cf.Created.Time.Equal(created) {
		t.Errorf("config %s/%s created %s", cf.OS, cf.Architecture, cf.Created.Time)
	}
	if !reflect.DeepEqual(cf.Config.Entrypoint, []string{"/appliance"}) || !reflect.DeepEqual(cf.Config.Cmd, DefaultCmd) || cf.Config.User != "0" {
		t.Errorf("entrypoint %q cmd %q user %q", cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User)
	}
	wantLabels := map[string]string{
		LabelTitle:    "appliance",
		LabelVersion:  "v1.2.3-test",
		LabelRevision: "0123456789abcdef",
		LabelCreated:  "2026-11-24T12:00:00Z",
	}
	for k, v := range wantLabels {
		if cf.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], v)
		}
	}
	if len(cf.RootFS.DiffIDs) != 1 || len(cf.History) != 1 {
		t.Errorf("rootfs %+v history %+v: want one layer", cf.RootFS, cf.History)
	}

	// The layer: /appliance alone, root's, 0755, dated at the creation time.
	layers, _ := img.Layers()
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	bin, _ := os.ReadFile(o.Binary)
	tr := tar.NewReader(rc)
	var names []string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		if hdr.Typeflag != tar.TypeReg || hdr.Mode != 0o755 || hdr.Uid != 0 || hdr.Gid != 0 || !hdr.ModTime.Equal(created) {
			t.Errorf("%s: type %q mode %o uid %d gid %d mtime %s", hdr.Name, hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid, hdr.ModTime)
		}
		data, _ := io.ReadAll(tr)
		if !bytes.Equal(data, bin) {
			t.Errorf("%s: %d bytes, not the binary's %d", hdr.Name, len(data), len(bin))
		}
	}
	if !reflect.DeepEqual(names, []string{"appliance"}) {
		t.Errorf("layer entries %q, want [appliance]", names)
	}

	// Taken out of the layer, it runs on its own.
	exe := filepath.Join(t.TempDir(), "appliance")
	if _, err := ExtractFile(img, BinaryPath, exe); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", exe, err)
	}
	if got := strings.TrimSpace(string(out)); got != "tiny v1.2.3-test" {
		t.Errorf("version printed %q", got)
	}
}

// skopeo, the containers tools' own reader, sees the digest, labels,
// entrypoint and platform Build wrote.
func TestSkopeoInspect(t *testing.T) {
	if _, err := exec.LookPath("skopeo"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("skopeo is missing (make test-deps installs it)")
		}
		t.Skip("skopeo is not installed (apt-get install skopeo)")
	}
	res, path := build(t, options(t))
	var inspect struct {
		Digest       string
		Labels       map[string]string
		Architecture string
		Os           string
		Layers       []string
	}
	skopeo(t, &inspect, "inspect", "oci-archive:"+path)
	if inspect.Digest != res.Digest.String() {
		t.Errorf("skopeo digest %s, Build said %s", inspect.Digest, res.Digest)
	}
	if inspect.Architecture != "amd64" || inspect.Os != "linux" || len(inspect.Layers) != 1 {
		t.Errorf("skopeo: %s/%s, %d layers", inspect.Os, inspect.Architecture, len(inspect.Layers))
	}
	if inspect.Labels[LabelVersion] != "v1.2.3-test" || inspect.Labels[LabelTitle] != "appliance" {
		t.Errorf("skopeo labels %v", inspect.Labels)
	}
	var config struct {
		Config struct {
			Entrypoint, Cmd []string
			User            string
		}
	}
	// By the name in the index too, as `podman load` would list it.
	skopeo(t, &config, "inspect", "--config", "oci-archive:"+path+":localhost/appliance:v1.2.3-test")
	if !reflect.DeepEqual(config.Config.Entrypoint, []string{"/appliance"}) || !reflect.DeepEqual(config.Config.Cmd, DefaultCmd) || config.Config.User != "0" {
		t.Errorf("skopeo config %+v", config.Config)
	}
}

func skopeo(t *testing.T, v any, args ...string) {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("skopeo", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("skopeo %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("skopeo %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// What would not run on an empty base is refused before any image is made.
func TestRefusesWhatScratchCannotRun(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ binary, want string }{
		{script, "not an ELF binary"},
		{"/bin/sh", "dynamically linked"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		_, err := Image(Options{Binary: c.binary, Version: "v1", Created: created})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.binary, err, c.want)
		}
	}
	if _, err := Image(Options{Binary: tinyBinary(t), Created: created}); err == nil {
		t.Error("no version: no error")
	}
}

// Layer entries come out sorted whatever the order given, with relative names.
func TestLayerTarSorted(t *testing.T) {
	b, err := LayerTar([]File{{Path: "/z", Mode: 0o644, Data: []byte("z")}, {Path: "/a/b", Mode: 0o600}}, created)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	var got []string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, hdr.Name)
	}
	if !reflect.DeepEqual(got, []string{"a/b", "z"}) {
		t.Errorf("entries %q", got)
	}
	if _, err := LayerTar([]File{{Path: "relative"}}, created); err == nil {
		t.Error("a relative path: no error")
	}
}
