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

// Layers of the module, bottom up (DESIGN.md): the foundation under
// internal/, the services, the compositions under app/, the whole-system
// tests in e2e/, and the commands under cmd/.
const (
	layerFoundation = "foundation"
	layerService    = "service"
	layerApp        = "app"
	layerE2E        = "e2e"
	layerCmd        = "cmd"
)

// services are the top-level service packages.
var services = []string{"vrrp", "dnsserver", "lb", "dhcp", "bootstrap", "platform", "images"}

// unit names the package a module path belongs to for layering purposes
// (a service with its sub-packages, internal/X, app/X, cmd/X, e2e) and its
// layer.
func unit(pkg string) (name, layer string) {
	rest := strings.TrimPrefix(pkg, "appliance/")
	parts := strings.Split(rest, "/")
	switch parts[0] {
	case "internal", "app", "cmd":
		if len(parts) < 2 {
			return rest, ""
		}
		layer := map[string]string{"internal": layerFoundation, "app": layerApp, "cmd": layerCmd}[parts[0]]
		return parts[0] + "/" + parts[1], layer
	case "e2e":
		return "e2e", layerE2E
	}
	for _, s := range services {
		if parts[0] == s {
			return s, layerService
		}
	}
	return rest, ""
}

// mayImport says whether a package of layer from may import one of layer
// to (units differ): each layer imports only the layers below it; services
// never import each other, and compositions never import each other.
func mayImport(from, to string) bool {
	rank := map[string]int{layerFoundation: 0, layerService: 1, layerApp: 2, layerE2E: 3, layerCmd: 3}
	switch {
	case from == layerService && to == layerService, from == layerApp && to == layerApp:
		return false
	case to == layerE2E || to == layerCmd:
		return false
	}
	return rank[to] < rank[from] || (from == layerFoundation && to == layerFoundation)
}

// TestLayering enforces DESIGN.md's dependency direction: the foundation
// (internal/) imports no service and no composition; services never import
// each other nor a composition; a composition (app/) never imports another;
// nothing imports a command or the whole-system tests; only app/provision
// joins the platforms, the images and the node files; no grab-bag package.
func TestLayering(t *testing.T) {
	const mod = "appliance/"
	for pkg, imports := range goList(t, "0", "appliance/...") {
		if !strings.HasPrefix(pkg, mod) {
			continue
		}
		from, fromLayer := unit(pkg)
		if fromLayer == "" {
			t.Errorf("%s belongs to no layer: put it under internal/ (below the services), among the services, or under app/ (above them); see DESIGN.md", pkg)
		}
		for _, seg := range strings.Split(strings.TrimPrefix(pkg, mod), "/") {
			switch seg {
			case "utils", "util", "common", "pkg", "helpers", "misc":
				t.Errorf("%s: a %q package means a responsibility has no home yet", pkg, seg)
			}
		}
		joins := map[string]bool{}
		for _, imp := range imports {
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			to, toLayer := unit(imp)
			if s, _ := unit(imp); s == "platform" || s == "images" || s == "bootstrap" {
				joins[s] = true
			}
			if from == to || mayImport(fromLayer, toLayer) {
				continue
			}
			t.Errorf("%s (%s) imports %s (%s): %s", pkg, fromLayer, imp, toLayer, layerRule(fromLayer, toLayer))
		}
		if len(joins) == 3 && from != "app/provision" {
			t.Errorf("%s imports platform, images and bootstrap together: that composition is app/provision's alone", pkg)
		}
	}
}

// layerRule says which rule an import breaks.
func layerRule(from, to string) string {
	switch {
	case to == layerCmd:
		return "nothing imports a command"
	case to == layerE2E:
		return "nothing imports the whole-system tests"
	case from == layerService && to == layerService:
		return "services never import each other; compose them under app/"
	case from == layerApp && to == layerApp:
		return "one composition never imports another; move what both need below the services (internal/) or into a service"
	case from == layerFoundation:
		return "the foundation (internal/) imports no service and no composition"
	}
	return "a layer imports only the layers below it"
}

// TestLayerRules pins the rules themselves, so a slip in unit or mayImport
// cannot pass every import silently.
func TestLayerRules(t *testing.T) {
	for _, c := range []struct {
		pkg, name, layer string
	}{
		{"appliance/internal/cluster", "internal/cluster", layerFoundation},
		{"appliance/internal/netlab/netlabtest", "internal/netlab", layerFoundation},
		{"appliance/platform/kubevirt/kubevirttest", "platform", layerService},
		{"appliance/app/node", "app/node", layerApp},
		{"appliance/cmd/appliance", "cmd/appliance", layerCmd},
		{"appliance/e2e", "e2e", layerE2E},
		{"appliance/stray", "stray", ""},
	} {
		if n, l := unit(c.pkg); n != c.name || l != c.layer {
			t.Errorf("unit(%s) = %s, %s; want %s, %s", c.pkg, n, l, c.name, c.layer)
		}
	}
	for _, c := range []struct {
		from, to string
		ok       bool
	}{
		{layerFoundation, layerFoundation, true}, {layerFoundation, layerService, false}, {layerFoundation, layerApp, false},
		{layerService, layerFoundation, true}, {layerService, layerService, false}, {layerService, layerApp, false},
		{layerApp, layerService, true}, {layerApp, layerFoundation, true}, {layerApp, layerApp, false},
		{layerE2E, layerApp, true}, {layerCmd, layerApp, true}, {layerCmd, layerE2E, false}, {layerApp, layerCmd, false},
	} {
		if got := mayImport(c.from, c.to); got != c.ok {
			t.Errorf("mayImport(%s, %s) = %v, want %v", c.from, c.to, got, c.ok)
		}
	}
}
