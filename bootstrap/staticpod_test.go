package bootstrap

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"appliance/internal/cluster"
)

// decodePod reads a manifest the way a strict client does: an unknown or
// misspelt field is an error.
func decodePod(t *testing.T, y []byte) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(y, &pod); err != nil {
		t.Fatalf("strict YAML decode: %v\n%s", err, y)
	}
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	var again corev1.Pod
	if err := dec.Decode(&again); err != nil {
		t.Fatalf("strict JSON decode: %v", err)
	}
	return &pod
}

func TestStaticPod(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       string
		role      cluster.Role
		image     string
		wantGrace int64 // 4 adverts + 10 s drain + 5 s, rounded up
		wantHost  string
		wantPort  int32
	}{
		{"native master", `
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}
`, cluster.RoleMaster, testImage, 16, "127.0.0.1", 9447},
		{"keepalived-openshift bootstrap, tag", `
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}
vrrp: {mode: keepalived-openshift}
`, cluster.RoleBootstrap, "registry.example.com:5000/infra/appliance:v1.2", 19, "127.0.0.1", 9447},
		{"worker, admin on every address", `
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}
admin: {listen: ":19447"}
`, cluster.RoleWorker, testImage, 16, "127.0.0.1", 19447},
		{"IPv6 admin", `
cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: "fd00:126::/64", apiVIPs: ["fd00:126::5"], ingressVIPs: ["fd00:126::6"]}
admin: {listen: "[::]:9447"}
`, cluster.RoleMaster, testImage, 16, "::1", 9447},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustParse(t, tc.cfg)
			y, err := StaticPodYAML(cfg, PodOptions{Image: tc.image, Role: tc.role, Drain: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			pod := decodePod(t, y)
			s := pod.Spec
			if pod.APIVersion != "v1" || pod.Kind != "Pod" || pod.Name != "appliance" || pod.Namespace == "" {
				t.Errorf("object: %s %s %s/%s", pod.APIVersion, pod.Kind, pod.Namespace, pod.Name)
			}
			if !s.HostNetwork {
				t.Error("not hostNetwork: the VIPs and DNS live in the node's network namespace")
			}
			if s.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName %q", s.PriorityClassName)
			}
			if s.DNSPolicy != corev1.DNSDefault {
				t.Errorf("dnsPolicy %q: the pod serves DNS and must not depend on the cluster's", s.DNSPolicy)
			}
			if len(s.Containers) != 1 {
				t.Fatalf("%d containers", len(s.Containers))
			}
			c := s.Containers[0]
			if c.Image != tc.image {
				t.Errorf("image %q, want %q", c.Image, tc.image)
			}
			wantArgs := []string{"run", "--config", NodeConfigPath, "--role", string(tc.role)}
			if !slices.Equal(c.Command, []string{"/appliance"}) || !slices.Equal(c.Args, wantArgs) {
				t.Errorf("command %q args %q, want [/appliance] %q", c.Command, c.Args, wantArgs)
			}
			sc := c.SecurityContext
			if sc == nil || sc.Capabilities == nil {
				t.Fatal("no security context")
			}
			if sc.Privileged == nil || *sc.Privileged {
				t.Error("privileged")
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Error("allowPrivilegeEscalation not false")
			}
			if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("drop %v, want ALL", sc.Capabilities.Drop)
			}
			add := slices.Clone(sc.Capabilities.Add)
			slices.Sort(add)
			if !slices.Equal(add, []corev1.Capability{"NET_ADMIN", "NET_BIND_SERVICE", "NET_RAW"}) {
				t.Errorf("capabilities %v, want exactly NET_ADMIN, NET_RAW, NET_BIND_SERVICE", add)
			}
			vols := map[string]string{}
			for _, v := range s.Volumes {
				if v.HostPath == nil {
					t.Errorf("volume %s is not a hostPath", v.Name)
					continue
				}
				vols[v.Name] = v.HostPath.Path
			}
			mounts := map[string]corev1.VolumeMount{}
			for _, m := range c.VolumeMounts {
				mounts[vols[m.Name]] = m
			}
			if m, ok := mounts[ConfigDir]; !ok || m.MountPath != ConfigDir || !m.ReadOnly {
				t.Errorf("config dir mount %+v", m)
			}
			if m, ok := mounts[StateDir]; !ok || m.MountPath != StateDir || m.ReadOnly {
				t.Errorf("state dir mount %+v (must be writable: DHCP leases)", m)
			}
			// The kubelet's kubeconfig and the client certificate it
			// names, at the paths the kubeconfig gives, read-only.
			if m, ok := mounts[KubeletDir]; !ok || m.MountPath != KubeletDir || !m.ReadOnly {
				t.Errorf("kubelet dir mount %+v (want %s read-only at the same path)", m, KubeletDir)
			}
			for _, p := range []struct {
				name  string
				probe *corev1.Probe
				path  string
			}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
				if p.probe == nil || p.probe.HTTPGet == nil {
					t.Errorf("%s: no httpGet probe", p.name)
					continue
				}
				g := p.probe.HTTPGet
				if g.Host != tc.wantHost || g.Port.IntVal != tc.wantPort || g.Path != p.path || g.Scheme != corev1.URISchemeHTTP {
					t.Errorf("%s probe %s://%s:%s%s, want http://%s:%d%s", p.name, g.Scheme, g.Host, g.Port.String(), g.Path, tc.wantHost, tc.wantPort, p.path)
				}
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("requests %v", c.Resources.Requests)
			}
			if len(c.Resources.Limits) != 0 {
				t.Errorf("limits %v: the node's VIPs must not be throttled or OOM-killed", c.Resources.Limits)
			}
			if s.TerminationGracePeriodSeconds == nil || *s.TerminationGracePeriodSeconds != tc.wantGrace {
				t.Errorf("grace period %v, want %d", s.TerminationGracePeriodSeconds, tc.wantGrace)
			}
			// Longer than the handover: Master_Down (3 adverts + skew)
			// plus the LB's drain.
			handover := 3*cfg.VRRP.AdvertInterval + cfg.VRRP.AdvertInterval + 10*time.Second
			if time.Duration(*s.TerminationGracePeriodSeconds)*time.Second <= handover {
				t.Errorf("grace period %ds is not longer than the handover %s", *s.TerminationGracePeriodSeconds, handover)
			}
			// A liveness kill waits for the handover, not the drain: a
			// hung appliance's node keeps its VIPs in the kernel until
			// SIGKILL (the kubelet tier's hung appliance).
			lg := c.LivenessProbe.TerminationGracePeriodSeconds
			if lg == nil || *lg != tc.wantGrace-10 {
				t.Errorf("liveness probe's grace period %v, want %d (the pod's without the drain)", lg, tc.wantGrace-10)
			} else if time.Duration(*lg)*time.Second <= 4*cfg.VRRP.AdvertInterval {
				t.Errorf("liveness probe's grace period %ds does not cover the handover", *lg)
			}
		})
	}
}

func TestStaticPodRefuses(t *testing.T) {
	cfg := mustParse(t, testConfigYAML)
	for _, tc := range []struct {
		image string
		role  cluster.Role
		want  string
	}{
		{"", cluster.RoleMaster, "--image"},
		{"Registry/UPPER", cluster.RoleMaster, "not a reference"},
		{"registry/appliance@sha256:abc", cluster.RoleMaster, "not a reference"},
		{testImage, "router", "not bootstrap, master or worker"},
	} {
		_, err := StaticPod(cfg, PodOptions{Image: tc.image, Role: tc.role, Drain: time.Second})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("image %q role %q: error %v, want one saying %q", tc.image, tc.role, err, tc.want)
		}
	}
}
