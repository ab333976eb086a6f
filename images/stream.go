package images

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/coreos/stream-metadata-go/stream"
)

// DefaultStreamURL is the RHCOS stream metadata the OpenShift installer
// pins for its current release.
const DefaultStreamURL = "https://raw.githubusercontent.com/openshift/installer/main/data/data/coreos/rhcos.json"

// DefaultArch is the architecture picked when none is given.
const DefaultArch = "x86_64"

// maxStreamBytes bounds a stream document; real ones are a few tens of KiB.
const maxStreamBytes = 16 << 20

// Platform names a platform whose image needs differ.
type Platform string

// Platforms with a known image choice.
const (
	Libvirt  Platform = "libvirt"
	OVirt    Platform = "ovirt"
	KubeVirt Platform = "kubevirt"
)

// Platforms lists every platform Select knows, in display order.
var Platforms = []Platform{Libvirt, OVirt, KubeVirt}

// Flavours, matching how the image reads its Ignition config.
const (
	FlavorQEMU      = "qemu"      // fw_cfg
	FlavorOpenStack = "openstack" // config drive
)

// Compression of a downloaded file.
const (
	CompressionNone = ""
	CompressionGzip = "gzip"
	CompressionXZ   = "xz"
)

// Artifact is one downloadable disk image chosen for a platform.
type Artifact struct {
	Platform Platform
	// Stream and Release identify where it came from, for display.
	Stream, Release, Arch string
	// URL is where the (possibly compressed) file is downloaded from.
	URL string
	// Compression is how the file at URL is compressed: CompressionGzip,
	// CompressionXZ or CompressionNone.
	Compression string
	// DiskFormat is the format after decompression: "qcow2" or "raw".
	DiskFormat string
	// SHA256 is the digest of the file at URL as downloaded; empty when
	// unknown.
	SHA256 string
	// UncompressedSHA256 is the digest after decompression; empty when
	// unknown (it is then computed and remembered on first fetch).
	UncompressedSHA256 string
	// Flavor is FlavorQEMU or FlavorOpenStack.
	Flavor string
	// ContainerDisk is a container image holding the disk, for KubeVirt.
	ContainerDisk string
}

// ParseStream decodes stream metadata: a single stream document, or a
// multi-stream document (an object of stream name to stream, as newer
// installers pin). name picks a stream from a multi-stream document; empty
// picks its only non-empty stream.
func ParseStream(data []byte, name string) (*stream.Stream, error) {
	var probe struct {
		Architectures json.RawMessage `json:"architectures"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("images: parse stream: %w", err)
	}
	if probe.Architectures != nil {
		var st stream.Stream
		if err := json.Unmarshal(data, &st); err != nil {
			return nil, fmt.Errorf("images: parse stream: %w", err)
		}
		if len(st.Architectures) == 0 {
			return nil, fmt.Errorf("images: parse stream: no architectures (is this a CoreOS stream document?)")
		}
		if name != "" && st.Stream != name {
			return nil, fmt.Errorf("images: parse stream: the document is stream %q, not %q", st.Stream, name)
		}
		return &st, nil
	}
	var multi map[string]stream.Stream
	if err := json.Unmarshal(data, &multi); err != nil {
		return nil, fmt.Errorf("images: parse stream: neither a stream nor a map of streams: %w", err)
	}
	var names, full []string
	for n, st := range multi {
		names = append(names, n)
		if len(st.Architectures) > 0 {
			full = append(full, n)
		}
	}
	sort.Strings(names)
	sort.Strings(full)
	if name == "" {
		if len(full) != 1 {
			return nil, fmt.Errorf("images: parse stream: the document holds streams %s; pick one (URL#NAME)", strings.Join(full, ", "))
		}
		name = full[0]
	}
	st, ok := multi[name]
	if !ok {
		return nil, fmt.Errorf("images: parse stream: no stream %q (have %s)", name, strings.Join(names, ", "))
	}
	if len(st.Architectures) == 0 {
		return nil, fmt.Errorf("images: parse stream: stream %q has no architectures", name)
	}
	if st.Stream == "" {
		st.Stream = name
	}
	return &st, nil
}

// LoadStream reads stream metadata from an http(s) URL, a file:// URL or a
// local path; a "#NAME" suffix picks a stream from a multi-stream
// document. client may be nil for http.DefaultClient.
func LoadStream(ctx context.Context, client *http.Client, src string) (*stream.Stream, error) {
	if src == "" {
		src = DefaultStreamURL
	}
	loc, name := src, ""
	if i := strings.LastIndexByte(src, '#'); i >= 0 {
		loc, name = src[:i], src[i+1:]
	}
	var data []byte
	switch {
	case strings.HasPrefix(loc, "http://") || strings.HasPrefix(loc, "https://"):
		if client == nil {
			client = http.DefaultClient
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc, nil)
		if err != nil {
			return nil, fmt.Errorf("images: stream %s: %w", loc, err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("images: stream: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("images: stream %s: %s", loc, resp.Status)
		}
		data, err = io.ReadAll(io.LimitReader(resp.Body, maxStreamBytes+1))
		if err != nil {
			return nil, fmt.Errorf("images: stream %s: %w", loc, err)
		}
	default:
		p := loc
		if u, err := url.Parse(loc); err == nil && u.Scheme == "file" {
			p = u.Path
		}
		var err error
		data, err = os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("images: stream: %w", err)
		}
	}
	if len(data) > maxStreamBytes {
		return nil, fmt.Errorf("images: stream %s: larger than %d bytes", loc, maxStreamBytes)
	}
	st, err := ParseStream(data, name)
	if err != nil {
		return nil, fmt.Errorf("%w (from %s)", err, src)
	}
	return st, nil
}

// Select picks the artifact platform p boots from: libvirt the qemu image
// (Ignition via fw_cfg); oVirt the openstack image (config drive), as the
// installer does; KubeVirt the openstack image's URL for a DataVolume
// import plus the stream's containerDisk when it lists one. A gzip format
// is preferred over xz because this build decompresses gzip only.
func Select(st *stream.Stream, p Platform, arch string) (Artifact, error) {
	if st == nil {
		return Artifact{}, fmt.Errorf("images: select: no stream")
	}
	if arch == "" {
		arch = DefaultArch
	}
	a, ok := st.Architectures[arch]
	if !ok {
		return Artifact{}, fmt.Errorf("images: stream %s has no architecture %q (has %s)", st.Stream, arch, strings.Join(archNames(st), ", "))
	}
	var name, flavor string
	switch p {
	case Libvirt:
		name, flavor = "qemu", FlavorQEMU
	case OVirt, KubeVirt:
		name, flavor = "openstack", FlavorOpenStack
	default:
		return Artifact{}, fmt.Errorf("images: unknown platform %q (want libvirt, ovirt or kubevirt)", p)
	}
	out := Artifact{Platform: p, Stream: st.Stream, Arch: arch, Flavor: flavor}
	if p == KubeVirt && a.Images.KubeVirt != nil {
		out.ContainerDisk = a.Images.KubeVirt.DigestRef
		if out.ContainerDisk == "" {
			out.ContainerDisk = a.Images.KubeVirt.Image
		}
	}
	pa, ok := a.Artifacts[name]
	if !ok {
		if out.ContainerDisk != "" {
			out.Release = a.Images.KubeVirt.Release
			return out, nil
		}
		return Artifact{}, fmt.Errorf("images: stream %s/%s has no %q artifact for %s", st.Stream, arch, name, p)
	}
	out.Release = pa.Release
	for _, f := range []string{"qcow2.gz", "qcow2", "qcow2.xz"} {
		if fm, ok := pa.Formats[f]; ok && fm.Disk != nil && fm.Disk.Location != "" {
			out.URL = fm.Disk.Location
			out.SHA256 = strings.ToLower(fm.Disk.Sha256)
			out.UncompressedSHA256 = strings.ToLower(fm.Disk.UncompressedSha256)
			out.DiskFormat, out.Compression = splitFormat(f)
			if err := checkDigests(out); err != nil {
				return Artifact{}, fmt.Errorf("images: stream %s/%s artifact %q: %w", st.Stream, arch, name, err)
			}
			if out.Compression == CompressionNone && out.UncompressedSHA256 == "" {
				out.UncompressedSHA256 = out.SHA256
			}
			return out, nil
		}
	}
	formats := make([]string, 0, len(pa.Formats))
	for f := range pa.Formats {
		formats = append(formats, f)
	}
	sort.Strings(formats)
	return Artifact{}, fmt.Errorf("images: stream %s/%s artifact %q has no qcow2 disk (formats: %s)", st.Stream, arch, name, strings.Join(formats, ", "))
}

// Custom describes an image the user names by URL instead of a stream.
// sha256 is the digest of the file as downloaded (may be empty, then the
// download is not verified); the compression and disk format follow the
// URL's suffixes (.qcow2.gz, .raw.xz, .img, ...).
func Custom(p Platform, rawURL, sha256, flavor string) (Artifact, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return Artifact{}, fmt.Errorf("images: url %q: want an http or https URL", rawURL)
	}
	if sha256 != "" && !isHexDigest(sha256) {
		return Artifact{}, fmt.Errorf("images: sha256 %q: want 64 hex digits", sha256)
	}
	flavor, err = flavorFor(p, flavor)
	if err != nil {
		return Artifact{}, err
	}
	base := strings.ToLower(path.Base(u.Path))
	disk, comp := splitFormat(base)
	a := Artifact{Platform: p, URL: rawURL, Compression: comp, DiskFormat: disk,
		SHA256: strings.ToLower(sha256), Flavor: flavor, Stream: "custom"}
	if comp == CompressionNone {
		a.UncompressedSHA256 = a.SHA256
	}
	return a, nil
}

// flavorFor checks a user-given flavour, or picks the platform's usual one:
// libvirt boots the qemu image, the others the openstack image.
func flavorFor(p Platform, flavor string) (string, error) {
	switch flavor {
	case "":
		if p == Libvirt {
			return FlavorQEMU, nil
		}
		return FlavorOpenStack, nil
	case FlavorQEMU, FlavorOpenStack:
		return flavor, nil
	}
	return "", fmt.Errorf("images: flavor %q: want qemu or openstack", flavor)
}

// splitFormat reads "qcow2.gz" / "rhcos-x.qcow2.xz" / "disk.img" into a
// disk format and a compression.
func splitFormat(name string) (disk, compression string) {
	switch {
	case strings.HasSuffix(name, ".gz"):
		compression, name = CompressionGzip, strings.TrimSuffix(name, ".gz")
	case strings.HasSuffix(name, ".xz"):
		compression, name = CompressionXZ, strings.TrimSuffix(name, ".xz")
	}
	disk = "raw"
	if name == "qcow2" || strings.HasSuffix(name, ".qcow2") {
		disk = "qcow2"
	}
	return disk, compression
}

func archNames(st *stream.Stream) []string {
	names := make([]string, 0, len(st.Architectures))
	for n := range st.Architectures {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// checkDigests rejects digests that are not hex: they name cache files, so
// a hostile stream must not smuggle a path in.
func checkDigests(a Artifact) error {
	if a.SHA256 != "" && !isHexDigest(a.SHA256) {
		return fmt.Errorf("sha256 %q is not 64 hex digits", a.SHA256)
	}
	if a.UncompressedSHA256 != "" && !isHexDigest(a.UncompressedSHA256) {
		return fmt.Errorf("uncompressed-sha256 %q is not 64 hex digits", a.UncompressedSHA256)
	}
	return nil
}

func isHexDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range strings.ToLower(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Source is where a platform's image comes from, as appliance.yaml or flags
// give it: a URL (with the digest of the file as downloaded and a flavour),
// or else stream metadata (the built-in default when Stream is empty).
type Source struct {
	Platform            Platform
	Stream, Arch        string
	URL, SHA256, Flavor string
}

// Resolve turns s into one downloadable artifact; the stream is read only
// when no URL is given.
func Resolve(ctx context.Context, client *http.Client, s Source) (Artifact, error) {
	if s.URL != "" {
		return Custom(s.Platform, s.URL, s.SHA256, s.Flavor)
	}
	stream := s.Stream
	if stream == "" {
		stream = DefaultStreamURL
	}
	st, err := LoadStream(ctx, client, stream)
	if err != nil {
		return Artifact{}, err
	}
	return Select(st, s.Platform, s.Arch)
}
