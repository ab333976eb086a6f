package kubeletnode

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ImageRef reads an OCI archive (what `make image` writes) and returns the
// reference by digest a static pod pins it with: the repository its
// index.json names the image by (org.opencontainers.image.ref.name, the tag
// cut) and the manifest's digest, e.g. localhost/appliance@sha256:....
// start.sh imports the archive under that reference, so nothing is pulled.
func ImageRef(archive string) (string, error) {
	f, err := os.Open(archive)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", archive, err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("image %s: no index.json: not an OCI archive", archive)
		}
		if err != nil {
			return "", fmt.Errorf("image %s: %w", archive, err)
		}
		if strings.TrimPrefix(h.Name, "./") != "index.json" {
			continue
		}
		var index struct {
			Manifests []struct {
				Digest      string            `json:"digest"`
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			return "", fmt.Errorf("image %s: index.json: %w", archive, err)
		}
		if len(index.Manifests) != 1 {
			return "", fmt.Errorf("image %s: index.json lists %d images, want one", archive, len(index.Manifests))
		}
		m := index.Manifests[0]
		name := m.Annotations["org.opencontainers.image.ref.name"]
		if name == "" {
			name = m.Annotations["io.containerd.image.name"]
		}
		// The tag goes: a colon after the last slash (a registry's port
		// comes before it).
		if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
			name = name[:i]
		}
		if name == "" || !strings.HasPrefix(m.Digest, "sha256:") {
			return "", fmt.Errorf("image %s: index.json names no repository or digest (%q, %q)", archive, name, m.Digest)
		}
		return name + "@" + m.Digest, nil
	}
}
