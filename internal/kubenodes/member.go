package kubenodes

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"appliance/internal/cluster"
)

// Role labels a Node carries, node-role.kubernetes.io/<role>.
const (
	labelMaster       = "node-role.kubernetes.io/master"
	labelControlPlane = "node-role.kubernetes.io/control-plane"
)

// RoleOf is a Node's role from its labels: master when it carries
// node-role.kubernetes.io/master or .../control-plane (even if it is
// also labelled worker, as a compact cluster's schedulable masters are),
// else worker. A Node with no role label, or another one (infra, a
// custom pool), runs workloads like a worker; it is never put in the API
// pool by mistake this way. The bootstrap node never registers a Node.
func RoleOf(labels map[string]string) cluster.Role {
	if _, ok := labels[labelMaster]; ok {
		return cluster.RoleMaster
	}
	if _, ok := labels[labelControlPlane]; ok {
		return cluster.RoleMaster
	}
	return cluster.RoleWorker
}

// MemberOf is the member a Node stands for: its name, role, InternalIP
// addresses (both families, in the Node's order), readiness as Healthy,
// and the Ready condition's last heartbeat as LastSeen (zero when the
// kubelet never reported, like a configured member never heard from).
func MemberOf(n *corev1.Node) cluster.Member {
	m := cluster.Member{Name: n.Name, Role: RoleOf(n.Labels), Source: cluster.SourceKubernetes}
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			m.IPs = append(m.IPs, ip.Unmap())
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			m.Healthy = c.Status == corev1.ConditionTrue
			if !c.LastHeartbeatTime.IsZero() {
				m.LastSeen = c.LastHeartbeatTime.UTC()
			}
		}
	}
	return m
}
