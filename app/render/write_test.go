package render

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		got[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestWriteDirReplacesItsOwnFolderWhole(t *testing.T) {
	out := filepath.Join(t.TempDir(), "site", "out")
	first := []File{{Path: "bind/a.zone", Data: []byte("a")}, {Path: "hosts", Data: []byte("h1")},
		{Path: "keepalived/master/keepalived.conf", Data: []byte("k"), Secret: true}}
	if err := WriteDir(out, first); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(out, "keepalived/master/keepalived.conf"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("keepalived.conf: %v, mode %v; want 0600 (it holds the VRRP password)", err, fi.Mode())
	}
	if fi, err := os.Stat(filepath.Join(out, "hosts")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("hosts: %v; want mode 0644", err)
	}
	second := []File{{Path: "bind/b.zone", Data: []byte("b")}, {Path: "hosts", Data: []byte("h2")}}
	if err := WriteDir(out, second); err != nil {
		t.Fatal(err)
	}
	got := readTree(t, out)
	if len(got) != 3 || got["bind/b.zone"] != "b" || got["hosts"] != "h2" || got[Marker] == "" {
		t.Errorf("after the second run the folder holds %v; want exactly b.zone, hosts and the marker", got)
	}
	// Nothing is left beside it.
	ents, _ := os.ReadDir(filepath.Dir(out))
	if len(ents) != 1 {
		t.Errorf("the parent holds %d entries, want only out", len(ents))
	}
}

func TestWriteDirRefusesForeignFolders(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "etc")
	if err := os.MkdirAll(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(foreign, "passwd"), []byte("root"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := WriteDir(foreign, []File{{Path: "hosts", Data: []byte("h")}})
	if err == nil || !strings.Contains(err.Error(), "passwd") {
		t.Errorf("WriteDir over a foreign folder: %v; want a refusal naming what is there", err)
	}
	if b, _ := os.ReadFile(filepath.Join(foreign, "passwd")); string(b) != "root" {
		t.Error("the foreign folder was changed")
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteDir(file, nil); err == nil {
		t.Error("WriteDir over a file succeeded")
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteDir(empty, []File{{Path: "hosts", Data: []byte("h")}}); err != nil {
		t.Errorf("WriteDir into an empty folder: %v", err)
	}
	if err := WriteDir(filepath.Join(dir, "x"), []File{{Path: "../escape", Data: nil}}); err == nil {
		t.Error("a path leaving the folder was written")
	}
}
