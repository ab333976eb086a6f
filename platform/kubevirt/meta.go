package kubevirt

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"appliance/internal/cluster"
	"appliance/platform"
)

// Labels and annotations on every object this package creates. Destroy and
// List select on LabelInfraID only.
const (
	LabelInfraID = "appliance.io/infra-id"
	LabelNode    = "appliance.io/node"
	LabelRole    = "appliance.io/role"
	// LabelGroup is "control-plane" (bootstrap and masters) or "compute"
	// (workers); anti-affinity keeps one group's VMs apart.
	LabelGroup = "appliance.io/group"

	// AnnotationImageSHA256 and AnnotationImageSource on the golden
	// DataVolume record which image it holds, so a later run can tell a
	// finished import of the same image from a stale one.
	AnnotationImageSHA256 = "appliance.io/image-sha256"
	AnnotationImageSource = "appliance.io/image-source"
	// AnnotationIgnitionSHA256 on the Secret records the Ignition digest.
	AnnotationIgnitionSHA256 = "appliance.io/ignition-sha256"
)

// Groups for LabelGroup.
const (
	GroupControlPlane = "control-plane"
	GroupCompute      = "compute"
)

// group maps a role to the anti-affinity group.
func group(r cluster.Role) string {
	if r == cluster.RoleWorker {
		return GroupCompute
	}
	return GroupControlPlane
}

// machineLabels are the labels on every object made for m.
func machineLabels(infraID string, m platform.Machine) map[string]string {
	return map[string]string{
		LabelInfraID: infraID,
		LabelNode:    m.Node,
		LabelRole:    string(m.Role),
		LabelGroup:   group(m.Role),
	}
}

// ours says whether obj carries infraID's mark.
func ours(obj metav1.Object, infraID string) bool {
	return infraID != "" && obj.GetLabels()[LabelInfraID] == infraID
}
