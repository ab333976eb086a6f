//go:build bench

package images

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestBenchImageFetch measures Fetch (download + one-pass compressed and
// uncompressed sha256 + gunzip + cache write) of a gzip image served over
// loopback, next to the shell pipelines a user would otherwise run on the
// same file in the same run.
//
//	go test -tags bench -run '^TestBenchImageFetch$' -v ./images/
//
// IMAGES_BENCH_MIB sets the uncompressed size (default 1024, which makes
// a ~580 MiB gzip file); it needs about 3.5 times that in $TMPDIR.
func TestBenchImageFetch(t *testing.T) {
	for _, tool := range []string{"curl", "gunzip", "sha256sum", "tee", "sync", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	mib := 1024
	if v := os.Getenv("IMAGES_BENCH_MIB"); v != "" {
		fmt.Sscan(v, &mib)
	}
	dir := t.TempDir() // removed with everything in it, pass or fail
	gzPath := filepath.Join(dir, "rhcos-qemu.x86_64.qcow2.gz")
	start := time.Now()
	rawSum, gzSum, gzSize := writeBenchImage(t, gzPath, int64(mib)<<20)
	t.Logf("made %d MiB image, %d MiB gzip, in %v", mib, gzSize>>20, time.Since(start).Round(time.Millisecond))

	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()
	url := srv.URL + "/" + filepath.Base(gzPath)
	art := Artifact{Platform: Libvirt, URL: url, Compression: CompressionGzip, DiskFormat: "qcow2",
		Flavor: FlavorQEMU, SHA256: gzSum, UncompressedSHA256: rawSum}

	type result struct {
		name, note string
		best       time.Duration
	}
	const runs = 2
	measure := func(name, note string, run func(i int) error) result {
		r := result{name: name, note: note}
		for i := range runs {
			t0 := time.Now()
			if err := run(i); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if d := time.Since(t0); r.best == 0 || d < r.best {
				r.best = d
			}
		}
		return r
	}
	shell := func(cmd, want string) func(int) error {
		return func(int) error {
			out, err := exec.Command("sh", "-c", cmd).Output()
			if err != nil {
				return err
			}
			if got, _, _ := strings.Cut(string(out), " "); got != want {
				return fmt.Errorf("digest %s, want %s", got, want)
			}
			return nil
		}
	}
	results := []result{
		measure("appliance images fetch", "gunzip + 2×sha256 + writes .part and image, fsync", func(i int) error {
			cache := filepath.Join(dir, fmt.Sprintf("cache-%d", i))
			defer os.RemoveAll(cache)
			f, err := NewFetcher(Options{CacheDir: cache}, nil)
			if err != nil {
				return err
			}
			img, err := f.Fetch(context.Background(), art, nil)
			if err == nil && img.SHA256 != rawSum {
				err = fmt.Errorf("digest %s", img.SHA256)
			}
			return err
		}),
		measure("curl \\| gunzip \\| sha256sum", "no disk writes", shell("curl -sf "+url+" | gunzip | sha256sum", rawSum)),
		measure("curl \\| tee gz \\| gunzip \\| tee img \\| sha256sum; sync", "same disk writes as fetch; no compressed digest, no resume",
			shell(fmt.Sprintf("curl -sf %s | tee %s/a.gz | gunzip | tee %s/a.img | sha256sum && sync %s/a.gz %s/a.img && rm %s/a.gz %s/a.img",
				url, dir, dir, dir, dir, dir, dir), rawSum)),
		measure("curl \\| sha256sum", "compressed digest only, no gunzip, no disk writes", shell("curl -sf "+url+" | sha256sum", gzSum)),
	}
	anchor := results[1].best
	var b strings.Builder
	fmt.Fprintf(&b, "\nImage fetch over loopback: %d MiB qcow2 (gzip %d MiB), best of %d, %d CPUs\n\n", mib, gzSize>>20, runs, runtimeCPUs())
	b.WriteString("| pipeline | wall s | download MB/s | image MB/s | time vs curl\\|gunzip\\|sha256sum | notes |\n|---|---|---|---|---|---|\n")
	for _, r := range results {
		s := r.best.Seconds()
		fmt.Fprintf(&b, "| %s | %.2f | %.0f | %.0f | %.2f× | %s |\n", r.name, s, float64(gzSize)/1e6/s,
			float64(int64(mib)<<20)/1e6/s, r.best.Seconds()/anchor.Seconds(), r.note)
	}
	t.Log(b.String())
}

// writeBenchImage writes a gzip file of size bytes shaped like a disk
// image (64 KiB extents: 40% random, 30% low-entropy, 30% zeros, so it
// compresses about 2:1 like RHCOS) and returns the uncompressed and compressed digests and
// the compressed size.
func writeBenchImage(t *testing.T, p string, size int64) (rawSum, gzSum string, gzSize int64) {
	fl, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	gh := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(fl, gh), 1<<20)
	zw, err := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	rh := sha256.New()
	w := io.MultiWriter(zw, rh)
	r := rand.New(rand.NewChaCha8([32]byte{7}))
	buf := make([]byte, 64<<10)
	zero := make([]byte, 64<<10)
	for off := int64(0); off < size; off += int64(len(buf)) {
		chunk := buf
		switch k := r.IntN(10); {
		case k < 4: // compressed or encrypted data: incompressible
			for i := 0; i < len(buf); i += 8 {
				v := r.Uint64()
				for j := range 8 {
					buf[i+j] = byte(v >> (8 * j))
				}
			}
		case k < 7: // low-entropy data: exercises the Huffman decoder
			for i := 0; i < len(buf); i += 16 {
				v := r.Uint64()
				for j := range 16 {
					buf[i+j] = 'a' + byte(v>>(4*j))&0xf
				}
			}
		default: // unallocated space
			chunk = zero
		}
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	fi, err := fl.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(rh.Sum(nil)), hex.EncodeToString(gh.Sum(nil)), fi.Size()
}

func runtimeCPUs() int { return runtime.NumCPU() }
