package images

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLocal(t *testing.T) {
	dir := t.TempDir()
	qcow := append([]byte{'Q', 'F', 'I', 0xfb}, make([]byte, 4096)...)
	raw := []byte("raw disk bytes")
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	qp, rp, tiny := write("a.qcow2", qcow), write("b.img", raw), write("c", []byte("QF"))

	cases := []struct {
		name                 string
		path                 string
		p                    Platform
		flavor, sha          string
		wantFormat, wantFlav string
		wantErr              string
	}{
		{name: "qcow2 libvirt", path: qp, p: Libvirt, wantFormat: "qcow2", wantFlav: FlavorQEMU},
		{name: "qcow2 ovirt verified", path: qp, p: OVirt, sha: strings.ToUpper(sum(qcow)), wantFormat: "qcow2", wantFlav: FlavorOpenStack},
		{name: "raw", path: rp, p: Libvirt, flavor: FlavorOpenStack, wantFormat: "raw", wantFlav: FlavorOpenStack},
		{name: "shorter than magic", path: tiny, p: Libvirt, wantFormat: "raw", wantFlav: FlavorQEMU},
		{name: "mismatch", path: qp, p: Libvirt, sha: sum(raw), wantErr: "sha256 mismatch: expected " + sum(raw)},
		{name: "compressed", path: write("d.qcow2.gz", raw), p: Libvirt, wantErr: "is compressed"},
		{name: "missing", path: filepath.Join(dir, "nope"), p: Libvirt, wantErr: "no such file"},
		{name: "bad flavor", path: qp, p: Libvirt, flavor: "vmware", wantErr: "want qemu or openstack"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			img, err := Local(tc.path, tc.p, tc.flavor, tc.sha)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			data, _ := os.ReadFile(tc.path)
			if img.Format != tc.wantFormat || img.Flavor != tc.wantFlav || img.SHA256 != sum(data) || img.Size != int64(len(data)) || img.Path != tc.path {
				t.Errorf("image = %+v", img)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	ctx := t.Context()
	a, err := Resolve(ctx, nil, Source{Platform: OVirt, URL: "https://mirror.example/rhcos-openstack.x86_64.qcow2.gz", SHA256: strings.Repeat("ab", 32)})
	if err != nil || a.Stream != "custom" || a.Flavor != FlavorOpenStack || a.Compression != CompressionGzip {
		t.Fatalf("url source: %+v %v", a, err)
	}
	stream, err := filepath.Abs("testdata/rhcos-stream.json")
	if err != nil {
		t.Fatal(err)
	}
	a, err = Resolve(ctx, nil, Source{Platform: Libvirt, Stream: stream})
	if err != nil || a.Flavor != FlavorQEMU || a.URL == "" {
		t.Fatalf("stream source: %+v %v", a, err)
	}
	if _, err := Resolve(ctx, nil, Source{Platform: Libvirt, Stream: filepath.Join(t.TempDir(), "none.json")}); err == nil {
		t.Fatal("a missing stream file resolved")
	}
}
