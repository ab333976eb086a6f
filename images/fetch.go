package images

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Image is a fetched disk image on local disk. The provisioning code
// converts it into platform.Image (the field meanings are the same).
type Image struct {
	// Path is the uncompressed image file in the cache.
	Path string
	// Format is "qcow2" or "raw".
	Format string
	// SHA256 is the hex digest of the file at Path.
	SHA256 string
	// Size is the file size in bytes.
	Size int64
	// Flavor is FlavorQEMU or FlavorOpenStack.
	Flavor string
	// URL is where the image was downloaded from (possibly compressed).
	URL string
	// ContainerDisk is the artifact's container image, for KubeVirt.
	ContainerDisk string
}

// Options configure a Fetcher.
type Options struct {
	// CacheDir holds fetched images; default DefaultCacheDir().
	CacheDir string
	// Client makes the requests; default http.DefaultClient. No overall
	// timeout belongs on it: a download takes minutes; ctx bounds it.
	Client *http.Client
	// Retries is how many times a cut download is resumed within one
	// Fetch; 0 means the default (3), negative means none.
	Retries int
	// RetryDelay is the pause before a resume; default 1s.
	RetryDelay time.Duration
}

// Fetcher downloads artifacts into a cache directory. It is safe for
// concurrent use, also across processes sharing the directory: fetches of
// the same artifact are serialised by a lock file.
type Fetcher struct {
	dir     string
	client  *http.Client
	retries int
	delay   time.Duration
	log     *slog.Logger
}

// DigestError is a sha256 mismatch; the bad file has been removed.
type DigestError struct {
	URL string
	// Which is "compressed" or "uncompressed".
	Which         string
	Expected, Got string
}

func (e *DigestError) Error() string {
	return fmt.Sprintf("images: %s sha256 mismatch for %s: expected %s, got %s (the downloaded file was removed)",
		e.Which, e.URL, e.Expected, e.Got)
}

// ErrXZ reports an xz-compressed artifact, which this build cannot
// decompress (no xz decoder among its modules).
var ErrXZ = errors.New("images: xz-compressed images are not supported by this build; use a .gz or uncompressed image")

// DefaultCacheDir is $XDG_CACHE_HOME/appliance/images, falling back to
// ~/.cache/appliance/images.
func DefaultCacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("images: cache dir: %w", err)
	}
	return filepath.Join(base, "appliance", "images"), nil
}

// NewFetcher creates the cache directory when missing.
func NewFetcher(opts Options, log *slog.Logger) (*Fetcher, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir := opts.CacheDir
	if dir == "" {
		var err error
		if dir, err = DefaultCacheDir(); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("images: cache dir: %w", err)
	}
	f := &Fetcher{dir: dir, client: opts.Client, retries: opts.Retries, delay: opts.RetryDelay,
		log: log.With("component", "images")}
	if f.client == nil {
		f.client = http.DefaultClient
	}
	switch {
	case f.retries == 0:
		f.retries = 3
	case f.retries < 0:
		f.retries = 0
	}
	if f.delay <= 0 {
		f.delay = time.Second
	}
	return f, nil
}

// Dir is the cache directory.
func (f *Fetcher) Dir() string { return f.dir }

// cacheKey names an artifact's partial download, lock and reference
// files: the digest of the file as served when known, else of its
// uncompressed content, else of its URL (then nothing is verified).
func cacheKey(a Artifact) string {
	switch {
	case a.SHA256 != "":
		return "c-" + a.SHA256
	case a.UncompressedSHA256 != "":
		return "u-" + a.UncompressedSHA256
	}
	sum := sha256.Sum256([]byte(a.URL))
	return "url-" + hex.EncodeToString(sum[:16])
}

func (f *Fetcher) finalPath(digest, format string) string {
	return filepath.Join(f.dir, "sha256-"+digest+"."+format)
}

func (f *Fetcher) refPath(key string) string { return filepath.Join(f.dir, "ref-"+key) }

// Lookup returns the cached image for a when a complete, verified copy is
// in the cache. Files reach their final name only after verification, so
// existence is proof enough and nothing is re-hashed.
func (f *Fetcher) Lookup(a Artifact) (Image, bool) {
	if checkDigests(a) != nil {
		return Image{}, false
	}
	digest := a.UncompressedSHA256
	if digest == "" {
		b, err := os.ReadFile(f.refPath(cacheKey(a)))
		if err != nil || !isHexDigest(strings.TrimSpace(string(b))) {
			return Image{}, false
		}
		digest = strings.TrimSpace(string(b))
	}
	p := f.finalPath(digest, a.DiskFormat)
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return Image{}, false
	}
	return a.image(p, digest, fi.Size()), true
}

// RemoteImage describes a without downloading it, for a platform that
// imports the image itself from URL (a KubeVirt DataVolume) or boots a
// ContainerDisk: Path, SHA256 and Size are empty.
func (a Artifact) RemoteImage() Image {
	return Image{Format: a.DiskFormat, Flavor: a.Flavor, URL: a.URL, ContainerDisk: a.ContainerDisk}
}

func (a Artifact) image(p, digest string, size int64) Image {
	return Image{Path: p, Format: a.DiskFormat, SHA256: digest, Size: size, Flavor: a.Flavor,
		URL: a.URL, ContainerDisk: a.ContainerDisk}
}

// Fetch returns a's image from the cache, downloading it first when
// needed. progress, when not nil, is called with the bytes of the file
// as served so far (resumed bytes included) and its total size (-1 when
// unknown), from one goroutine at a time but not necessarily the
// caller's. A cut download is resumed with a Range request, within this
// call up to Options.Retries times, and by a later call otherwise; the
// partial file is never taken for a complete one.
func (f *Fetcher) Fetch(ctx context.Context, a Artifact, progress func(done, total int64)) (Image, error) {
	if a.URL == "" {
		return Image{}, fmt.Errorf("images: %s artifact has no URL to download", a.Platform)
	}
	if err := checkDigests(a); err != nil {
		return Image{}, fmt.Errorf("images: %s: %w", a.URL, err)
	}
	switch a.Compression {
	case CompressionXZ:
		return Image{}, fmt.Errorf("%w (%s)", ErrXZ, a.URL)
	case CompressionNone, CompressionGzip:
	default:
		return Image{}, fmt.Errorf("images: %s: unknown compression %q", a.URL, a.Compression)
	}
	if img, ok := f.Lookup(a); ok {
		f.log.Debug("cache hit", "path", img.Path)
		return img, nil
	}
	key := cacheKey(a)
	unlock, err := f.lock(ctx, key)
	if err != nil {
		return Image{}, err
	}
	defer unlock()
	// Another fetch may have finished while we waited for the lock.
	if img, ok := f.Lookup(a); ok {
		return img, nil
	}
	if a.SHA256 == "" && a.UncompressedSHA256 == "" {
		f.log.Warn("no sha256 known for the image; it will not be verified", "url", a.URL)
	}
	restarted := false
	for try := 0; ; try++ {
		img, err := f.attempt(ctx, a, key, progress)
		var cut *cutError
		switch {
		case err == nil:
			return img, nil
		case errors.Is(err, errStale) && !restarted:
			// The partial file did not belong to this content (changed on
			// the server, or damaged): start over once, from zero.
			restarted = true
			f.log.Warn("partial download did not verify; downloading from the start", "url", a.URL)
			continue
		case errors.As(err, &cut) && try < f.retries && ctx.Err() == nil:
			f.log.Warn("download cut; resuming", "url", a.URL, "have", cut.have, "err", cut.err)
			select {
			case <-time.After(f.delay):
			case <-ctx.Done():
				return Image{}, fmt.Errorf("images: fetch %s: %w", a.URL, ctx.Err())
			}
			continue
		}
		return Image{}, err
	}
}

// cutError is a download that ended early; the partial file is kept.
type cutError struct {
	url  string
	have int64
	err  error
}

func (e *cutError) Error() string {
	if e.have == 0 {
		return fmt.Sprintf("images: download of %s failed: %v", e.url, e.err)
	}
	return fmt.Sprintf("images: download of %s cut after %d bytes (kept for resume): %v", e.url, e.have, e.err)
}

func (e *cutError) Unwrap() error { return e.err }

// errStale marks a resumed download whose result did not verify.
var errStale = errors.New("images: partial download is stale")

// netReader remembers the error of the network read so a failure can be
// told apart from corrupt data.
type netReader struct {
	r   io.Reader
	n   int64
	err error
	// closing is set when we close the body ourselves (after corrupt
	// data), so the resulting read error is not taken for a cut.
	closing atomic.Bool
}

func (r *netReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	if err != nil && err != io.EOF && !r.closing.Load() {
		r.err = err
	}
	return n, err
}

// progressReader reports the running offset after each read.
type progressReader struct {
	r     io.Reader
	done  int64
	total int64
	fn    func(done, total int64)
}

func (r *progressReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.done += int64(n)
	if n > 0 && r.fn != nil {
		r.fn(r.done, r.total)
	}
	return n, err
}

// attempt makes one request and, if it completes, verifies and installs
// the image. Everything read — first the partial file kept by an earlier
// attempt, then the network body (which is appended to it) — flows once
// through the compressed hasher and the decompressor into the uncompressed
// hasher and the output file.
func (f *Fetcher) attempt(ctx context.Context, a Artifact, key string, progress func(done, total int64)) (Image, error) {
	partPath := filepath.Join(f.dir, key+".part")
	part, err := os.OpenFile(partPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return Image{}, fmt.Errorf("images: partial file: %w", err)
	}
	partOpen := true
	defer func() {
		if partOpen {
			part.Close()
		}
	}()
	fi, err := part.Stat()
	if err != nil {
		return Image{}, fmt.Errorf("images: partial file: %w", err)
	}
	have := fi.Size()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
	if err != nil {
		return Image{}, fmt.Errorf("images: %s: %w", a.URL, err)
	}
	// identity: a server that adds Content-Encoding to a .gz file would
	// otherwise have the transport decompress it behind our back.
	req.Header.Set("Accept-Encoding", "identity")
	if have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
	}
	resp, err := f.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return Image{}, fmt.Errorf("images: fetch %s: %w", a.URL, ctx.Err())
		}
		return Image{}, &cutError{url: a.URL, have: have, err: err}
	}
	defer resp.Body.Close()

	var body io.Reader = resp.Body
	total := int64(-1)
	switch resp.StatusCode {
	case http.StatusOK:
		if have > 0 {
			f.log.Info("server ignored the Range request; downloading from the start", "url", a.URL)
			if err := part.Truncate(0); err != nil {
				return Image{}, fmt.Errorf("images: partial file: %w", err)
			}
			have = 0
		}
		if resp.ContentLength >= 0 {
			total = resp.ContentLength
		}
	case http.StatusPartialContent:
		start, size, err := parseContentRange(resp.Header.Get("Content-Range"))
		if err != nil || start != have {
			return Image{}, fmt.Errorf("images: %s: asked for bytes from %d, got Content-Range %q", a.URL, have, resp.Header.Get("Content-Range"))
		}
		total = size
	case http.StatusRequestedRangeNotSatisfiable:
		// The partial file may already hold everything; verification
		// decides.
		if have == 0 {
			return Image{}, fmt.Errorf("images: GET %s: %s", a.URL, resp.Status)
		}
		body, total = http.NoBody, have
	default:
		return Image{}, fmt.Errorf("images: GET %s: %s", a.URL, resp.Status)
	}
	f.log.Debug("downloading", "url", a.URL, "offset", have, "total", total)

	nr := &netReader{r: body}
	src := io.MultiReader(io.NewSectionReader(part, 0, have), io.TeeReader(nr, io.NewOffsetWriter(part, have)))
	chash := sha256.New()
	pr := &progressReader{r: io.TeeReader(src, chash), total: total, fn: progress}
	if progress != nil {
		progress(0, total)
	}

	var uhash hash.Hash
	outPath := filepath.Join(f.dir, key+".out.tmp")
	var out *os.File
	if a.Compression == CompressionGzip {
		out, err = os.OpenFile(outPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return Image{}, fmt.Errorf("images: output file: %w", err)
		}
		defer func() {
			if out != nil {
				out.Close()
				os.Remove(outPath)
			}
		}()
		uhash = sha256.New()
		ra := newReadAhead(pr, 4, 1<<20)
		wb := newWriteBehind(io.MultiWriter(out, uhash), 4, 1<<20)
		err = gunzip(wb, bufio.NewReaderSize(ra, 256<<10))
		if werr := wb.Close(); err == nil || errors.Is(err, io.ErrShortWrite) {
			err = werr
		}
		if err != nil {
			nr.closing.Store(true)
			resp.Body.Close() // unblocks a producer waiting on the network
		}
		ra.Close()
	} else {
		_, err = io.CopyBuffer(io.Discard, pr, make([]byte, 1<<20))
	}
	received := nr.n
	short := total >= 0 && pr.done < total
	if err != nil || short {
		switch {
		case ctx.Err() != nil:
			_ = part.Sync()
			return Image{}, fmt.Errorf("images: fetch %s: %w (partial download kept)", a.URL, ctx.Err())
		case nr.err != nil:
			_ = part.Sync()
			return Image{}, &cutError{url: a.URL, have: have + received, err: nr.err}
		case err != nil && isCorrupt(err):
			// The bytes arrived but are not valid gzip: the same verdict
			// as a digest mismatch.
			part.Close()
			partOpen = false
			os.Remove(partPath)
			if have > 0 {
				return Image{}, fmt.Errorf("%w: %v", errStale, err)
			}
			return Image{}, fmt.Errorf("images: %s is not valid gzip (the downloaded file was removed): %w", a.URL, err)
		case err == nil:
			_ = part.Sync()
			return Image{}, &cutError{url: a.URL, have: have + received, err: io.ErrUnexpectedEOF}
		}
		return Image{}, fmt.Errorf("images: fetch %s: %w", a.URL, err)
	}
	f.log.Debug("downloaded", "url", a.URL, "resumed_from", have, "received", received)

	got := hex.EncodeToString(chash.Sum(nil))
	ugot := got
	if uhash != nil {
		ugot = hex.EncodeToString(uhash.Sum(nil))
	}
	mismatch := func(which, want, got string) error {
		part.Close()
		partOpen = false
		os.Remove(partPath)
		if have > 0 {
			return fmt.Errorf("%w: %s sha256 %s, want %s", errStale, which, got, want)
		}
		return &DigestError{URL: a.URL, Which: which, Expected: want, Got: got}
	}
	if a.SHA256 != "" && got != a.SHA256 {
		which := "compressed"
		if a.Compression == CompressionNone {
			which = "uncompressed"
		}
		return Image{}, mismatch(which, a.SHA256, got)
	}
	if a.UncompressedSHA256 != "" && ugot != a.UncompressedSHA256 {
		return Image{}, mismatch("uncompressed", a.UncompressedSHA256, ugot)
	}

	final := f.finalPath(ugot, a.DiskFormat)
	var size int64
	if out != nil {
		if size, err = syncClose(out); err != nil {
			return Image{}, fmt.Errorf("images: output file: %w", err)
		}
		out = nil
		if err := os.Rename(outPath, final); err != nil {
			os.Remove(outPath)
			return Image{}, fmt.Errorf("images: install %s: %w", final, err)
		}
		part.Close()
		partOpen = false
		os.Remove(partPath)
	} else {
		partOpen = false
		if size, err = syncClose(part); err != nil {
			return Image{}, fmt.Errorf("images: partial file: %w", err)
		}
		if err := os.Rename(partPath, final); err != nil {
			return Image{}, fmt.Errorf("images: install %s: %w", final, err)
		}
	}
	if a.UncompressedSHA256 == "" {
		// Remember which content this source produced so the next Lookup
		// finds it without downloading.
		if err := writeFileAtomic(f.refPath(key), []byte(ugot+"\n")); err != nil {
			return Image{}, err
		}
	}
	if err := syncDir(f.dir); err != nil {
		return Image{}, err
	}
	f.log.Info("image cached", "path", final, "sha256", ugot, "size", size, "received", received)
	return a.image(final, ugot, size), nil
}

// gunzip decompresses all of r into w (gzip members back to back).
func gunzip(w io.Writer, r io.Reader) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return err
	}
	if _, err := io.CopyBuffer(w, zr, make([]byte, 1<<20)); err != nil {
		return err
	}
	// Anything after the last member would have failed the copy; drain so
	// every byte is hashed and stored.
	_, err = io.Copy(io.Discard, r)
	return err
}

func isCorrupt(err error) bool {
	var ce flate.CorruptInputError
	return errors.As(err, &ce) || errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) ||
		errors.Is(err, io.ErrUnexpectedEOF)
}

// parseContentRange reads "bytes START-END/SIZE" (SIZE may be "*", then
// -1).
func parseContentRange(v string) (start, size int64, err error) {
	rest, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return 0, 0, fmt.Errorf("not a byte range")
	}
	rng, sz, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, fmt.Errorf("no size")
	}
	s, _, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, fmt.Errorf("no range")
	}
	if start, err = strconv.ParseInt(s, 10, 64); err != nil || start < 0 {
		return 0, 0, fmt.Errorf("bad start")
	}
	size = -1
	if sz != "*" {
		if size, err = strconv.ParseInt(sz, 10, 64); err != nil || size < start {
			return 0, 0, fmt.Errorf("bad size")
		}
	}
	return start, size, nil
}

func syncClose(fl *os.File) (int64, error) {
	if err := fl.Sync(); err != nil {
		fl.Close()
		return 0, err
	}
	fi, err := fl.Stat()
	if err != nil {
		fl.Close()
		return 0, err
	}
	return fi.Size(), fl.Close()
}

// writeFileAtomic writes data beside p, fsyncs and renames it over p.
func writeFileAtomic(p string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-"+filepath.Base(p)+"-*")
	if err != nil {
		return fmt.Errorf("images: write %s: %w", p, err)
	}
	// CreateTemp makes 0600; cache files are readable like the images.
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("images: write %s: %w", p, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("images: write %s: %w", p, err)
	}
	if _, err := syncClose(tmp); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("images: write %s: %w", p, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("images: write %s: %w", p, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("images: sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("images: sync %s: %w", dir, err)
	}
	return nil
}

// RemoteSize asks the server for the size of the file at rawURL with a
// HEAD request; -1 when the server does not say. client may be nil.
func RemoteSize(ctx context.Context, client *http.Client, rawURL string) (int64, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, rawURL, nil)
	if err != nil {
		return -1, fmt.Errorf("images: HEAD %s: %w", rawURL, err)
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := client.Do(req)
	if err != nil {
		return -1, fmt.Errorf("images: HEAD: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return -1, fmt.Errorf("images: HEAD %s: %s", rawURL, resp.Status)
	}
	return resp.ContentLength, nil
}
