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
	version := fs.String("version", "", "version label; the binary's own (`BINARY version`) when empty")
	revision := fs.String("revision", "", "source commit label; the commit the version names (git) when empty")
	epoch := fs.String("source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "creation time, Unix seconds; that commit's time when empty, so the digest repeats")
	repo := fs.String("repo", "localhost/appliance", "repository the printed reference names")
	check := fs.Bool("check", true, "run `/appliance version` from the written layer and expect the version")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	// The labels come from the binary, not from make's variables: a commit
	// landing between `make build` and this step would otherwise label the
	// image with a version its binary does not have.
	if *version == "" {
		v, err := binaryVersion(*binary)
		if err != nil {
			return err
		}
		*version = v
	}
	if *revision == "" {
		r, err := git("rev-parse", "--verify", describedCommit(*version)+"^{commit}")
		if err != nil {
			return fmt.Errorf("the commit of version %s (give -revision): %w", *version, err)
		}
		*revision = r
	}
	if *epoch == "" {
		e, err := git("log", "-1", "--format=%ct", *revision)
		if err != nil {
			return fmt.Errorf("the time of commit %s (give -source-date-epoch): %w", *revision, err)
		}
		*epoch = e
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
	fmt.Printf("%s: version %s, %s layer %.1f MB gzip (binary %.1f MB)\n", *out, *version, imagebuild.BinaryPath,
		float64(res.LayerSize)/1e6, float64(res.BinarySize)/1e6)
	fmt.Printf("digest: %s\n", res.Digest)
	fmt.Printf("%s@%s\n", *repo, res.Digest)
	return nil
}

// binaryVersion asks the binary: `appliance version` prints
// "appliance VERSION (commit ..., go..., os/arch)".
func binaryVersion(bin string) (string, error) {
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		return "", fmt.Errorf("%s version (give -version): %w", bin, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		return "", fmt.Errorf("%s version printed %q (give -version)", bin, out)
	}
	return f[1], nil
}

// describedCommit returns what `git describe --always --dirty` output names:
// "abc1234-dirty" → "abc1234", "v1.2-3-gabc1234" → "abc1234", "v1.2" → "v1.2".
func describedCommit(version string) string {
	v := strings.TrimSuffix(version, "-dirty")
	if i := strings.LastIndex(v, "-g"); i >= 0 {
		if h := v[i+2:]; h != "" && strings.Trim(h, "0123456789abcdef") == "" {
			return h
		}
	}
	return v
}

func git(args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("git", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
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
