// Command imagebuild writes the appliance's node image as an OCI archive
// (`make image`) and prints its digest. It is a build tool: a separate
// program, so the image library stays out of the appliance binary.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"appliance/internal/imagebuild"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	binary := fs.String("binary", "bin/appliance", "static linux/amd64 binary to put at /appliance")
	out := fs.String("out", "bin/appliance-image.tar", "OCI archive to write")
	version := fs.String("version", "", "version label (the binary's own)")
	revision := fs.String("revision", "", "source commit label")
	epoch := fs.String("source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "creation time, Unix seconds (the commit's, for a reproducible digest)")
	repo := fs.String("repo", "localhost/appliance", "repository the printed reference names")
	check := fs.Bool("check", true, "run `/appliance version` from the written layer and expect the version")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *epoch == "" {
		return fmt.Errorf("no -source-date-epoch (or SOURCE_DATE_EPOCH): the image's time must be fixed for its digest to repeat")
	}
	secs, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("-source-date-epoch %q: %w", *epoch, err)
	}
	o := imagebuild.Options{Binary: *binary, Version: *version, Revision: *revision, Created: time.Unix(secs, 0)}
	res, err := imagebuild.Build(o, *repo+":"+*version, *out)
	if err != nil {
		return err
	}
	if *check {
		if err := checkLayer(*out, *version); err != nil {
			return err
		}
	}
	fmt.Printf("%s: %s layer %.1f MB gzip (binary %.1f MB)\n", *out, imagebuild.BinaryPath,
		float64(res.LayerSize)/1e6, float64(res.BinarySize)/1e6)
	fmt.Printf("digest: %s\n", res.Digest)
	fmt.Printf("%s@%s\n", *repo, res.Digest)
	return nil
}

// checkLayer reads the archive back, takes /appliance out of its layer and
// runs its `version`: the layer holds a binary that runs on its own.
func checkLayer(archive, version string) error {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return nil // cannot run a linux/amd64 binary here
	}
	dir, err := os.MkdirTemp("", "imagebuild-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	img, err := imagebuild.Open(archive, filepath.Join(dir, "archive"))
	if err != nil {
		return err
	}
	bin := filepath.Join(dir, "appliance")
	if _, err := imagebuild.ExtractFile(img, imagebuild.BinaryPath, bin); err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "version")
	cmd.Stdout, cmd.Stderr, cmd.Env = &stdout, &stderr, []string{}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("check: %s version from the layer: %w\n%s", imagebuild.BinaryPath, err, stderr.String())
	}
	if !strings.Contains(stdout.String(), version) {
		return fmt.Errorf("check: %s version from the layer printed %q, want %s", imagebuild.BinaryPath, strings.TrimSpace(stdout.String()), version)
	}
	return nil
}
