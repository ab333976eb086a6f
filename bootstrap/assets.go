package bootstrap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"appliance/bootstrap/monitoring"
	"appliance/internal/cluster"
)

// AssetRoles are the installer's Ignition files and the role each is for.
var AssetRoles = []struct {
	File string
	Role cluster.Role
}{
	{"bootstrap.ign", cluster.RoleBootstrap},
	{"master.ign", cluster.RoleMaster},
	{"worker.ign", cluster.RoleWorker},
}

// Edited is what EditAssets did to one file.
type Edited struct {
	File     string // the path written
	Role     cluster.Role
	Version  string   // its Ignition spec version, kept
	Added    []string // the node paths put in
	Orig     string   // where the original is kept ("" when it already was)
	Warnings []string
}

// EditAssets merges each role's Files into dir's bootstrap.ign, master.ign
// and worker.ign, in place; a missing file is skipped. The first run keeps
// each original as *.ign.orig. Every file is merged before any is written,
// so a refused one leaves the folder as it was.
func EditAssets(dir string, cfg *cluster.Config, o Options) ([]Edited, error) {
	type pending struct {
		Edited
		out  []byte
		orig []byte
		mode fs.FileMode
	}
	var todo []pending
	for _, a := range AssetRoles {
		path := filepath.Join(dir, a.File)
		raw, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		fi, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		files, err := Files(cfg, a.Role, o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		m, err := Merge(path, raw, files)
		if err != nil {
			return nil, err
		}
		p := pending{Edited: Edited{File: path, Role: a.Role, Version: m.Version, Warnings: m.Warnings}, out: m.Config, mode: fi.Mode().Perm()}
		for _, f := range files {
			p.Added = append(p.Added, f.Path)
		}
		if _, err := os.Stat(path + ".orig"); errors.Is(err, fs.ErrNotExist) {
			p.Orig, p.orig = path+".orig", raw
		} else if err != nil {
			return nil, err
		}
		todo = append(todo, p)
	}
	if len(todo) == 0 {
		return nil, fmt.Errorf("%s holds none of bootstrap.ign, master.ign, worker.ign (run `openshift-install create ignition-configs --dir %s` first)", dir, dir)
	}
	var done []Edited
	for _, p := range todo {
		if p.Orig != "" {
			if err := writeFile(p.Orig, p.orig, p.mode); err != nil {
				return done, err
			}
		}
		if err := writeFile(p.File, p.out, p.mode); err != nil {
			return done, err
		}
		done = append(done, p.Edited)
	}
	return done, nil
}

// writeFile replaces path atomically, so an interrupted run leaves either
// the old file or the new one.
func writeFile(path string, data []byte, mode fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// WriteManifests writes the master and worker MachineConfigs under dir
// (openshift/99-appliance-<role>.yaml); NodeReaderFile, the RBAC that lets
// kubelets' credentials list Nodes; NamespaceFile, the static pods'
// namespace; MonitoringFile, what cluster monitoring needs to scrape every
// node; and the alerts and the console's dashboard (monitoring.Manifests).
// A role with nothing to run gets no MachineConfig, and one left by an
// earlier run is removed.
func WriteManifests(dir string, cfg *cluster.Config, o Options) ([]string, error) {
	type out struct {
		path string
		data []byte
	}
	var outs []out
	for _, role := range []cluster.Role{cluster.RoleMaster, cluster.RoleWorker} {
		files, err := Files(cfg, role, o)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, MachineConfigFile(role))
		if len(files) == 0 {
			outs = append(outs, out{path: path})
			continue
		}
		mc, err := MachineConfigFor(role, files)
		if err != nil {
			return nil, err
		}
		y, err := MachineConfigYAML(mc)
		if err != nil {
			return nil, err
		}
		outs = append(outs, out{path, y})
	}
	rbac, err := NodeReaderYAML()
	if err != nil {
		return nil, err
	}
	outs = append(outs, out{filepath.Join(dir, NodeReaderFile), rbac})
	ns, err := NamespaceYAML()
	if err != nil {
		return nil, err
	}
	outs = append(outs, out{filepath.Join(dir, NamespaceFile), ns})
	mon, err := MonitoringYAML(cfg)
	if err != nil {
		return nil, err
	}
	outs = append(outs, out{filepath.Join(dir, MonitoringFile), mon})
	alerts, err := monitoring.Manifests(monitoring.Options{RunbookBase: o.RunbookBase})
	if err != nil {
		return nil, err
	}
	for _, f := range alerts {
		outs = append(outs, out{filepath.Join(dir, f.Path), f.Data})
	}
	if err := os.MkdirAll(filepath.Join(dir, "openshift"), 0o755); err != nil {
		return nil, err
	}
	var written []string
	for _, o := range outs {
		if o.data == nil {
			if err := os.Remove(o.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return written, err
			}
			continue
		}
		// 0600: the manifests carry the node's appliance.yaml.
		if err := writeFile(o.path, o.data, 0o600); err != nil {
			return written, err
		}
		written = append(written, o.path)
	}
	return written, nil
}
