package images

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// imageServer serves one file with byte-range support and knobs to cut
// the connection, ignore Range, or go slowly.
type imageServer struct {
	data []byte

	mu          sync.Mutex
	requests    int
	ranges      []string
	sent        int64
	cutAfter    int64 // cut the next response after this many body bytes
	ignoreRange bool
	chunkDelay  time.Duration
}

func (s *imageServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests++
	s.ranges = append(s.ranges, r.Header.Get("Range"))
	cut, ignore, delay := s.cutAfter, s.ignoreRange, s.chunkDelay
	s.cutAfter = 0
	s.mu.Unlock()

	start := 0
	status := http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" && !ignore {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rg, "bytes="), "-"))
		if err != nil {
			http.Error(w, "bad range", http.StatusBadRequest)
			return
		}
		if n >= len(s.data) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(s.data)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start, status = n, http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", n, len(s.data)-1, len(s.data)))
	}
	body := s.data[start:]
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	const chunk = 64 << 10
	for off := 0; off < len(body); off += chunk {
		end := min(off+chunk, len(body))
		if cut > 0 && int64(end) > cut {
			end = int(cut)
		}
		n, err := w.Write(body[off:end])
		s.mu.Lock()
		s.sent += int64(n)
		s.mu.Unlock()
		if err != nil || r.Context().Err() != nil {
			return // the client hung up
		}
		if cut > 0 && int64(end) >= cut {
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		if delay > 0 {
			w.(http.Flusher).Flush()
			time.Sleep(delay)
		}
	}
}

func (s *imageServer) stats() (requests int, sent int64, ranges []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, s.sent, slices.Clone(s.ranges)
}

func (s *imageServer) set(fn func(s *imageServer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s)
}

func (s *imageServer) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests, s.sent, s.ranges = 0, 0, nil
}

// testImage is a fake qcow2 of n bytes: compressible runs mixed with noise,
// so gzip neither shrinks it to nothing nor leaves it as is.
func testImage(n int) []byte {
	r := rand.New(rand.NewChaCha8([32]byte{1}))
	b := make([]byte, n)
	copy(b, "QFI\xfb")
	for off := 4; off < n; off += 4096 {
		if r.IntN(2) == 0 {
			end := min(off+4096, n)
			for i := off; i < end; i += 8 {
				v := r.Uint64()
				for j := 0; j < 8 && i+j < end; j++ {
					b[i+j] = byte(v >> (8 * j))
				}
			}
		}
	}
	return b
}

func gz(t testing.TB, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

type fixture struct {
	raw, gz []byte
	srv     *imageServer
	url     string
	art     Artifact
	dir     string
}

func newFixture(t *testing.T, size int) *fixture {
	t.Helper()
	fx := &fixture{raw: testImage(size), dir: t.TempDir()}
	fx.gz = gz(t, fx.raw)
	fx.srv = &imageServer{data: fx.gz}
	hs := httptest.NewServer(fx.srv)
	t.Cleanup(hs.Close)
	fx.url = hs.URL + "/rhcos-qemu.x86_64.qcow2.gz"
	fx.art = Artifact{Platform: Libvirt, URL: fx.url, Compression: CompressionGzip, DiskFormat: "qcow2",
		Flavor: FlavorQEMU, SHA256: hexSum(fx.gz), UncompressedSHA256: hexSum(fx.raw)}
	return fx
}

func (fx *fixture) fetcher(t *testing.T, retries int) *Fetcher {
	t.Helper()
	f, err := NewFetcher(Options{CacheDir: fx.dir, Retries: retries, RetryDelay: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// checkImage asserts img is the fixture's image, complete, with no
// leftovers beside it but the lock file.
func (fx *fixture) checkImage(t *testing.T, img Image) {
	t.Helper()
	got, err := os.ReadFile(img.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, fx.raw) {
		t.Fatalf("image content differs (%d bytes, want %d)", len(got), len(fx.raw))
	}
	want := Image{Path: filepath.Join(fx.dir, "sha256-"+hexSum(fx.raw)+".qcow2"), Format: "qcow2",
		SHA256: hexSum(fx.raw), Size: int64(len(fx.raw)), Flavor: FlavorQEMU, URL: fx.url}
	if img != want {
		t.Errorf("image\n got %+v\nwant %+v", img, want)
	}
	for _, e := range dirNames(t, fx.dir) {
		if e != filepath.Base(want.Path) && !strings.HasSuffix(e, ".lock") && !strings.HasPrefix(e, "ref-") {
			t.Errorf("leftover file %s in cache", e)
		}
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestFetchGzip(t *testing.T) {
	fx := newFixture(t, 4<<20)
	var last, total int64
	calls := 0
	img, err := fx.fetcher(t, 0).Fetch(context.Background(), fx.art, func(d, tot int64) { last, total = d, tot; calls++ })
	if err != nil {
		t.Fatal(err)
	}
	fx.checkImage(t, img)
	if last != int64(len(fx.gz)) || total != int64(len(fx.gz)) || calls < 2 {
		t.Errorf("progress ended at %d/%d after %d calls, want %d", last, total, calls, len(fx.gz))
	}
	if req, sent, _ := fx.srv.stats(); req != 1 || sent != int64(len(fx.gz)) {
		t.Errorf("server: %d requests, %d bytes", req, sent)
	}
}

func TestFetchPlain(t *testing.T) {
	fx := newFixture(t, 1<<20)
	fx.srv.data = fx.raw
	fx.art.Compression, fx.art.SHA256 = CompressionNone, hexSum(fx.raw)
	img, err := fx.fetcher(t, 0).Fetch(context.Background(), fx.art, nil)
	if err != nil {
		t.Fatal(err)
	}
	fx.checkImage(t, img)
}

func TestFetchResumeAfterCut(t *testing.T) {
	fx := newFixture(t, 4<<20)
	cut := int64(len(fx.gz) / 3)
	fx.srv.cutAfter = cut
	f := fx.fetcher(t, -1)
	_, err := f.Fetch(context.Background(), fx.art, nil)
	var ce *cutError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "kept for resume") {
		t.Fatalf("first fetch: %v, want a cut", err)
	}
	part := filepath.Join(fx.dir, cacheKey(fx.art)+".part")
	if fi, err := os.Stat(part); err != nil || fi.Size() != cut {
		t.Fatalf("partial file: %v %v, want %d bytes", fi, err, cut)
	}
	if _, ok := f.Lookup(fx.art); ok {
		t.Fatal("partial download taken for complete")
	}
	fx.srv.reset()
	var first int64 = -1
	img, err := f.Fetch(context.Background(), fx.art, func(d, _ int64) {
		if first < 0 {
			first = d
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	fx.checkImage(t, img)
	req, sent, ranges := fx.srv.stats()
	if req != 1 || ranges[0] != fmt.Sprintf("bytes=%d-", cut) || sent != int64(len(fx.gz))-cut {
		t.Errorf("resume: %d requests, ranges %q, %d bytes sent, want 1, bytes=%d-, %d", req, ranges, sent, cut, int64(len(fx.gz))-cut)
	}
	if first != 0 {
		t.Errorf("first progress report %d, want 0", first)
	}
}

func TestFetchResumesWithinOneCall(t *testing.T) {
	fx := newFixture(t, 2<<20)
	fx.srv.cutAfter = int64(len(fx.gz) / 2)
	img, err := fx.fetcher(t, 2).Fetch(context.Background(), fx.art, nil)
	if err != nil {
		t.Fatal(err)
	}
	fx.checkImage(t, img)
	req, sent, ranges := fx.srv.stats()
	if req != 2 || ranges[0] != "" || !strings.HasPrefix(ranges[1], "bytes=") || sent != int64(len(fx.gz)) {
		t.Errorf("%d requests, ranges %q, %d bytes sent (file %d)", req, ranges, sent, len(fx.gz))
	}
}

func TestFetchServerIgnoresRange(t *testing.T) {
	fx := newFixture(t, 2<<20)
	fx.srv.cutAfter = int64(len(fx.gz) / 2)
	f := fx.fetcher(t, -1)
	if _, err := f.Fetch(context.Background(), fx.art, nil); err == nil {
		t.Fatal("first fetch succeeded despite the cut")
	}
	fx.srv.reset()
	fx.srv.set(func(s *imageServer) { s.ignoreRange = true })
	img, err := f.Fetch(context.Background(), fx.art, nil)
	if err != nil {
		t.Fatal(err)
	}
	fx.checkImage(t, img)
	if req, sent, ranges := fx.srv.stats(); req != 1 || ranges[0] == "" || sent != int64(len(fx.gz)) {
		t.Errorf("%d requests, ranges %q, %d bytes sent", req, ranges, sent)
	}
}

// A partial file that is already complete (killed between the last byte
// and the rename) is finished from the 416 answer without a body.
func TestFetchCompletePartial(t *testing.T) {
	fx := newFixture(t, 1<<20)
	os.WriteFile(filepath.Join(fx.dir, cacheKey(fx.art)+".part"), fx.gz, 0o644)
	img, err := fx.fetcher(t, 0).Fetch(context.Background(), fx.art, nil)
	if err != nil {
		t.Fatal(err)
	}
	fx.checkImage(t, img)
	if req, sent, _ := fx.srv.stats(); req != 1 || sent != 0 {
		t.Errorf("%d requests, %d bytes sent", req, sent)
	}
}

// A partial file holding other bytes (the file changed on the server, or
// the disk lied) fails verification once, then downloads from zero.
func TestFetchStalePartial(t *testing.T) {
	fx := newFixture(t, 1<<20)
	junk := gz(t, bytes.Repeat([]byte("other content "), 10000)) // a valid gzip start, wrong content
	os.WriteFile(filepath.Join(fx.dir, cacheKey(fx.art)+".part"), junk[:len(junk)/2], 0o644)
	img, err := fx.fetcher(t, 0).Fetch(context.Background(), fx.art, nil)
	if err != nil {
		t.Fatal(err)
	}
	fx.checkImage(t, img)
	if req, _, ranges := fx.srv.stats(); req != 2 || ranges[0] == "" || ranges[1] != "" {
		t.Errorf("%d requests, ranges %q, want a Range then a full GET", req, ranges)
	}
}

func TestFetchDigestMismatch(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(a *Artifact)
		which string
	}{
		{"compressed", func(a *Artifact) { a.SHA256 = strings.Repeat("a", 64) }, "compressed"},
		{"uncompressed", func(a *Artifact) { a.UncompressedSHA256 = strings.Repeat("b", 64) }, "uncompressed"},
		{"uncompressed only", func(a *Artifact) { a.SHA256, a.UncompressedSHA256 = "", strings.Repeat("c", 64) }, "uncompressed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, 1<<20)
			a := fx.art
			tc.edit(&a)
			_, err := fx.fetcher(t, 0).Fetch(context.Background(), a, nil)
			var de *DigestError
			if !errors.As(err, &de) {
				t.Fatalf("got %v, want a DigestError", err)
			}
			want := a.SHA256
			got := hexSum(fx.gz)
			if tc.which == "uncompressed" {
				want, got = a.UncompressedSHA256, hexSum(fx.raw)
			}
			msg := err.Error()
			for _, s := range []string{tc.which + " sha256 mismatch", fx.url, "expected " + want, "got " + got, "removed"} {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q lacks %q", msg, s)
				}
			}
			for _, n := range dirNames(t, fx.dir) {
				if !strings.HasSuffix(n, ".lock") {
					t.Errorf("file %s left after a mismatch", n)
				}
			}
		})
	}
}

func TestFetchCorruptGzip(t *testing.T) {
	fx := newFixture(t, 256<<10)
	bad := slices.Clone(fx.gz)
	bad[len(bad)/2] ^= 0xff
	fx.srv.data = bad
	fx.art.SHA256 = ""
	_, err := fx.fetcher(t, 0).Fetch(context.Background(), fx.art, nil)
	if err == nil || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("got %v", err)
	}
	for _, n := range dirNames(t, fx.dir) {
		if !strings.HasSuffix(n, ".lock") {
			t.Errorf("file %s left after corrupt data", n)
		}
	}
}

// A server answering 200 with something that is not gzip (a proxy's HTML
// page) in a slow body: the fetch stops at once instead of waiting for
// the rest, and does not mistake its own hang-up for a cut.
func TestFetchNotGzipEarly(t *testing.T) {
	fx := newFixture(t, 4<<20)
	fx.srv.data = append([]byte("<html><body>Please log in to the proxy</body></html>\n"), fx.gz...)
	fx.srv.chunkDelay = 50 * time.Millisecond // the body takes 1.7 s
	fx.art.SHA256 = ""
	t0 := time.Now()
	_, err := fx.fetcher(t, 3).Fetch(context.Background(), fx.art, nil)
	if err == nil || !strings.Contains(err.Error(), "not valid gzip") {
		t.Fatalf("got %v, want a gzip error", err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("took %v; the rest of the body was awaited", d)
	}
	if req, _, _ := fx.srv.stats(); req != 1 {
		t.Errorf("%d requests; corrupt data was retried", req)
	}
}

func TestFetchCacheHit(t *testing.T) {
	for _, name := range []string{"digests known", "compressed digest only", "no digest"} {
		t.Run(name, func(t *testing.T) {
			fx := newFixture(t, 1<<20)
			switch name {
			case "compressed digest only":
				fx.art.UncompressedSHA256 = ""
			case "no digest":
				fx.art.SHA256, fx.art.UncompressedSHA256 = "", ""
			}
			img1, err := fx.fetcher(t, 0).Fetch(context.Background(), fx.art, nil)
			if err != nil {
				t.Fatal(err)
			}
			fx.checkImage(t, img1)
			fx.srv.reset()
			img2, err := fx.fetcher(t, 0).Fetch(context.Background(), fx.art, nil)
			if err != nil {
				t.Fatal(err)
			}
			if img2 != img1 {
				t.Errorf("second fetch %+v, first %+v", img2, img1)
			}
			if req, _, _ := fx.srv.stats(); req != 0 {
				t.Errorf("cache hit made %d requests", req)
			}
		})
	}
}

func TestFetchConcurrent(t *testing.T) {
	fx := newFixture(t, 2<<20)
	fx.srv.chunkDelay = time.Millisecond
	const n = 4
	imgs := make([]Image, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// A Fetcher each, as separate processes would have.
			imgs[i], errs[i] = fx.fetcher(t, 0).Fetch(context.Background(), fx.art, nil)
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		fx.checkImage(t, imgs[i])
	}
	if req, sent, _ := fx.srv.stats(); req != 1 || sent != int64(len(fx.gz)) {
		t.Errorf("%d requests, %d bytes sent; want one download", req, sent)
	}
}

func TestFetchCancelKeepsPartial(t *testing.T) {
	fx := newFixture(t, 2<<20)
	fx.srv.chunkDelay = 5 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	_, err := fx.fetcher(t, 3).Fetch(ctx, fx.art, func(d, _ int64) {
		if d > int64(len(fx.gz)/4) {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	fi, err := os.Stat(filepath.Join(fx.dir, cacheKey(fx.art)+".part"))
	if err != nil || fi.Size() == 0 {
		t.Fatalf("partial file: %v", err)
	}
}

func TestFetchErrors(t *testing.T) {
	fx := newFixture(t, 1024)
	f := fx.fetcher(t, -1)
	a := fx.art
	a.URL = fx.url[:strings.LastIndex(fx.url, "/")] + "/missing"
	fx.srv.data = nil // any GET answers 200 with an empty body
	if _, err := f.Fetch(context.Background(), Artifact{Platform: KubeVirt, ContainerDisk: "q"}, nil); err == nil || !strings.Contains(err.Error(), "no URL") {
		t.Errorf("no URL: %v", err)
	}
	bad := fx.art
	bad.SHA256 = "../x"
	if _, err := f.Fetch(context.Background(), bad, nil); err == nil || !strings.Contains(err.Error(), "64 hex digits") {
		t.Errorf("bad digest: %v", err)
	}
	hs := httptest.NewServer(http.NotFoundHandler())
	defer hs.Close()
	a.URL = hs.URL + "/x.qcow2.gz"
	if _, err := f.Fetch(context.Background(), a, nil); err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), a.URL) {
		t.Errorf("404: %v", err)
	}
}

// TestFetchSurvivesKill kills a fetching process with SIGKILL mid-body;
// the next fetch resumes from the partial file and nothing half-written is
// ever found under the final name.
func TestFetchSurvivesKill(t *testing.T) {
	if os.Getenv("IMAGES_TEST_CHILD") != "" {
		t.Skip("helper process")
	}
	fx := newFixture(t, 4<<20)
	// The child's request comes from another process: no happens-before
	// edge for the race detector, so set under the lock.
	fx.srv.set(func(s *imageServer) { s.chunkDelay = 20 * time.Millisecond })
	cmd := exec.Command(os.Args[0], "-test.run=^TestFetchChild$", "-test.v")
	cmd.Env = append(os.Environ(), "IMAGES_TEST_CHILD=1", "IMAGES_TEST_URL="+fx.url, "IMAGES_TEST_DIR="+fx.dir,
		"IMAGES_TEST_SHA="+fx.art.SHA256, "IMAGES_TEST_USHA="+fx.art.UncompressedSHA256)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(fx.dir, cacheKey(fx.art)+".part")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if fi, err := os.Stat(part); err == nil && fi.Size() > int64(len(fx.gz)/4) {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("child never got a quarter of the file")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	f := fx.fetcher(t, 0)
	if _, ok := f.Lookup(fx.art); ok {
		t.Fatal("killed download taken for complete")
	}
	fx.srv.set(func(s *imageServer) { s.chunkDelay = 0 })
	fx.srv.reset()
	img, err := f.Fetch(context.Background(), fx.art, nil)
	if err != nil {
		t.Fatal(err)
	}
	fx.checkImage(t, img)
	if _, sent, ranges := fx.srv.stats(); !strings.HasPrefix(ranges[0], "bytes=") || sent >= int64(len(fx.gz)) {
		t.Errorf("after kill: ranges %q, %d of %d bytes sent again", ranges, sent, len(fx.gz))
	}
}

// TestFetchChild is the process TestFetchSurvivesKill kills.
func TestFetchChild(t *testing.T) {
	if os.Getenv("IMAGES_TEST_CHILD") == "" {
		t.Skip("only run as TestFetchSurvivesKill's child")
	}
	f, err := NewFetcher(Options{CacheDir: os.Getenv("IMAGES_TEST_DIR")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := Artifact{URL: os.Getenv("IMAGES_TEST_URL"), Compression: CompressionGzip, DiskFormat: "qcow2",
		SHA256: os.Getenv("IMAGES_TEST_SHA"), UncompressedSHA256: os.Getenv("IMAGES_TEST_USHA")}
	f.Fetch(context.Background(), a, nil)
}
