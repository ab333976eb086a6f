//go:build bench

package imagebuild

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// nodeUnused are the parts of the binary a node never runs (it runs only
// `appliance run`): each group is measured by what only it pulls in.
var nodeUnused = []struct {
	name     string
	prefixes []string
}{
	{"oVirt provider (platform/ovirt)", []string{"appliance/platform/ovirt"}},
	{"libvirt provider (platform/libvirt)", []string{"appliance/platform/libvirt"}},
	{"KubeVirt provider (platform/kubevirt)", []string{"appliance/platform/kubevirt"}},
	{"the three providers", []string{"appliance/platform/libvirt", "appliance/platform/ovirt", "appliance/platform/kubevirt"}},
	{"provisioning (platform/..., images)", []string{"appliance/platform", "appliance/images"}},
	{"lab (app/lab, internal/netlab)", []string{"appliance/app/lab", "appliance/internal/netlab"}},
	{"Ignition and manifests (bootstrap)", []string{"appliance/bootstrap"}},
	{"all of the above", []string{"appliance/platform", "appliance/images", "appliance/app/lab", "appliance/internal/netlab", "appliance/bootstrap"}},
}

// TestBenchNodeImageSize prints what the node binary is made of, by module
// and by package, what the parts a node never runs weigh, and the image's
// compressed layer: the static-pod image's cost, for BENCHMARKS.md.
func TestBenchNodeImageSize(t *testing.T) {
	dir := t.TempDir()
	stripped, full := filepath.Join(dir, "appliance"), filepath.Join(dir, "appliance-full")
	// As `make build` does, and the same without -s -w to keep the symbols.
	goBuild(t, stripped, "-trimpath", "-ldflags", "-s -w -X main.version=size")
	goBuild(t, full, "-trimpath", "-ldflags", "-X main.version=size")

	st, err := os.Stat(stripped)
	if err != nil {
		t.Fatal(err)
	}
	fileSize := st.Size()
	img, err := Image(Options{Binary: stripped, Version: "size", Created: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	layer := m.Layers[0].Size

	pkgSize, sections, unattributed := symbolSizes(t, full)
	deps, modOf := goListDeps(t)
	var attributed int64
	for _, n := range pkgSize {
		attributed += n
	}
	// Symbols cover the code and data; the function tables (.gopclntab) and
	// the rest grow with the code, so a part's share of the file is taken as
	// its share of the attributed symbol bytes.
	share := func(n int64) float64 { return float64(n) / float64(attributed) }
	mb := func(n float64) string { return fmt.Sprintf("%.1f MB", n/1e6) }

	var b strings.Builder
	fmt.Fprintf(&b, "binary (-trimpath -s -w): %s; gzip layer in the image: %s (%.0f%%)\n", mb(float64(fileSize)), mb(float64(layer)), 100*float64(layer)/float64(fileSize))
	fmt.Fprintf(&b, "sections of the unstripped build:")
	for _, s := range sections {
		fmt.Fprintf(&b, " %s %s", s.name, mb(float64(s.size)))
	}
	fmt.Fprintf(&b, "\nsymbol bytes attributed to packages: %s; linker tables and unnamed data: %s\n\n", mb(float64(attributed)), mb(float64(unattributed)))

	byModule := map[string]int64{}
	for pkg, n := range pkgSize {
		mod := modOf[pkg]
		if mod == "" {
			mod = "(unknown)"
		}
		byModule[mod] += n
	}
	table := func(title string, sizes map[string]int64, limit int) {
		fmt.Fprintf(&b, "| %s | symbols | share | ≈ in the binary |\n|---|---|---|---|\n", title)
		for _, k := range topKeys(sizes, limit) {
			fmt.Fprintf(&b, "| %s | %s | %.1f%% | %s |\n", k, mb(float64(sizes[k])), 100*share(sizes[k]), mb(share(sizes[k])*float64(fileSize)))
		}
		b.WriteString("\n")
	}
	table("module (top 15)", byModule, 15)
	table("package (top 15)", pkgSize, 15)

	fmt.Fprintf(&b, "| what a node never runs | packages only it pulls in | ≈ in the binary | ≈ in the gzip layer |\n|---|---|---|---|\n")
	for _, g := range nodeUnused {
		only := onlyVia(deps, "appliance/cmd/appliance", g.prefixes)
		var n int64
		for _, p := range only {
			n += pkgSize[p]
		}
		fmt.Fprintf(&b, "| %s | %d | %s (%.0f%%) | %s |\n", g.name, len(only), mb(share(n)*float64(fileSize)), 100*share(n), mb(share(n)*float64(layer)))
	}
	t.Log("\n" + b.String())
}

func goBuild(t *testing.T, out string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", append(append([]string{"build", "-o", out}, args...), "appliance/cmd/appliance")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
}

type section struct {
	name string
	size uint64
}

// symbolSizes sums the sizes of the symbols stored in the file (not .bss)
// by the package their name begins with.
func symbolSizes(t *testing.T, path string) (map[string]int64, []section, int64) {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sections []section
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && s.Type == elf.SHT_PROGBITS && s.Size > 1<<20 {
			sections = append(sections, section{s.Name, s.Size})
		}
	}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int64{}
	var unattributed int64
	for _, s := range syms {
		if s.Section <= elf.SHN_UNDEF || int(s.Section) >= len(f.Sections) {
			continue
		}
		sec := f.Sections[s.Section]
		if sec.Type != elf.SHT_PROGBITS || sec.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		if pkg := symbolPackage(s.Name); pkg != "" {
			sizes[pkg] += int64(s.Size)
		} else {
			unattributed += int64(s.Size)
		}
	}
	return sizes, sections, unattributed
}

// symbolPackage returns the import path a Go symbol name starts with:
// "k8s.io/api/core/v1.(*Pod).Marshal" → "k8s.io/api/core/v1", the type
// descriptor "type:*net/http.Client" → "net/http"; "" for the linker's own.
func symbolPackage(name string) string {
	for _, p := range []string{"type:", "go:itab."} {
		name = strings.TrimPrefix(name, p)
	}
	if strings.HasPrefix(name, "go:") || strings.HasPrefix(name, ".") {
		return ""
	}
	name = strings.TrimLeft(name, "*[]")
	if i := strings.IndexAny(name, "[("); i >= 0 {
		name = name[:i]
	}
	slash := strings.LastIndex(name, "/")
	dot := strings.Index(name[slash+1:], ".")
	if dot <= 0 {
		return ""
	}
	return strings.TrimPrefix(name[:slash+1+dot], "vendor/")
}

// goListDeps returns the binary's package graph and each package's module
// ("Go standard library" for std), as the build sees it (cgo off).
func goListDeps(t *testing.T) (map[string][]string, map[string]string) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}|{{if .Module}}{{.Module.Path}}{{else}}Go standard library{{end}}|{{join .Imports \" \"}}", "appliance/cmd/appliance")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps, modOf := map[string][]string{}, map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "|", 3)
		if len(f) != 3 {
			continue
		}
		pkg := strings.TrimPrefix(f[0], "vendor/")
		modOf[pkg] = f[1]
		for _, imp := range strings.Fields(f[2]) {
			deps[pkg] = append(deps[pkg], strings.TrimPrefix(imp, "vendor/"))
		}
	}
	return deps, modOf
}

// onlyVia returns the packages root reaches only through a package under
// one of prefixes (those included): what leaving them out would remove.
func onlyVia(deps map[string][]string, root string, prefixes []string) []string {
	under := func(p string) bool {
		for _, pre := range prefixes {
			if p == pre || strings.HasPrefix(p, pre+"/") {
				return true
			}
		}
		return false
	}
	reach := func(skip func(string) bool) map[string]bool {
		seen := map[string]bool{root: true}
		stack := []string{root}
		for len(stack) > 0 {
			p := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, d := range deps[p] {
				if !seen[d] && !skip(d) {
					seen[d] = true
					stack = append(stack, d)
				}
			}
		}
		return seen
	}
	all, without := reach(func(string) bool { return false }), reach(under)
	var only []string
	for p := range all {
		if !without[p] {
			only = append(only, p)
		}
	}
	sort.Strings(only)
	return only
}

func topKeys(m map[string]int64, n int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	if len(keys) > n {
		keys = keys[:n]
	}
	return keys
}
