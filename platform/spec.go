package platform

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"appliance/internal/cluster"
)

// Assets is what the installer wrote for the cluster: one Ignition config
// per role and, when present, metadata.json with the infra ID.
type Assets struct {
	Dir string
	// Ignition maps a role to its config; IgnitionFile to the file it came from.
	Ignition     map[cluster.Role][]byte
	IgnitionFile map[cluster.Role]string
	// InfraID is metadata.json's infraID; "" when the file is absent.
	InfraID string
}

// MaxIgnitionSize is the most a VM can be handed directly: platforms cap
// user data about there (oVirt's custom script, a Kubernetes Secret at
// 1 MiB). A larger config is served over HTTPS behind a pointer config
// (bootstrap.ServeConfigs), which is the caller's to arrange.
const MaxIgnitionSize = 1 << 20

// maxAssetSize bounds what is read: a bootstrap.ign is a few hundred KiB, a
// few MiB with large files embedded; anything near this is the wrong file.
const maxAssetSize = 64 << 20

// LoadAssets reads dir's <role>.ign for every role in roles, and
// metadata.json when present. A missing or malformed config is an error that
// names the file.
func LoadAssets(dir string, roles []cluster.Role) (*Assets, error) {
	a := &Assets{Dir: dir, Ignition: map[cluster.Role][]byte{}, IgnitionFile: map[cluster.Role]string{}}
	for _, r := range roles {
		if _, done := a.Ignition[r]; done {
			continue
		}
		path := filepath.Join(dir, string(r)+".ign")
		data, err := readIgnition(path)
		if err != nil {
			return nil, err
		}
		a.Ignition[r], a.IgnitionFile[r] = data, path
	}
	meta, err := os.ReadFile(filepath.Join(dir, "metadata.json"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("platform: assets: %w", err)
	default:
		var m struct {
			InfraID string `json:"infraID"`
		}
		if err := json.Unmarshal(meta, &m); err != nil {
			return nil, fmt.Errorf("platform: assets: %s is not the installer's metadata.json: %w", filepath.Join(dir, "metadata.json"), err)
		}
		a.InfraID = m.InfraID
	}
	return a, nil
}

func readIgnition(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("platform: assets: %s is missing; run 'openshift-install create ignition-configs --dir %s' first", path, filepath.Dir(path))
		}
		return nil, fmt.Errorf("platform: assets: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxAssetSize+1))
	if err != nil {
		return nil, fmt.Errorf("platform: assets: read %s: %w", path, err)
	}
	if len(data) > maxAssetSize {
		return nil, fmt.Errorf("platform: assets: %s is larger than %d MiB; is it the installer's Ignition config?", path, maxAssetSize>>20)
	}
	if err := checkIgnition(data); err != nil {
		return nil, fmt.Errorf("platform: assets: %s: %w", path, err)
	}
	return data, nil
}

// checkIgnition is a shape check only: the config is JSON with a spec 3
// ignition.version. Full validation belongs to the bootstrap package; this
// catches the wrong file (a YAML, a spec 2 config) before VMs are built.
func checkIgnition(data []byte) error {
	var doc struct {
		Ignition *struct {
			Version string `json:"version"`
		} `json:"ignition"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("not an Ignition config (not JSON: %w)", err)
	}
	if doc.Ignition == nil || doc.Ignition.Version == "" {
		return errors.New("not an Ignition config (no ignition.version)")
	}
	if !strings.HasPrefix(doc.Ignition.Version, "3.") {
		return fmt.Errorf("Ignition spec %s; RHCOS needs spec 3.x", doc.Ignition.Version)
	}
	return nil
}

// Roles lists the roles of cfg's nodes, each once, in node order.
func Roles(cfg *cluster.Config) []cluster.Role {
	var out []cluster.Role
	seen := map[cluster.Role]bool{}
	for _, n := range cfg.Nodes {
		if !seen[n.Role] {
			seen[n.Role] = true
			out = append(out, n.Role)
		}
	}
	return out
}

// InfraID is the mark of every resource made for cfg's cluster:
// provision.infraID, else the installer's (metadata.json in assets, which
// may be nil), else the cluster name. Without assets it is what destroy
// can know on its own.
func InfraID(cfg *cluster.Config, assets *Assets) string {
	if p := cfg.Provision; p != nil && p.InfraID != "" {
		return p.InfraID
	}
	if assets != nil && assets.InfraID != "" {
		return assets.InfraID
	}
	return cfg.Cluster.Name
}

// maxVMName keeps VM names valid everywhere: KubeVirt names are DNS labels.
const maxVMName = 63

// BuildSpec turns the validated config, the installer's assets and the base
// image into the Spec every provider builds from. It is pure: no platform is
// contacted.
func BuildSpec(cfg *cluster.Config, assets *Assets, img Image) (*Spec, error) {
	p := cfg.Provision
	if p == nil {
		return nil, errors.New("platform: appliance.yaml has no provision section; add one with at least 'platform: libvirt|ovirt|kubevirt'")
	}
	infra := InfraID(cfg, assets)
	s := &Spec{InfraID: infra, ClusterName: cfg.Cluster.Name, BaseDomain: cfg.Cluster.BaseDomain, Image: img}
	for _, role := range []cluster.Role{cluster.RoleBootstrap, cluster.RoleMaster, cluster.RoleWorker} {
		for _, n := range cfg.Nodes {
			if n.Role != role {
				continue
			}
			ign, ok := assets.Ignition[role]
			if !ok {
				return nil, fmt.Errorf("platform: node %s: no Ignition config for role %s in %s", n.Name, role, assets.Dir)
			}
			name := infra + "-" + n.Name
			if len(name) > maxVMName {
				return nil, fmt.Errorf("platform: node %s: VM name %q is longer than %d characters; shorten provision.infraID or the node name", n.Name, name, maxVMName)
			}
			if n.MAC == nil {
				// Parse derives one whenever provision is set; nil means the
				// config did not come from Parse.
				return nil, fmt.Errorf("platform: node %s has no MAC address", n.Name)
			}
			size := p.Sizes[role]
			s.Machines = append(s.Machines, Machine{
				Name: name, Node: n.Name, Role: role,
				CPUs: size.CPUs, MemoryMiB: size.MemoryMiB, DiskGiB: size.DiskGiB,
				MAC: n.MAC, IPs: n.IPs,
				Ignition: ign, IgnitionSource: assets.IgnitionFile[role],
			})
		}
	}
	if len(s.Machines) == 0 {
		return nil, errors.New("platform: appliance.yaml lists no nodes to create")
	}
	return s, nil
}
