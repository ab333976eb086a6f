package bootstrap

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"appliance/internal/cluster"
)

// Paths on a node, as DESIGN.md's "On a node" lists them.
const (
	// StaticPodPath is where the kubelet picks up the appliance's pod.
	StaticPodPath = "/etc/kubernetes/manifests/appliance.yaml"
	// ConfigDir holds the node's appliance.yaml.
	ConfigDir = "/etc/appliance"
	// NodeConfigPath is the node's appliance.yaml, read by `appliance run`.
	NodeConfigPath = ConfigDir + "/appliance.yaml"
	// StateDir keeps what must survive a restart (DHCP leases).
	StateDir = "/var/lib/appliance"
	// NMRunDir is where NetworkManager writes the resolv.conf it would have
	// used; the DNS forwards to the resolvers listed there.
	NMRunDir = "/run/NetworkManager"
	// KubeletDir holds the kubelet's kubeconfig (kubeconfig, written once
	// its TLS bootstrap is done, after the pod started) and the client
	// certificate it names (pki/kubelet-client-current.pem, a symlink the
	// kubelet repoints at each rotation). `appliance run` reads both to
	// list Nodes and to review its scrape endpoint's callers, and serves
	// that endpoint with the kubelet's serving certificate
	// (pki/kubelet-server-current.pem, repointed likewise). The pod mounts
	// the folder read-only at the same path because none of these files
	// exists when the pod starts, and a file mount would never see them
	// appear (nor a symlink's new target).
	KubeletDir = "/var/lib/kubelet"
	// KubeletManifestsDir is the kubelet's static pod folder. The pod
	// mounts it read-only: `appliance run` refuses to start where OpenShift's
	// own on-prem keepalived, haproxy or coredns pod is there too.
	KubeletManifestsDir = "/etc/kubernetes/manifests"
	// binaryPath is where the image keeps the binary (internal/imagebuild's
	// BinaryPath; not imported, so the image builder stays out of the node
	// binary).
	binaryPath = "/appliance"
)

// PodOptions are the inputs of the static pod besides the cluster config.
type PodOptions struct {
	// Image is the container image reference, preferably by digest
	// (name@sha256:...), which is what the pod is pinned to when given.
	Image string
	// Role is the role of the nodes the pod is for; passed as --role so a
	// node missing from the config (a day-2 worker) still knows its role.
	Role cluster.Role
	// Drain is how long the LB drains open connections on SIGTERM
	// (lb.DefaultOptions().DrainTimeout); it sets the grace period.
	Drain time.Duration
}

// imageRef accepts name[:tag][@sha256:<64 hex>], the shapes a kubelet pulls.
var imageRef = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$`)

// CheckImage reports whether ref is an image reference a kubelet can pull.
func CheckImage(ref string) error {
	if ref == "" {
		return fmt.Errorf("no image: give --image REF, the appliance image the nodes pull (by digest, e.g. registry.example.com/appliance@sha256:...)")
	}
	if !imageRef.MatchString(ref) {
		return fmt.Errorf("image %q is not a reference a kubelet can pull (want registry/name[:tag][@sha256:<64 hex digits>])", ref)
	}
	return nil
}

// GracePeriod is how long the kubelet waits after SIGTERM: the handover
// (the priority-0 advert, and a backup's Master_Down of 3 intervals plus
// skew should that advert be lost: 4 intervals), then the LB's drain, then
// a margin for DNS and DHCP to stop and the process to exit.
func GracePeriod(cfg *cluster.Config, drain time.Duration) time.Duration {
	const margin = 5 * time.Second
	g := 4*cfg.VRRP.AdvertInterval + drain + margin
	return time.Duration(math.Ceil(g.Seconds())) * time.Second
}

// LivenessGracePeriod is how long the kubelet waits after SIGTERM when it
// kills the container because its liveness probe failed: GracePeriod
// without the LB's drain. A process that failed /healthz three times in a
// row serves no connection a drain would wait for, and a hung one does
// nothing on SIGTERM: until SIGKILL its node's kernel keeps the VIP
// addresses and answers ARP for them beside the peer that took over
// (measured under a real kubelet: e2e/kubelet_test.go's hung appliance).
// A live process still hands the VIPs over in that time.
func LivenessGracePeriod(cfg *cluster.Config) time.Duration {
	return GracePeriod(cfg, 0)
}

// probeEndpoint is where the kubelet reaches the admin listener: its
// address, or loopback when it listens on every address.
func probeEndpoint(listen string) (host string, port int, err error) {
	h, p, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("admin.listen %q: %w", listen, err)
	}
	port, err = strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("admin.listen %q: the kubelet needs a fixed port to probe (want e.g. 127.0.0.1:9447)", listen)
	}
	switch a, err := netip.ParseAddr(h); {
	case h == "" || (err == nil && a.Is4() && a.IsUnspecified()):
		h = "127.0.0.1"
	case err == nil && a.IsUnspecified():
		h = "::1"
	}
	return h, port, nil
}

// StaticPod is the pod the kubelet runs from StaticPodPath.
func StaticPod(cfg *cluster.Config, o PodOptions) (*corev1.Pod, error) {
	if err := CheckImage(o.Image); err != nil {
		return nil, err
	}
	switch o.Role {
	case cluster.RoleBootstrap, cluster.RoleMaster, cluster.RoleWorker:
	default:
		return nil, fmt.Errorf("static pod: role %q is not bootstrap, master or worker", o.Role)
	}
	host, port, err := probeEndpoint(cfg.Admin.Listen)
	if err != nil {
		return nil, err
	}
	probe := func(path string, period int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				// hostNetwork: the kubelet probes the node's own loopback.
				Host: host, Port: intstr.FromInt32(int32(port)), Path: path, Scheme: corev1.URISchemeHTTP,
			}},
			PeriodSeconds: period, TimeoutSeconds: 3, FailureThreshold: 3,
		}
	}
	live := probe("/healthz", 10)
	// Starting takes joining VRRP and the first health checks; a slow node
	// must not be killed for it.
	live.InitialDelaySeconds = 15
	liveGrace := int64(LivenessGracePeriod(cfg) / time.Second)
	live.TerminationGracePeriodSeconds = &liveGrace
	ready := probe("/readyz", 5)

	grace := int64(GracePeriod(cfg, o.Drain) / time.Second)
	hostPath := func(path string, t corev1.HostPathType) corev1.VolumeSource {
		return corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}
	}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "appliance",
			// The kubelet creates the mirror pod once `appliance manifests`'
			// Namespace exists; the static pod runs from the start either
			// way. Cluster monitoring finds the mirror pods there.
			Namespace: Namespace,
			Labels:    map[string]string{"app": "appliance", "appliance/role": string(o.Role)},
			// As OpenShift's own host-network static pods: the SCC the
			// mirror pod is admitted under is the one it needs.
			Annotations: map[string]string{"openshift.io/required-scc": "privileged"},
		},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			DNSPolicy:                     corev1.DNSDefault, // the node's resolv.conf: the pod serves DNS, it cannot depend on it
			PriorityClassName:             "system-node-critical",
			TerminationGracePeriodSeconds: &grace,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name:            "appliance",
				Image:           o.Image,
				ImagePullPolicy: corev1.PullIfNotPresent, // a node keeps its VIPs and DNS through a registry outage
				Command:         []string{binaryPath},
				Args:            []string{"run", "--config", NodeConfigPath, "--role", string(o.Role)},
				Resources: corev1.ResourceRequirements{
					// Requests only: a limit would throttle or OOM-kill
					// the node's VIPs and DNS under load. Set from what
					// the pod uses under a real kubelet (BENCHMARKS.md,
					// "Under a real kubelet"): 20m idle and 94m under
					// 1,000 DNS queries/s and 50 API connections/s on
					// the API VIP's holder; a resident set of 33 MiB
					// (52 MiB at its start-up peak), a working set of
					// 16 MiB.
					Requests: corev1.ResourceList{
						corev1.ResourceCPU:    resource.MustParse("100m"),
						corev1.ResourceMemory: resource.MustParse("64Mi"),
					},
				},
				// The secure scrape endpoint on the node's own addresses
				// (hostNetwork: the host's port), which the Service
				// `appliance manifests` writes points at.
				Ports: []corev1.ContainerPort{{
					Name: MetricsPortName, ContainerPort: int32(cfg.Admin.MetricsPort), Protocol: corev1.ProtocolTCP,
				}},
				LivenessProbe:  live,
				ReadinessProbe: ready,
				// Not privileged. NET_ADMIN: VIP addresses, the nftables
				// redirect, netlink; NET_RAW: VRRP (IP protocol 112), ARP
				// and NDP announcements, DHCP's packet socket;
				// NET_BIND_SERVICE: DNS on 53, DHCP on 67. It writes no
				// sysctl, mounts nothing, touches no device.
				SecurityContext: &corev1.SecurityContext{
					Privileged:               ptr(false),
					AllowPrivilegeEscalation: ptr(false),
					ReadOnlyRootFilesystem:   ptr(true),
					RunAsUser:                ptr(int64(0)), // file capabilities are none: the process needs root's bounding set
					Capabilities: &corev1.Capabilities{
						Drop: []corev1.Capability{"ALL"},
						Add:  []corev1.Capability{"NET_ADMIN", "NET_RAW", "NET_BIND_SERVICE"},
					},
					// container_t may neither write /var/lib/appliance
					// (var_lib_t) nor change the host's addresses and
					// nftables over netlink; spc_t may, without giving
					// the container any capability or device more.
					SELinuxOptions: &corev1.SELinuxOptions{Type: "spc_t"},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "config", MountPath: ConfigDir, ReadOnly: true},
					{Name: "state", MountPath: StateDir},
					{Name: "nm-run", MountPath: NMRunDir, ReadOnly: true},
					{Name: "kubelet", MountPath: KubeletDir, ReadOnly: true},
					{Name: "kubelet-manifests", MountPath: KubeletManifestsDir, ReadOnly: true},
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: hostPath(ConfigDir, corev1.HostPathDirectory)},
				{Name: "state", VolumeSource: hostPath(StateDir, corev1.HostPathDirectoryOrCreate)},
				// NetworkManager's own resolv.conf: the DNS's upstreams,
				// before the node's address is put first in /etc's.
				{Name: "nm-run", VolumeSource: hostPath(NMRunDir, corev1.HostPathDirectoryOrCreate)},
				// The kubelet's credentials, to list Nodes and to review
				// the scrape endpoint's callers, and its serving
				// certificate, which that endpoint serves (KubeletDir).
				{Name: "kubelet", VolumeSource: hostPath(KubeletDir, corev1.HostPathDirectoryOrCreate)},
				// Where OpenShift's kubelet reads static pods; OrCreate
				// for a kubelet configured with another folder, where
				// an empty one is no conflict.
				{Name: "kubelet-manifests", VolumeSource: hostPath(KubeletManifestsDir, corev1.HostPathDirectoryOrCreate)},
			},
		},
	}
	return pod, nil
}

// StaticPodYAML renders StaticPod as the kubelet reads it.
func StaticPodYAML(cfg *cluster.Config, o PodOptions) ([]byte, error) {
	pod, err := StaticPod(cfg, o)
	if err != nil {
		return nil, err
	}
	out, err := yaml.Marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("static pod: %w", err)
	}
	return out, nil
}

func ptr[T any](v T) *T { return &v }
