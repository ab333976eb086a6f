package kubeletnode

import (
	"archive/tar"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeArchive writes a tar holding index.json with the given contents.
func writeArchive(t *testing.T, index string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, e := range []struct{ name, body string }{{"oci-layout", `{"imageLayoutVersion":"1.0.0"}`}, {"index.json", index}} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestImageRef(t *testing.T) {
	const digest = "sha256:72dfc4a5b729a06d2e1194bca67857972025d1dfa703c414a6f3c5c40df1a9a1"
	for _, tc := range []struct{ index, want, err string }{
		{`{"manifests":[{"digest":"` + digest + `","annotations":{"org.opencontainers.image.ref.name":"localhost/appliance:v1.2-3-gabc"}}]}`,
			"localhost/appliance@" + digest, ""},
		{`{"manifests":[{"digest":"` + digest + `","annotations":{"io.containerd.image.name":"registry.example.com:5000/infra/appliance:v1"}}]}`,
			"registry.example.com:5000/infra/appliance@" + digest, ""},
		{`{"manifests":[{"digest":"` + digest + `","annotations":{"org.opencontainers.image.ref.name":"registry.example.com:5000/appliance"}}]}`,
			"registry.example.com:5000/appliance@" + digest, ""},
		{`{"manifests":[]}`, "", "lists 0 images"},
		{`{"manifests":[{"digest":"` + digest + `"}]}`, "", "names no repository"},
	} {
		got, err := ImageRef(writeArchive(t, tc.index))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %q, %v; want an error saying %q", tc.index, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.index, got, err, tc.want)
		}
	}
}

// TestFindToolsSaysHowToBuild: without the binaries, the error is
// ErrNotBuilt and names build.sh.
func TestFindToolsSaysHowToBuild(t *testing.T) {
	dir := t.TempDir()
	if _, err := FindTools(dir, ""); err == nil || !strings.Contains(err.Error(), "start.sh") {
		t.Errorf("no scripts: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "start.sh"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	_, err := FindTools(dir, "")
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), filepath.Join(dir, "build.sh")) {
		t.Errorf("no binaries: %v; want ErrNotBuilt naming %s", err, filepath.Join(dir, "build.sh"))
	}
	_, err = FindTools(dir, t.TempDir())
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "has no kubelet") {
		t.Errorf("an empty assets folder: %v", err)
	}
}
