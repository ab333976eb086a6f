package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"appliance/images"
	"appliance/internal/cluster"
	"appliance/platform"
)

func sourceOf(p *cluster.Provision) images.Source {
	i := p.Image
	return images.Source{Platform: images.Platform(p.Platform), Stream: i.Stream, Arch: i.Arch, URL: i.URL, SHA256: i.SHA256, Flavor: i.Flavor}
}

func toPlatformImage(i images.Image) platform.Image {
	return platform.Image{Path: i.Path, Format: i.Format, SHA256: i.SHA256, Size: i.Size,
		Flavor: platform.Flavor(i.Flavor), URL: i.URL, ContainerDisk: i.ContainerDisk}
}

// importsItself reports whether the platform pulls the image from its URL
// (a KubeVirt DataVolume) rather than being handed a local file.
func importsItself(p *cluster.Provision) bool { return p.Platform == cluster.PlatformKubeVirt }

// describeImage says where the base image will come from, for plan. A
// stream that cannot be read is reported in the text, not as an error: the
// plan is still worth printing.
func describeImage(ctx context.Context, p *cluster.Provision, log *slog.Logger) string {
	i := p.Image
	switch {
	case i.ContainerDisk != "":
		return "container disk " + i.ContainerDisk
	case i.File != "":
		return "local file " + i.File
	}
	a, err := images.Resolve(ctx, nil, sourceOf(p))
	if err != nil {
		return fmt.Sprintf("unknown yet (%v)", err)
	}
	where := a.URL
	if a.Release != "" {
		where = fmt.Sprintf("RHCOS %s (%s) from %s", a.Release, a.Stream, a.URL)
	}
	if importsItself(p) {
		if a.ContainerDisk != "" {
			return where + " (imported by the cluster; container disk " + a.ContainerDisk + ")"
		}
		return where + " (imported by the cluster)"
	}
	f, err := images.NewFetcher(images.Options{CacheDir: i.CacheDir}, log)
	if err != nil {
		return where
	}
	if img, ok := f.Lookup(a); ok {
		return where + ", cached at " + img.Path
	}
	return where + ", not cached yet: apply downloads it to " + f.Dir()
}

// fetchImage returns the base image: the local file, the cluster-imported
// URL or container disk, or a verified copy in the cache (downloading it
// when missing, its bytes counted to emit).
func fetchImage(ctx context.Context, p *cluster.Provision, emit func(Event), log *slog.Logger) (platform.Image, error) {
	i := p.Image
	if i.ContainerDisk != "" {
		return platform.Image{ContainerDisk: i.ContainerDisk, Flavor: platform.FlavorOpenStack}, nil
	}
	if i.File != "" {
		img, err := images.Local(i.File, images.Platform(p.Platform), i.Flavor, i.SHA256)
		if err != nil {
			return platform.Image{}, fmt.Errorf("provision.image.file: %w", err)
		}
		return toPlatformImage(img), nil
	}
	a, err := images.Resolve(ctx, nil, sourceOf(p))
	if err != nil {
		return platform.Image{}, fmt.Errorf("provision: base image: %w", err)
	}
	if importsItself(p) {
		if a.URL == "" && a.ContainerDisk == "" {
			return platform.Image{}, errors.New("provision: the stream names no image KubeVirt can import; set provision.image.url or containerDisk")
		}
		img := toPlatformImage(a.RemoteImage())
		// The digest of the file the cluster imports: it tells a finished
		// import of the same image (from any mirror) from a stale one.
		img.SHA256 = a.SHA256
		return img, nil
	}
	f, err := images.NewFetcher(images.Options{CacheDir: i.CacheDir}, log)
	if err != nil {
		return platform.Image{}, err
	}
	img, err := f.Fetch(ctx, a, func(done, total int64) { emit(ImageDownload{Done: done, Total: total}) })
	emit(ImageDownloaded{Err: err})
	if err != nil {
		return platform.Image{}, err
	}
	log.Info("base image ready", "path", img.Path, "sha256", img.SHA256, "size", img.Size)
	return toPlatformImage(img), nil
}
