package kubeapi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

func TestMissing(t *testing.T) {
	tools, assets := t.TempDir(), t.TempDir()
	touch := func(dir, name string) {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name          string
		tools, assets string
		setup         func()
		want          string // "" or a part of the reason
	}{
		{"no tools folder", "", assets, nil, "no kube-apiserver scripts"},
		{"no start.sh", tools, assets, nil, "no kube-apiserver scripts"},
		{"no assets given", tools, "", func() { touch(tools, "start.sh") }, "no kube-apiserver binaries given"},
		{"no etcd", tools, assets, func() { touch(assets, "kube-apiserver"); touch(assets, "kubectl") }, "no etcd in"},
		{"all there", tools, assets, func() { touch(assets, "etcd") }, ""},
	} {
		if c.setup != nil {
			c.setup()
		}
		got := Missing(c.tools, c.assets)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: Missing = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestStart starts the shared tools' kube-apiserver in a node and asks it
// for /readyz from another node with the admin kubeconfig: its URL, its
// token and the unverified certificate all work.
func TestStart(t *testing.T) {
	netlabtest.RequireRoot(t)
	tools, err := filepath.Abs("../../../shared/tools/kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if why := Missing(tools, assets); why != "" {
		msg := "kubeapi: " + why + "; run KUBEBUILDER_ASSETS=$(../shared/tools/kube-apiserver/build.sh) go test"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	l := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "kubeapi"})
	s, err := Start(t.Context(), l.Nodes[0], tools, assets, filepath.Join(t.TempDir(), "kube"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Token == "" || !strings.HasPrefix(s.URL, "https://"+l.Nodes[0].IPv4.Addr().String()+":") {
		t.Fatalf("URL %q, token %q: want the node's address and a token", s.URL, s.Token)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(s.AdminKubeconfig(s.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := l.Nodes[1].Run(t.Context(), filepath.Join(assets, "kubectl"), "--kubeconfig", kc, "--request-timeout", "10s",
		"get", "--raw", "/readyz")
	if err != nil || strings.TrimSpace(out) != "ok" {
		t.Fatalf("kubectl get --raw /readyz from another node: %v\n%s", err, out)
	}
}
