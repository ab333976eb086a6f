package apptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Build compiles cmd/appliance into a temporary directory of t with the
// Makefile's flags (static, CGO_ENABLED=0, -trimpath, stripped) and returns
// its path. A dynamically linked or unstripped build maps libc and a
// different file, so its RSS and start-up are not the shipped binary's.
func Build(t testing.TB) string {
	t.Helper()
	return build(t, "-s -w")
}

// BuildVersion is Build with the version `make build` stamps in
// (-X main.version=version): what `appliance version` prints, what
// `make image` labels the image with, and what /status reports. Two
// versions of one source give two images, as an upgrade does.
func BuildVersion(t testing.TB, version string) string {
	t.Helper()
	return build(t, "-s -w -X main.version="+version)
}

func build(t testing.TB, ldflags string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "appliance")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", bin, "appliance/cmd/appliance")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build appliance: %v\n%s", err, out)
	}
	return bin
}

// BuildChecked compiles cmd/appliance as Build does, except that when the
// calling test binary runs under the race detector (go test -race, as
// `make test` runs), the appliance is built with it too (which needs cgo,
// so it is dynamically linked and keeps its symbols for the reports): a
// whole-system test then checks the appliance's own processes for data
// races. Run them with GORACE=halt_on_error=1 so a race ends the process,
// and the test that needed it fails. Benchmarks and size or memory figures
// use Build: they measure the shipped binary.
func BuildChecked(t testing.TB) string {
	t.Helper()
	if !raceEnabled {
		return Build(t)
	}
	bin := filepath.Join(t.TempDir(), "appliance")
	cmd := exec.Command("go", "build", "-race", "-trimpath", "-o", bin, "appliance/cmd/appliance")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build appliance with the race detector: %v\n%s", err, out)
	}
	return bin
}

// BuildImage builds the shipped binary stamped with version (BuildVersion)
// and packs it as `make image` does, with cmd/imagebuild (which checks that
// the layer's binary runs), into an OCI archive in t's temporary folder.
// It returns the archive and the reference by digest imagebuild printed
// (localhost/appliance@sha256:...), which a static pod pins.
func BuildImage(t testing.TB, version string) (archive, ref string) {
	t.Helper()
	bin := BuildVersion(t, version)
	archive = filepath.Join(t.TempDir(), "appliance-image.tar")
	// The labels' commit and date, as make image takes them from git; any
	// fixed values do where git has no history.
	rev, epoch := "unknown", "0"
	if b, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		rev = strings.TrimSpace(string(b))
		if b, err := exec.Command("git", "log", "-1", "--format=%ct").Output(); err == nil {
			epoch = strings.TrimSpace(string(b))
		}
	}
	cmd := exec.Command("go", "run", "appliance/cmd/imagebuild", "-binary", bin, "-out", archive,
		"-repo", "localhost/appliance", "-version", version, "-revision", rev, "-source-date-epoch", epoch)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("imagebuild: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "localhost/appliance@sha256:") {
			ref = strings.TrimSpace(l)
		}
	}
	if ref == "" {
		t.Fatalf("imagebuild printed no reference by digest:\n%s", out)
	}
	return archive, ref
}
