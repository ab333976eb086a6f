package bootstrap

import (
	"encoding/json"
	"fmt"

	v32 "github.com/coreos/ignition/v2/config/v3_2"
	t32 "github.com/coreos/ignition/v2/config/v3_2/types"
	"sigs.k8s.io/yaml"

	"appliance/internal/cluster"
)

// MachineConfigVersion is the Ignition spec version of the MachineConfigs:
// one every Machine Config Operator since OpenShift 4.6 accepts.
const MachineConfigVersion = "3.2.0"

// MachineConfig is machineconfiguration.openshift.io/v1 MachineConfig with
// the fields the Machine Config Operator documents (there is no Go type for
// it in this module's dependencies).
type MachineConfig struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   MachineConfigMeta `json:"metadata"`
	Spec       MachineConfigSpec `json:"spec"`
}

// MachineConfigMeta is the part of ObjectMeta a manifest sets.
type MachineConfigMeta struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
}

// MachineConfigSpec is MachineConfig's spec. Only Config is written here;
// the others are listed so a strict decoder knows them.
type MachineConfigSpec struct {
	Config                         json.RawMessage `json:"config,omitempty"`
	OSImageURL                     string          `json:"osImageURL,omitempty"`
	BaseOSExtensionsContainerImage string          `json:"baseOSExtensionsContainerImage,omitempty"`
	KernelArguments                []string        `json:"kernelArguments,omitempty"`
	Extensions                     []string        `json:"extensions,omitempty"`
	FIPS                           bool            `json:"fips,omitempty"`
	KernelType                     string          `json:"kernelType,omitempty"`
}

// RoleLabel selects the pool a MachineConfig applies to.
const RoleLabel = "machineconfiguration.openshift.io/role"

// MachineConfigFile is where `appliance manifests` puts role's manifest
// under the installer's asset folder.
func MachineConfigFile(role cluster.Role) string {
	return "openshift/99-appliance-" + string(role) + ".yaml"
}

// MachineConfigFor is role's MachineConfig carrying files (Files' output
// for that role), in an Ignition 3.2.0 config built with the module's types
// and checked by its parser.
func MachineConfigFor(role cluster.Role, files []File) (*MachineConfig, error) {
	if role != cluster.RoleMaster && role != cluster.RoleWorker {
		return nil, fmt.Errorf("machineconfig: role %q has no machine config pool (want master or worker)", role)
	}
	ign := t32.Config{Ignition: t32.Ignition{Version: MachineConfigVersion}}
	for _, f := range files {
		ign.Storage.Files = append(ign.Storage.Files, c32.file(f))
	}
	raw, err := json.Marshal(ign)
	if err != nil {
		return nil, fmt.Errorf("machineconfig %s: %w", role, err)
	}
	if _, rpt, err := v32.Parse(raw); err != nil {
		return nil, &IgnitionError{File: MachineConfigFile(role), Err: err, Entries: rpt.Entries, Config: raw}
	}
	return &MachineConfig{
		APIVersion: "machineconfiguration.openshift.io/v1",
		Kind:       "MachineConfig",
		Metadata: MachineConfigMeta{
			Name:   "99-appliance-" + string(role),
			Labels: map[string]string{RoleLabel: string(role)},
		},
		Spec: MachineConfigSpec{Config: raw},
	}, nil
}

// MachineConfigYAML renders a MachineConfig as a manifest file.
func MachineConfigYAML(mc *MachineConfig) ([]byte, error) {
	out, err := yaml.Marshal(mc)
	if err != nil {
		return nil, fmt.Errorf("machineconfig %s: %w", mc.Metadata.Name, err)
	}
	return out, nil
}
