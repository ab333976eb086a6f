package bootstrap

import (
	"fmt"

	"appliance/internal/cluster"
)

// NodeConfig is the appliance.yaml a node is given: the validated model
// written back by cluster.Marshal, every default spelled out, so a node reads
// exactly what the installer's machine validated whether the input was an
// appliance.yaml or an install-config.yaml (whose pull secret and SSH key
// never reach the file). The provision section stays behind: it names the
// installer machine's platform, credentials files and caches, none of which a
// node has any use for. What it still may hold is vrrp.authPass, so the file
// is written 0600 (see NodeConfigMode).
func NodeConfig(cfg *cluster.Config) ([]byte, error) {
	if cfg == nil {
		return nil, fmt.Errorf("bootstrap: no cluster config")
	}
	out, err := cluster.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: write the node's appliance.yaml: %w", err)
	}
	return append([]byte(nodeConfigHeader), out...), nil
}

// nodeConfigHeader tells whoever opens the file on a node where it came from.
const nodeConfigHeader = "# Written by `appliance ignition` / `appliance manifests` from the installer's config;\n" +
	"# edit the source and run them again rather than this copy.\n"
