package images

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/coreos/stream-metadata-go/stream"
)

const (
	testURLPrefix = "https://rhcos.mirror.openshift.com/art/storage/prod/streams/4.19-9.6/builds/9.6.20250523-0/"
	testRelease   = "9.6.20250523-0"
)

func loadTestStream(t testing.TB) *stream.Stream {
	t.Helper()
	st, err := LoadStream(context.Background(), nil, "testdata/rhcos-stream.json")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestSelect(t *testing.T) {
	st := loadTestStream(t)
	tests := []struct {
		platform Platform
		arch     string
		want     Artifact
	}{
		{Libvirt, "", Artifact{Platform: Libvirt, Stream: "rhcos-4.19", Release: testRelease, Arch: "x86_64",
			URL:         testURLPrefix + "x86_64/rhcos-9.6.20250523-0-qemu.x86_64.qcow2.gz",
			Compression: CompressionGzip, DiskFormat: "qcow2", Flavor: FlavorQEMU,
			SHA256:             "d7ed9d873aa9056f19530b6e1b52426b098029991793d5be91dfeb93fa1ed19a",
			UncompressedSHA256: "c7a0cd980798fe662e2bc2e70d9151043fed9db1df9af70ea6773c65081d144d"}},
		{OVirt, "x86_64", Artifact{Platform: OVirt, Stream: "rhcos-4.19", Release: testRelease, Arch: "x86_64",
			URL:         testURLPrefix + "x86_64/rhcos-9.6.20250523-0-openstack.x86_64.qcow2.gz",
			Compression: CompressionGzip, DiskFormat: "qcow2", Flavor: FlavorOpenStack,
			SHA256:             "01057cdd833b5532c4f8415f9e9a8698e8fcb235f1816b9735c42d2552fb5790",
			UncompressedSHA256: "86e3da489841e6a5a2fae166ea803e7ac67a95777fc1ad5def11a6119e0bcb1f"}},
		{KubeVirt, "x86_64", Artifact{Platform: KubeVirt, Stream: "rhcos-4.19", Release: testRelease, Arch: "x86_64",
			URL:         testURLPrefix + "x86_64/rhcos-9.6.20250523-0-openstack.x86_64.qcow2.gz",
			Compression: CompressionGzip, DiskFormat: "qcow2", Flavor: FlavorOpenStack,
			SHA256:             "01057cdd833b5532c4f8415f9e9a8698e8fcb235f1816b9735c42d2552fb5790",
			UncompressedSHA256: "86e3da489841e6a5a2fae166ea803e7ac67a95777fc1ad5def11a6119e0bcb1f",
			ContainerDisk:      "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:f77b1e2bf63bf5984687310a0eea3b71f3cbf9cd2c4a8efc28d13c3c93bb68e0"}},
		{Libvirt, "aarch64", Artifact{Platform: Libvirt, Stream: "rhcos-4.19", Release: testRelease, Arch: "aarch64",
			URL:         testURLPrefix + "aarch64/rhcos-9.6.20250523-0-qemu.aarch64.qcow2.gz",
			Compression: CompressionGzip, DiskFormat: "qcow2", Flavor: FlavorQEMU,
			SHA256:             "f4efc9bd1d620e3d54989713ed4a7deb735c8ed92ef9370525090a3b36c47c21",
			UncompressedSHA256: "020bec6a529ee048549fc222dc0d4cb84b66fa44a0200a7fd924ccaba35249f8"}},
		// No containerDisk in the aarch64 stream: the DataVolume URL only.
		{KubeVirt, "aarch64", Artifact{Platform: KubeVirt, Stream: "rhcos-4.19", Release: testRelease, Arch: "aarch64",
			URL:         testURLPrefix + "aarch64/rhcos-9.6.20250523-0-openstack.aarch64.qcow2.gz",
			Compression: CompressionGzip, DiskFormat: "qcow2", Flavor: FlavorOpenStack,
			SHA256:             "62613719c0a2e66e8ba0047bc85ae033f2f3602bbd98c1cf9ead2a813aa424ef",
			UncompressedSHA256: "fc1421f29717601a2a0b8c464c8da63fe97845a2d106787cea4c6312b601481c"}},
	}
	for _, tc := range tests {
		t.Run(string(tc.platform)+"/"+tc.arch, func(t *testing.T) {
			got, err := Select(st, tc.platform, tc.arch)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestSelectErrors(t *testing.T) {
	tests := []struct {
		name     string
		edit     func(st *stream.Stream)
		platform Platform
		arch     string
		want     string
	}{
		{"unknown arch", nil, Libvirt, "s390x", `no architecture "s390x" (has aarch64, x86_64)`},
		{"unknown platform", nil, "vsphere", "", `unknown platform "vsphere"`},
		{"no qemu artifact", func(st *stream.Stream) { delete(st.Architectures["x86_64"].Artifacts, "qemu") },
			Libvirt, "", `has no "qemu" artifact for libvirt`},
		{"no qcow2 format", func(st *stream.Stream) {
			pa := st.Architectures["x86_64"].Artifacts["openstack"]
			pa.Formats = map[string]stream.ImageFormat{"raw.gz": pa.Formats["qcow2.gz"], "vmdk.gz": {}}
			st.Architectures["x86_64"].Artifacts["openstack"] = pa
		}, OVirt, "", `has no qcow2 disk (formats: raw.gz, vmdk.gz)`},
		{"path in digest", func(st *stream.Stream) {
			st.Architectures["x86_64"].Artifacts["qemu"].Formats["qcow2.gz"].Disk.UncompressedSha256 = "../../etc/passwd"
		}, Libvirt, "", `uncompressed-sha256 "../../etc/passwd" is not 64 hex digits`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := loadTestStream(t)
			if tc.edit != nil {
				tc.edit(st)
			}
			_, err := Select(st, tc.platform, tc.arch)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestSelectFallbacks(t *testing.T) {
	// Only an xz qcow2: selected (Fetch then reports xz as unsupported).
	st := loadTestStream(t)
	pa := st.Architectures["x86_64"].Artifacts["qemu"]
	pa.Formats = map[string]stream.ImageFormat{"qcow2.xz": pa.Formats["qcow2.gz"]}
	st.Architectures["x86_64"].Artifacts["qemu"] = pa
	a, err := Select(st, Libvirt, "")
	if err != nil {
		t.Fatal(err)
	}
	if a.Compression != CompressionXZ || a.DiskFormat != "qcow2" {
		t.Errorf("got %+v", a)
	}
	f, err := NewFetcher(Options{CacheDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Fetch(context.Background(), a, nil); err == nil || !strings.Contains(err.Error(), "xz-compressed") {
		t.Errorf("fetch xz: %v", err)
	}

	// KubeVirt with a containerDisk but no openstack artifact.
	st = loadTestStream(t)
	delete(st.Architectures["x86_64"].Artifacts, "openstack")
	a, err = Select(st, KubeVirt, "")
	if err != nil {
		t.Fatal(err)
	}
	if a.URL != "" || !strings.HasPrefix(a.ContainerDisk, "quay.io/") || a.Release != testRelease {
		t.Errorf("got %+v", a)
	}
}

func TestCustom(t *testing.T) {
	const sum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		p                    Platform
		url, sha, flavor     string
		comp, disk, wantFlav string
		wantErr              string
	}{
		{Libvirt, "https://example.com/x/rhcos-qemu.x86_64.qcow2.gz", sum, "", CompressionGzip, "qcow2", FlavorQEMU, ""},
		{OVirt, "http://10.0.0.1/rhcos.raw.xz", "", "", CompressionXZ, "raw", FlavorOpenStack, ""},
		{KubeVirt, "https://example.com/disk.qcow2", strings.ToUpper(sum), "qemu", CompressionNone, "qcow2", FlavorQEMU, ""},
		{Libvirt, "ftp://example.com/a.qcow2", "", "", "", "", "", "want an http or https URL"},
		{Libvirt, "https://example.com/a.qcow2", "abc", "", "", "", "", "want 64 hex digits"},
		{Libvirt, "https://example.com/a.qcow2", "", "vmware", "", "", "", "want qemu or openstack"},
	}
	for _, tc := range tests {
		a, err := Custom(tc.p, tc.url, tc.sha, tc.flavor)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Custom(%q): error %v, want %q", tc.url, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Custom(%q): %v", tc.url, err)
			continue
		}
		if a.Compression != tc.comp || a.DiskFormat != tc.disk || a.Flavor != tc.wantFlav || a.SHA256 != strings.ToLower(tc.sha) {
			t.Errorf("Custom(%q) = %+v", tc.url, a)
		}
		if tc.comp == CompressionNone && a.UncompressedSHA256 != a.SHA256 {
			t.Errorf("Custom(%q): uncompressed digest %q", tc.url, a.UncompressedSHA256)
		}
	}
}

func TestLoadStream(t *testing.T) {
	data, err := os.ReadFile("testdata/rhcos-stream.json")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/rhcos.json" {
			http.NotFound(w, r)
			return
		}
		w.Write(data)
	}))
	defer srv.Close()
	ctx := context.Background()
	st, err := LoadStream(ctx, srv.Client(), srv.URL+"/rhcos.json")
	if err != nil || st.Stream != "rhcos-4.19" {
		t.Fatalf("http: %v %v", st, err)
	}
	if _, err := LoadStream(ctx, srv.Client(), srv.URL+"/missing.json"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing: %v", err)
	}
	if _, err := LoadStream(ctx, nil, "file://"+mustAbs(t, "testdata/rhcos-stream.json")); err != nil {
		t.Errorf("file URL: %v", err)
	}
	bad := t.TempDir() + "/bad.json"
	os.WriteFile(bad, []byte(`{"stream":"x","architectures":{}}`), 0o644)
	if _, err := LoadStream(ctx, nil, bad); err == nil || !strings.Contains(err.Error(), "no architectures") || !strings.Contains(err.Error(), bad) {
		t.Errorf("empty stream: %v", err)
	}
}

func TestParseMultiStream(t *testing.T) {
	single, err := os.ReadFile("testdata/rhcos-stream.json")
	if err != nil {
		t.Fatal(err)
	}
	multi := []byte(`{"rhcos-4.21": ` + string(single) + `, "rhel-coreos-10": {}}`)
	two := []byte(`{"a": ` + string(single) + `, "b": ` + string(single) + `}`)
	tests := []struct {
		name, pick string
		data       []byte
		want       string // stream name, or error text
		wantErr    bool
	}{
		{"single", "", single, "rhcos-4.19", false},
		{"single, named", "rhcos-4.19", single, "rhcos-4.19", false},
		{"single, other name", "rhcos-4.20", single, `is stream "rhcos-4.19", not "rhcos-4.20"`, true},
		{"multi, the only full one", "", multi, "rhcos-4.19", false},
		{"multi, named", "rhcos-4.21", multi, "rhcos-4.19", false},
		{"multi, empty one named", "rhel-coreos-10", multi, `stream "rhel-coreos-10" has no architectures`, true},
		{"multi, unknown", "x", multi, `no stream "x" (have rhcos-4.21, rhel-coreos-10)`, true},
		{"multi, ambiguous", "", two, `holds streams a, b; pick one`, true},
		{"not json", "", []byte("<html>"), "parse stream", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, err := ParseStream(tc.data, tc.pick)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.Stream != tc.want {
				t.Errorf("stream %q, want %q", st.Stream, tc.want)
			}
			if _, err := Select(st, Libvirt, ""); err != nil {
				t.Error(err)
			}
		})
	}
	// The #NAME suffix of LoadStream.
	p := t.TempDir() + "/multi.json"
	os.WriteFile(p, multi, 0o644)
	if st, err := LoadStream(context.Background(), nil, p+"#rhcos-4.21"); err != nil || st.Stream != "rhcos-4.19" {
		t.Errorf("LoadStream #name: %v %v", st, err)
	}
}

func mustAbs(t *testing.T, p string) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd + "/" + p
}

// FuzzSelect feeds arbitrary stream documents to the parser and selector:
// neither may panic, and whatever is selected must carry hex digests only
// (they name cache files) and a consistent format.
func FuzzSelect(f *testing.F) {
	data, err := os.ReadFile("testdata/rhcos-stream.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data, "x86_64")
	f.Add([]byte(`{"architectures":{"x86_64":{"artifacts":{"qemu":{"release":"1","formats":{"qcow2":{"disk":{"location":"http://h/a","sha256":"zz"}}}}}}}}`), "x86_64")
	f.Add([]byte(`{"architectures":{"x86_64":{"images":{"kubevirt":{"image":"q"}}}}}`), "")
	f.Add([]byte(`{"s":{"architectures":{"x86_64":{"images":{"kubevirt":{"image":"q"}}}}}}`), "")
	f.Fuzz(func(t *testing.T, data []byte, arch string) {
		st, err := ParseStream(data, "")
		if err != nil {
			return
		}
		for _, p := range Platforms {
			a, err := Select(st, p, arch)
			if err != nil {
				continue
			}
			if checkDigests(a) != nil {
				t.Fatalf("%s: selected bad digests %+v", p, a)
			}
			if a.URL == "" && a.ContainerDisk == "" {
				t.Fatalf("%s: selected nothing: %+v", p, a)
			}
			if a.URL != "" && a.DiskFormat != "qcow2" {
				t.Fatalf("%s: disk format %q", p, a.DiskFormat)
			}
		}
	})
}
