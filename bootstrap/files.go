package bootstrap

import (
	"fmt"
	"slices"
	"time"

	"appliance/internal/cluster"
	"appliance/internal/nodeip"
)

// File is one regular file put on a node: owned by root, written whole.
type File struct {
	Path     string
	Mode     int
	Contents []byte
}

// NodeConfigMode keeps the node's appliance.yaml to root: it may carry
// vrrp.authPass, and only the static pod (root) reads it.
const NodeConfigMode = 0o600

// OwnedPaths are every path this package puts on a node. A config's entries
// at these paths are ours: replaced on every run, removed from a role that
// no longer needs them, never duplicated.
var OwnedPaths = []string{
	StaticPodPath, NodeConfigPath, NodeIPHintPath,
	ResolvDispatcherPath, ResolvNMConfPath, ResolvScriptPath, ResolvUnitPath, KubeletResolvDropinPath,
}

// NodeIPHintPath is read by OpenShift's nodeip-configuration.service: its
// hints make the kubelet take the node's machine-network address, whatever
// interface the default route is on.
const NodeIPHintPath = nodeip.HintFilePath

// Owned reports whether path is one of OwnedPaths.
func Owned(path string) bool { return slices.Contains(OwnedPaths, path) }

// RoleServices says what a role's nodes run, as `appliance run` decides it
// (cmd wires app/node's plan here).
type RoleServices struct {
	// Runs is true when the role's nodes run the static pod at all.
	Runs bool
	// DNS is true when the pod serves DNS there, so the node resolves
	// through it.
	DNS bool
}

// Options are what the node files need besides the cluster config.
type Options struct {
	// Image is the appliance image the static pod runs.
	Image string
	// Drain is the LB's drain on SIGTERM (lb.DefaultOptions().DrainTimeout).
	Drain time.Duration
	// Services tells what each role runs; required.
	Services func(cluster.Role) RoleServices
	// RunbookBase is where the alerts' runbook links point
	// (monitoring.Options.RunbookBase); manifests only.
	RunbookBase string
}

// Files are the files a node of role is given, in a fixed order; none for
// a role that does not run the appliance.
func Files(cfg *cluster.Config, role cluster.Role, o Options) ([]File, error) {
	if o.Services == nil {
		return nil, fmt.Errorf("bootstrap: Options.Services is not set")
	}
	svc := o.Services(role)
	if !svc.Runs {
		return nil, nil
	}
	pod, err := StaticPodYAML(cfg, PodOptions{Image: o.Image, Role: role, Drain: o.Drain})
	if err != nil {
		return nil, err
	}
	conf, err := NodeConfig(cfg)
	if err != nil {
		return nil, err
	}
	files := []File{
		{Path: StaticPodPath, Mode: 0o644, Contents: pod},
		{Path: NodeConfigPath, Mode: NodeConfigMode, Contents: conf},
	}
	// Every role: the appliance takes its members from the Nodes'
	// InternalIPs, so each node's must lie in the machine network.
	if len(cfg.Network.NodeIPHints) > 0 {
		files = append(files, File{Path: NodeIPHintPath, Mode: 0o644, Contents: nodeip.HintFile(cfg.Network.NodeIPHints)})
	}
	if svc.DNS {
		rf, err := ResolvFiles(cfg)
		if err != nil {
			return nil, err
		}
		files = append(files, rf...)
	}
	return files, nil
}
