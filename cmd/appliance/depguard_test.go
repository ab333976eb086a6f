package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// goList runs `go list -deps` over the whole module with cgo off, the way the
// binary is built, and returns each package with its imports.
func goList(t *testing.T, cgo string, patterns ...string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}}|{{.Standard}}|{{len .CgoFiles}}|{{join .Imports \" \"}}"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "|", 4)
		if len(f) != 4 {
			continue
		}
		if f[1] == "true" {
			continue
		}
		pkgs[f[0]] = strings.Fields(f[3])
		if cgo == "1" && f[2] != "0" {
			pkgs[f[0]] = append(pkgs[f[0]], "C")
		}
	}
	return pkgs
}

// TestDependencyGuard keeps the binary static and lean: no cgo anywhere in its
// dependencies (even when cgo is available), and none of the packages that
// would pull a world of code in.
func TestDependencyGuard(t *testing.T) {
	forbidden := []string{
		"github.com/coredns/coredns/core/plugin", // registers every plugin; we list ours explicitly
		"libvirt.org/go/libvirt",                 // cgo; go-libvirt speaks the RPC in pure Go
		"github.com/mattn/go-sqlite3",
	}
	for pkg, imports := range goList(t, "1", "appliance/cmd/appliance") {
		for _, imp := range imports {
			if imp == "C" {
				t.Errorf("%s uses cgo; the binary must build with CGO_ENABLED=0 and stay pure Go", pkg)
			}
		}
		for _, f := range forbidden {
			if pkg == f || strings.HasPrefix(pkg, f+"/") {
				t.Errorf("forbidden package %s is in the binary's dependencies", pkg)
			}
		}
	}
}

// TestLayering enforces DESIGN.md's dependency direction: services never import
// each other, internal/cluster imports no service, and no grab-bag package exists.
func TestLayering(t *testing.T) {
	const mod = "appliance/"
	services := []string{"vrrp", "dnsserver", "lb", "dhcp", "bootstrap", "platform", "images"}
	top := func(pkg string) string {
		rest := strings.TrimPrefix(pkg, mod)
		if i := strings.IndexByte(rest, '/'); i >= 0 && !strings.HasPrefix(rest, "internal/") && !strings.HasPrefix(rest, "cmd/") {
			return rest[:i]
		}
		if strings.HasPrefix(rest, "internal/") {
			parts := strings.SplitN(rest, "/", 3)
			if len(parts) >= 2 {
				return parts[0] + "/" + parts[1]
			}
		}
		return rest
	}
	isService := func(name string) bool {
		for _, s := range services {
			if name == s {
				return true
			}
		}
		return false
	}
	for pkg, imports := range goList(t, "0", "appliance/...") {
		if !strings.HasPrefix(pkg, mod) {
			continue
		}
		from := top(pkg)
		for _, seg := range strings.Split(strings.TrimPrefix(pkg, mod), "/") {
			switch seg {
			case "utils", "util", "common", "pkg", "helpers", "misc":
				t.Errorf("%s: a %q package means a responsibility has no home yet", pkg, seg)
			}
		}
		for _, imp := range imports {
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			to := top(imp)
			switch {
			case from == to:
			case isService(from) && isService(to):
				t.Errorf("%s imports %s: services never import each other; wire them in cmd/appliance", pkg, imp)
			case from == "internal/cluster" && (isService(to) || strings.HasPrefix(to, "cmd")):
				t.Errorf("%s imports %s: the cluster model imports no service", pkg, imp)
			case strings.HasPrefix(to, "cmd"):
				t.Errorf("%s imports %s: nothing imports a command", pkg, imp)
			}
		}
	}
}
