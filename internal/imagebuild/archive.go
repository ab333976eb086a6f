package imagebuild

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Result says what Build wrote.
type Result struct {
	// Digest is the image manifest's digest: what a reference by digest
	// (repo@sha256:...) names, in the archive and after `skopeo copy` to a
	// registry, which keeps an OCI manifest as it is.
	Digest v1.Hash
	// LayerSize is the compressed layer's size (what a node pulls), and
	// BinarySize the binary's.
	LayerSize  int64
	BinarySize int64
}

// Build writes the image for o to the OCI archive at path (replaced whole,
// never left half-written), naming it refName inside the archive.
func Build(o Options, refName, path string) (Result, error) {
	img, err := Image(o)
	if err != nil {
		return Result{}, err
	}
	if err := WriteArchive(img, refName, o.Created, path); err != nil {
		return Result{}, err
	}
	var r Result
	if r.Digest, err = img.Digest(); err != nil {
		return Result{}, fmt.Errorf("imagebuild: digest: %w", err)
	}
	m, err := img.Manifest()
	if err != nil {
		return Result{}, fmt.Errorf("imagebuild: manifest: %w", err)
	}
	for _, l := range m.Layers {
		r.LayerSize += l.Size
	}
	if st, err := os.Stat(o.Binary); err == nil {
		r.BinarySize = st.Size()
	}
	return r, nil
}

// WriteArchive writes img as an OCI archive: a tar of an OCI image layout
// (oci-layout, index.json, blobs/sha256/...) with sorted entries owned by
// root and dated mtime, so the archive's bytes repeat too.
func WriteArchive(img v1.Image, refName string, mtime time.Time, path string) error {
	dir, err := os.MkdirTemp("", "imagebuild-")
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("imagebuild: layout: %w", err)
	}
	// The blobs, then the index entry written out here: AppendImage's entry
	// would carry an artifactType, which the image spec keeps for artifacts.
	if err := lp.WriteImage(img); err != nil {
		return fmt.Errorf("imagebuild: layout: %w", err)
	}
	var desc v1.Descriptor
	if desc.MediaType, err = img.MediaType(); err != nil {
		return fmt.Errorf("imagebuild: media type: %w", err)
	}
	if desc.Digest, err = img.Digest(); err != nil {
		return fmt.Errorf("imagebuild: digest: %w", err)
	}
	if desc.Size, err = img.Size(); err != nil {
		return fmt.Errorf("imagebuild: manifest size: %w", err)
	}
	if refName != "" {
		desc.Annotations = map[string]string{LabelRefName: refName}
	}
	if err := lp.AppendDescriptor(desc); err != nil {
		return fmt.Errorf("imagebuild: layout: %w", err)
	}

	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if err := tarDir(tmp, dir, mtime.UTC().Truncate(time.Second)); err != nil {
		tmp.Close()
		return fmt.Errorf("imagebuild: %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("imagebuild: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	return nil
}

// tarDir writes dir's tree to w in path order with fixed metadata.
func tarDir(w io.Writer, dir string, mtime time.Time) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		switch {
		case st.IsDir():
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
		case st.Mode().IsRegular():
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, st.Size()
		default:
			return fmt.Errorf("%s: unexpected file type %s in the layout", rel, st.Mode().Type())
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			if err := copyFile(tw, p); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

func copyFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// Open unpacks the OCI archive at path into dir (which must exist) and
// returns its one image, read back with go-containerregistry's layout reader.
func Open(path, dir string) (v1.Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	defer f.Close()
	if err := untar(f, dir); err != nil {
		return nil, fmt.Errorf("imagebuild: %s: %w", path, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %s: %w", path, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %s: %w", path, err)
	}
	if len(im.Manifests) != 1 {
		return nil, fmt.Errorf("imagebuild: %s: %d images in the archive, want 1", path, len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %s: %w", path, err)
	}
	return img, nil
}

func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.FromSlash(hdr.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("entry %q leaves the archive", hdr.Name)
		}
		p := filepath.Join(dir, name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := writeFile(p, tr, 0o644); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: unexpected type %q", hdr.Name, hdr.Typeflag)
		}
	}
}

func writeFile(p string, r io.Reader, mode os.FileMode) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil { // the umask may have narrowed it
		f.Close()
		return err
	}
	return f.Close()
}

// ExtractFile copies the file at name (an absolute path in the image) from
// img's layers to dst with its mode, and returns its tar header: how a
// runtime would find it, to check the layer holds what it should.
func ExtractFile(img v1.Image, name, dst string) (*tar.Header, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	want := strings.TrimPrefix(name, "/")
	var found *tar.Header
	// The top layer wins, as in a runtime's union.
	for i := len(layers) - 1; i >= 0 && found == nil; i-- {
		rc, err := layers[i].Uncompressed()
		if err != nil {
			return nil, fmt.Errorf("imagebuild: layer %d: %w", i, err)
		}
		tr := tar.NewReader(rc)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rc.Close()
				return nil, fmt.Errorf("imagebuild: layer %d: %w", i, err)
			}
			if strings.TrimPrefix(hdr.Name, "./") != want || hdr.Typeflag != tar.TypeReg {
				continue
			}
			if err := writeFile(dst, tr, os.FileMode(hdr.Mode).Perm()); err != nil {
				rc.Close()
				return nil, fmt.Errorf("imagebuild: %w", err)
			}
			found = hdr
			break
		}
		rc.Close()
	}
	if found == nil {
		return nil, fmt.Errorf("imagebuild: %s is in no layer", name)
	}
	return found, nil
}
