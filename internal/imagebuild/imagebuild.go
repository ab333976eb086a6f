package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BinaryPath is where the binary sits in the image.
const BinaryPath = "/appliance"

// The OCI annotation keys used as labels (image-spec annotations.md).
const (
	LabelTitle       = "org.opencontainers.image.title"
	LabelDescription = "org.opencontainers.image.description"
	LabelVersion     = "org.opencontainers.image.version"
	LabelRevision    = "org.opencontainers.image.revision"
	LabelCreated     = "org.opencontainers.image.created"
	// LabelRefName names the image inside the archive's index.json, as
	// `skopeo inspect oci-archive:FILE:NAME` and `podman load` read it.
	LabelRefName = "org.opencontainers.image.ref.name"
)

// Options describe one image.
type Options struct {
	// Binary is the path of the static linux/amd64 binary put at /appliance.
	Binary string
	// Version and Revision go into the labels (the binary's own version and
	// the source commit).
	Version  string
	Revision string
	// Created is the image's creation time, and every file's mtime: a fixed
	// time (the commit's) so that rebuilding gives the same digest.
	Created time.Time
	// Cmd follows the entrypoint; DefaultCmd when nil.
	Cmd []string
	// CompressionLevel is the layer's gzip level; 6 (gzip's default) when 0:
	// on the node binary 9 saves 0.4% for eight times the time, 1 costs 16%.
	CompressionLevel int
}

// DefaultCmd runs the node's services from the config the static pod mounts.
var DefaultCmd = []string{"run", "--config", "/etc/appliance/appliance.yaml"}

// Image builds the image in memory: an empty base, one layer with the
// binary, and a config naming it as the entrypoint.
func Image(o Options) (v1.Image, error) {
	if o.Version == "" {
		return nil, errors.New("imagebuild: no version")
	}
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	if err := checkStatic(bin); err != nil {
		return nil, fmt.Errorf("imagebuild: %s: %w", o.Binary, err)
	}
	created := o.Created.UTC().Truncate(time.Second)
	layerTar, err := LayerTar([]File{{Path: BinaryPath, Mode: 0o755, Data: bin}}, created)
	if err != nil {
		return nil, err
	}
	level := o.CompressionLevel
	if level == 0 {
		level = gzip.DefaultCompression
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(level), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: layer: %w", err)
	}

	cmd := o.Cmd
	if cmd == nil {
		cmd = DefaultCmd
	}
	labels := map[string]string{
		LabelTitle:       "appliance",
		LabelDescription: "VIPs, DNS, load balancing and DHCP for an OpenShift cluster, run on its own nodes",
		LabelVersion:     o.Version,
		LabelCreated:     created.Format(time.RFC3339),
	}
	if o.Revision != "" {
		labels[LabelRevision] = o.Revision
	}
	cfg := &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      v1.Time{Time: created},
		Config: v1.Config{
			Entrypoint: []string{BinaryPath},
			Cmd:        cmd,
			// Root, numerically (scratch has no /etc/passwd): the services
			// need NET_ADMIN, NET_RAW and NET_BIND_SERVICE, which the static
			// pod grants as capabilities, and a non-root process would not
			// hold them in its effective set without file capabilities.
			User:   "0",
			Labels: labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: config: %w", err)
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "make image: " + BinaryPath,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("imagebuild: append layer: %w", err)
	}
	return img, nil
}

// File is one regular file of a layer.
type File struct {
	Path string // absolute path in the image
	Mode int64  // permission bits
	Data []byte
}

// LayerTar returns an uncompressed layer holding files, owned by root, with
// mtime set to mtime and entries sorted by path, so that the same files give
// the same bytes. Parent directories are not added: the runtime creates them.
func LayerTar(files []File, mtime time.Time) ([]byte, error) {
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range sorted {
		name := filepath.ToSlash(filepath.Clean(f.Path))
		if !filepath.IsAbs(f.Path) || name == "/" {
			return nil, fmt.Errorf("imagebuild: layer path %q must be an absolute file path", f.Path)
		}
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     name[1:], // layer entries are relative to the root
			Mode:     f.Mode,
			Size:     int64(len(f.Data)),
			ModTime:  mtime,
			Uname:    "root",
			Gname:    "root",
			Format:   tar.FormatPAX,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("imagebuild: layer %s: %w", f.Path, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("imagebuild: layer %s: %w", f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("imagebuild: layer: %w", err)
	}
	return buf.Bytes(), nil
}

// checkStatic refuses what would not run on an empty base: a binary for
// another machine, or one that needs a dynamic loader.
func checkStatic(bin []byte) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not an ELF binary: %w", err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("built for %s, the image is linux/amd64", f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked (build with CGO_ENABLED=0); the image has no libc")
		}
	}
	return nil
}
