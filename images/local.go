package images

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
)

// qcow2Magic opens every qcow2 file ("QFI\xfb").
var qcow2Magic = []byte{'Q', 'F', 'I', 0xfb}

// Local describes an uncompressed image file the user already has, so it
// can be used without a download: it reads the file once to learn its
// digest (checked against wantSHA256 when that is set) and its format from
// its header. flavor "" takes the platform's usual one.
func Local(path string, p Platform, flavor, wantSHA256 string) (Image, error) {
	flavor, err := flavorFor(p, flavor)
	if err != nil {
		return Image{}, err
	}
	if strings.HasSuffix(path, ".gz") || strings.HasSuffix(path, ".xz") {
		return Image{}, fmt.Errorf("images: %s is compressed; decompress it first, or serve it and give its url", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return Image{}, fmt.Errorf("images: local image: %w", err)
	}
	defer f.Close()
	head := make([]byte, len(qcow2Magic))
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return Image{}, fmt.Errorf("images: read %s: %w", path, err)
	}
	format := "raw"
	if n == len(head) && bytes.Equal(head, qcow2Magic) {
		format = "qcow2"
	}
	h := sha256.New()
	h.Write(head[:n])
	rest, err := io.Copy(h, f)
	if err != nil {
		return Image{}, fmt.Errorf("images: read %s: %w", path, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if wantSHA256 != "" && !strings.EqualFold(sum, wantSHA256) {
		return Image{}, fmt.Errorf("images: %s: sha256 mismatch: expected %s, got %s (is provision.image.sha256 for another file?)", path, strings.ToLower(wantSHA256), sum)
	}
	return Image{Path: path, Format: format, SHA256: sum, Size: int64(n) + rest, Flavor: flavor}, nil
}
