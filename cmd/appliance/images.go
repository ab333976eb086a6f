package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"appliance/images"
)

type imagesFlags struct {
	stream   string
	arch     string
	cacheDir string
}

func (f *imagesFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.stream, "stream", images.DefaultStreamURL, "RHCOS stream metadata: an http(s) URL or a local file; #NAME picks a stream from a multi-stream file")
	cmd.Flags().StringVar(&f.arch, "arch", images.DefaultArch, "architecture in the stream")
	cmd.Flags().StringVar(&f.cacheDir, "cache-dir", "", "image cache directory (default $XDG_CACHE_HOME/appliance/images)")
}

func newImagesCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "images",
		Short: "List and fetch the RHCOS disk images the cluster's VMs boot from",
		Long: `Pick the RHCOS disk image each platform needs from the stream metadata and
keep a verified, uncompressed copy in a local cache:

  appliance images list
  appliance images fetch --platform libvirt

libvirt boots the qemu image (Ignition over fw_cfg); oVirt and KubeVirt the
openstack image (Ignition on a config drive). A cut download resumes; a second
fetch of the same image downloads nothing.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newImagesListCmd(g), newImagesFetchCmd(g))
	return cmd
}

func newImagesListCmd(g *globalFlags) *cobra.Command {
	f := &imagesFlags{}
	var offline bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Show each platform's image: URL, size, sha256 and whether it is cached",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := images.LoadStream(ctx, nil, f.stream)
			if err != nil {
				return err
			}
			fetcher, err := images.NewFetcher(images.Options{CacheDir: f.cacheDir}, log)
			if err != nil {
				return err
			}
			type row struct {
				a    images.Artifact
				err  error
				size int64
			}
			rows := make([]row, len(images.Platforms))
			var wg sync.WaitGroup
			for i, p := range images.Platforms {
				a, err := images.Select(st, p, f.arch)
				rows[i] = row{a: a, err: err, size: -1}
				if err != nil || offline || a.URL == "" {
					continue
				}
				wg.Go(func() {
					hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					if n, err := images.RemoteSize(hctx, nil, a.URL); err == nil {
						rows[i].size = n
					} else {
						log.Debug("size unknown", "url", a.URL, "err", err)
					}
				})
			}
			wg.Wait()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "stream %s (%s), last modified %s\n", st.Stream, f.stream, st.Metadata.LastModified)
			for _, r := range rows {
				printArtifact(out, fetcher, r.a, r.err, r.size)
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&offline, "offline", false, "do not ask the server for image sizes")
	return cmd
}

func printArtifact(out io.Writer, fetcher *images.Fetcher, a images.Artifact, err error, size int64) {
	if err != nil {
		fmt.Fprintf(out, "\n%-9s %v\n", a.Platform, err)
		return
	}
	fmt.Fprintf(out, "\n%-9s %s %s, %s flavour\n", a.Platform, a.Release, a.Arch, a.Flavor)
	if a.URL != "" {
		comp := a.Compression
		if comp == "" {
			comp = "uncompressed"
		}
		fmt.Fprintf(out, "  url:           %s\n", a.URL)
		fmt.Fprintf(out, "  format:        %s, %s\n", a.DiskFormat, comp)
		if size >= 0 {
			fmt.Fprintf(out, "  size:          %s\n", humanBytes(size))
		} else {
			fmt.Fprintf(out, "  size:          unknown\n")
		}
		fmt.Fprintf(out, "  sha256:        %s\n", orNone(a.SHA256))
		fmt.Fprintf(out, "  uncompressed:  %s\n", orNone(a.UncompressedSHA256))
		if img, ok := fetcher.Lookup(a); ok {
			fmt.Fprintf(out, "  cached:        %s (%s)\n", img.Path, humanBytes(img.Size))
		} else {
			fmt.Fprintf(out, "  cached:        no\n")
		}
	}
	if a.ContainerDisk != "" {
		fmt.Fprintf(out, "  containerDisk: %s\n", a.ContainerDisk)
	}
}

func newImagesFetchCmd(g *globalFlags) *cobra.Command {
	f := &imagesFlags{}
	var platform, url, sum, flavor string
	var noProgress bool
	cmd := &cobra.Command{
		Use:   "fetch --platform libvirt|ovirt|kubevirt",
		Short: "Download, verify and cache a platform's image; print its path",
		Long: `Download the image --platform boots from into the cache, decompressing it and
verifying its sha256 on the way, and print the path of the uncompressed file:

  appliance images fetch --platform libvirt
  appliance images fetch --platform ovirt --url https://mirror.example.com/rhcos-openstack.x86_64.qcow2.gz --sha256 HEX

An interrupted fetch resumes where it stopped when run again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			p := images.Platform(platform)
			if url != "" && cmd.Flags().Changed("stream") {
				return fmt.Errorf("images fetch: give --url or --stream, not both")
			}
			if url == "" && (sum != "" || flavor != "") {
				return fmt.Errorf("images fetch: --sha256 and --flavor go with --url")
			}
			a, err := images.Resolve(ctx, nil, images.Source{Platform: p, Stream: f.stream, Arch: f.arch, URL: url, SHA256: sum, Flavor: flavor})
			if err != nil {
				return err
			}
			fetcher, err := images.NewFetcher(images.Options{CacheDir: f.cacheDir}, log)
			if err != nil {
				return err
			}
			var bar *progressBar
			progress := func(done, total int64) {}
			if !noProgress {
				bar = newProgressBar(cmd.ErrOrStderr(), string(p))
				progress = bar.update
			}
			img, err := fetcher.Fetch(ctx, a, progress)
			if bar != nil {
				bar.finish(err == nil)
			}
			if err != nil {
				return err
			}
			log.Info("image ready", "platform", p, "path", img.Path, "sha256", img.SHA256, "size", img.Size, "flavor", img.Flavor)
			fmt.Fprintln(cmd.OutOrStdout(), img.Path)
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&platform, "platform", "", "libvirt, ovirt or kubevirt")
	cmd.Flags().StringVar(&url, "url", "", "download this image instead of the stream's (e.g. from a local mirror)")
	cmd.Flags().StringVar(&sum, "sha256", "", "with --url: sha256 of the file as downloaded")
	cmd.Flags().StringVar(&flavor, "flavor", "", "with --url: qemu or openstack (default: qemu for libvirt, else openstack)")
	cmd.Flags().BoolVar(&noProgress, "no-progress", false, "no progress bar")
	_ = cmd.MarkFlagRequired("platform")
	return cmd
}

// progressBar draws the download on the terminal; it appears only once
// bytes flow, so a cache hit prints nothing.
type progressBar struct {
	out  io.Writer
	name string
	p    *mpb.Progress
	bar  *mpb.Bar
	last time.Time
	prev int64
}

func newProgressBar(out io.Writer, name string) *progressBar {
	return &progressBar{out: out, name: name}
}

func (b *progressBar) update(done, total int64) {
	now := time.Now()
	if b.bar == nil {
		b.p = mpb.New(mpb.WithOutput(b.out), mpb.WithWidth(40), mpb.WithRefreshRate(200*time.Millisecond))
		b.bar = b.p.AddBar(max(total, 0),
			mpb.PrependDecorators(decor.Name(b.name+" ", decor.WCSyncSpaceR), decor.CountersKibiByte("% .1f / % .1f")),
			mpb.AppendDecorators(decor.EwmaSpeed(decor.SizeB1024(0), "% .1f", 30), decor.Name(" "), decor.Percentage()))
		b.last, b.prev = now, done
		b.bar.SetCurrent(done)
		return
	}
	// The callback runs on every read; the bar needs a few updates a second.
	if now.Sub(b.last) < 100*time.Millisecond && done != total {
		return
	}
	if done < b.prev { // the server ignored Range: counting restarts
		b.bar.SetCurrent(done)
	} else {
		b.bar.EwmaSetCurrent(done, now.Sub(b.last))
	}
	b.last, b.prev = now, done
}

func (b *progressBar) finish(ok bool) {
	if b.bar == nil {
		return
	}
	if ok {
		b.bar.SetTotal(-1, true)
	} else {
		b.bar.Abort(false)
	}
	b.p.Wait()
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func orNone(s string) string {
	if s == "" {
		return "(not given)"
	}
	return s
}
