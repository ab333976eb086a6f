package kubeletnode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
)

// Tools are the kubelet scripts and the binaries their build.sh built.
type Tools struct {
	// Dir holds start.sh, stop.sh and build.sh.
	Dir string
	// Assets holds kubelet, containerd, its runc shim, crictl and the
	// pause image: what build.sh prints.
	Assets string
}

// assetFiles are what start.sh needs in Assets.
var assetFiles = []string{"kubelet", "containerd", "containerd-shim-runc-v2", "crictl", "pause.tar"}

// ErrNotBuilt says the tools' binaries are not there; its message says how
// to build them.
var ErrNotBuilt = errors.New("the kubelet tools are not built")

// FindTools checks the scripts in dir and the binaries in assets ("" means
// the newest folder build.sh left in its default cache,
// ${XDG_CACHE_HOME:-~/.cache}/appliance-kubelet/<version>/bin), and that
// runc is installed (or RUNC names it). The error says what to run.
func FindTools(dir, assets string) (Tools, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Tools{}, err
	}
	t := Tools{Dir: abs, Assets: assets}
	if _, err := os.Stat(filepath.Join(abs, "start.sh")); err != nil {
		return t, fmt.Errorf("no kubelet tools in %s (want start.sh, stop.sh, build.sh there): %w", dir, err)
	}
	build := filepath.Join(dir, "build.sh")
	if t.Assets == "" {
		t.Assets = defaultAssets()
	}
	if t.Assets == "" {
		return t, fmt.Errorf("%w: run %s (about 7 minutes the first time, cached after; it prints the folder to give as KUBELET_ASSETS)", ErrNotBuilt, build)
	}
	for _, b := range assetFiles {
		if _, err := os.Stat(filepath.Join(t.Assets, b)); err != nil {
			return t, fmt.Errorf("%w: %s has no %s; run %s", ErrNotBuilt, t.Assets, b, build)
		}
	}
	if os.Getenv("RUNC") == "" {
		if _, err := exec.LookPath("runc"); err != nil {
			return t, fmt.Errorf("no runc for the kubelet tools: apt-get install runc (make test-deps installs it), or set RUNC")
		}
	}
	return t, nil
}

// defaultAssets is the newest complete folder in build.sh's default cache,
// or "".
func defaultAssets() string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".cache")
	}
	dirs, _ := filepath.Glob(filepath.Join(cache, "appliance-kubelet", "*", "bin"))
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "VERSIONS")); err != nil {
			continue
		}
		complete := true
		for _, b := range assetFiles {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				complete = false
			}
		}
		if complete {
			return d
		}
	}
	return ""
}
