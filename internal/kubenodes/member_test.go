package kubenodes

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"appliance/internal/cluster"
)

func TestRoleOf(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		want   cluster.Role
	}{
		{map[string]string{labelMaster: ""}, cluster.RoleMaster},
		{map[string]string{labelControlPlane: ""}, cluster.RoleMaster},
		{map[string]string{"node-role.kubernetes.io/worker": ""}, cluster.RoleWorker},
		// A compact cluster's schedulable masters carry both.
		{map[string]string{labelMaster: "", "node-role.kubernetes.io/worker": ""}, cluster.RoleMaster},
		{map[string]string{"node-role.kubernetes.io/infra": ""}, cluster.RoleWorker},
		{nil, cluster.RoleWorker},
		// The value does not matter, only the key.
		{map[string]string{labelControlPlane: "true"}, cluster.RoleMaster},
	} {
		if got := RoleOf(tc.labels); got != tc.want {
			t.Errorf("RoleOf(%v) = %q, want %q", tc.labels, got, tc.want)
		}
	}
}

func TestMemberOf(t *testing.T) {
	beat := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "master-1", Labels: map[string]string{labelMaster: ""}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeHostName, Address: "master-1"},
				{Type: corev1.NodeInternalIP, Address: "192.0.2.11"},
				{Type: corev1.NodeExternalIP, Address: "198.51.100.11"},
				{Type: corev1.NodeInternalIP, Address: "2001:db8::11"},
				{Type: corev1.NodeInternalIP, Address: "not-an-address"},
			},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(beat)},
			},
		},
	}
	m := MemberOf(n)
	want := []netip.Addr{netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("2001:db8::11")}
	if m.Name != "master-1" || m.Role != cluster.RoleMaster || m.Source != cluster.SourceKubernetes || !m.Healthy ||
		!slices.Equal(m.IPs, want) || !m.LastSeen.Equal(beat) {
		t.Errorf("MemberOf = %+v, want master-1, master, kubernetes, healthy, %v, seen %v", m, want, beat)
	}

	n.Status.Conditions[1].Status = corev1.ConditionUnknown // the node controller's verdict on a silent kubelet
	if MemberOf(n).Healthy {
		t.Error("a Node whose Ready condition is Unknown is healthy")
	}
	n.Status.Conditions = nil
	if m := MemberOf(n); m.Healthy || !m.LastSeen.IsZero() {
		t.Errorf("a Node without a Ready condition: healthy %v, last seen %v; want unhealthy, never seen", m.Healthy, m.LastSeen)
	}
}

func TestKubeconfigPick(t *testing.T) {
	dir := t.TempDir()
	kubelet, kubeadm := filepath.Join(dir, "kubelet-kubeconfig"), filepath.Join(dir, "kubelet.conf")
	cands := []string{kubelet, kubeadm}
	if got := pickKubeconfig("", []string{filepath.Join(dir, "no-such-dir", "kubeconfig")}); got != "" {
		t.Errorf("no kubeconfig nor its folder anywhere: picked %q", got)
	}
	// No file yet, but the kubelet's folder exists: the first candidate is
	// waited for.
	if got := pickKubeconfig("", cands); got != kubelet {
		t.Errorf("no kubeconfig yet: picked %q, want %q to wait for", got, kubelet)
	}
	if err := os.WriteFile(kubeadm, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := pickKubeconfig("", cands); got != kubeadm {
		t.Errorf("only the second exists: picked %q, want %q", got, kubeadm)
	}
	if err := os.Mkdir(kubelet, 0o700); err != nil { // a folder is no kubeconfig
		t.Fatal(err)
	}
	if got := pickKubeconfig("", cands); got != kubeadm {
		t.Errorf("the first is a folder: picked %q, want %q", got, kubeadm)
	}
	if got := pickKubeconfig("/flag/path", cands); got != "/flag/path" {
		t.Errorf("an explicit path is taken as given: picked %q", got)
	}
}

func TestRestConfigLocalServer(t *testing.T) {
	kc := writeKubeconfig(t, "https://api-int.ocp4.example.com:6443")
	cfg, err := restConfig(kc, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://api-int.ocp4.example.com:6443" || cfg.TLSClientConfig.ServerName != "" {
		t.Errorf("without a local server: host %q, server name %q", cfg.Host, cfg.TLSClientConfig.ServerName)
	}
	cfg, err = restConfig(kc, DefaultLocalServer)
	if err != nil {
		t.Fatal(err)
	}
	// The local apiserver is asked for, and checked against, the name the
	// kubeconfig's CA vouches for.
	if cfg.Host != DefaultLocalServer || cfg.TLSClientConfig.ServerName != "api-int.ocp4.example.com" {
		t.Errorf("with the local server: host %q, server name %q", cfg.Host, cfg.TLSClientConfig.ServerName)
	}
	if _, err := restConfig(kc, "localhost:6443"); err == nil {
		t.Error("a local server without a scheme was accepted")
	}
	if _, err := restConfig(filepath.Join(t.TempDir(), "absent"), ""); err == nil {
		t.Error("an absent kubeconfig was accepted")
	}
	if _, err := restConfig("", ""); err == nil {
		t.Error("an empty kubeconfig path was accepted")
	}
}

// writeKubeconfig writes a kubeconfig naming server, with a token and no
// CA (New contacts nothing, so none is needed).
func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	body := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " + server +
		"\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
