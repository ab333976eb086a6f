package kubevirt

import (
	"context"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/platform"
	"appliance/platform/kubevirt/kubevirttest"
)

// preflightErr runs Preflight and returns its error text ("" for none)
// and warnings.
func preflightErr(t *testing.T, p *Provider, spec *platform.Spec) (string, []string) {
	t.Helper()
	warnings, err := p.Preflight(context.Background(), spec)
	if err == nil {
		return "", warnings
	}
	return err.Error(), warnings
}

func TestPreflight(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	huge := testSpec()
	huge.Machines[0].Ignition = make([]byte, maxSecretBytes+1)
	tests := []struct {
		name string
		mut  func(*Options)
		spec *platform.Spec
		want []string // in the error, all of them; none for no error
	}{
		{name: "all there"},
		{name: "network as namespace/name", mut: func(o *Options) { o.Network = ns + "/machine-net" }},
		{name: "no such namespace", mut: func(o *Options) { o.Namespace = "nope-" + ns },
			want: []string{`namespace "nope-` + ns + `" not found on https://127.0.0.1:`, "kubectl create namespace nope-" + ns}},
		{name: "no such network", mut: func(o *Options) { o.Network = "default/no-such-net" },
			want: []string{"NetworkAttachmentDefinition default/no-such-net not found", `provision.kubevirt.network "default/no-such-net"`}},
		{name: "no such storage class", mut: func(o *Options) { o.StorageClass = "slow" },
			want: []string{`StorageClass "slow" not found`, "provision.kubevirt.storageClass", "fast"}},
		{name: "Ignition over the Secret limit", spec: huge,
			want: []string{"node bootstrap: Ignition from assets/bootstrap.ign is 1048577 bytes, over the 1048576-byte Secret limit", "pointer config"}},
		{name: "every refusal at once", mut: func(o *Options) { o.Network, o.StorageClass = "no-such-net", "slow" },
			want: []string{"NetworkAttachmentDefinition " + ns + "/no-such-net not found", `StorageClass "slow" not found`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, _ := newProvider(t, ns, tt.mut)
			spec := tt.spec
			if spec == nil {
				spec = testSpec()
			}
			got, warnings := preflightErr(t, p, spec)
			if len(warnings) != 0 {
				t.Errorf("warnings for an admin: %q", warnings)
			}
			if len(tt.want) == 0 {
				if got != "" {
					t.Fatalf("refused: %s", got)
				}
				return
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("error lacks %q:\n%s", w, got)
				}
			}
		})
	}
}

// TestPreflightDefaultStorageClass changes which class is the cluster's
// default, so it alone names no class.
func TestPreflightDefaultStorageClass(t *testing.T) {
	ns := newNamespace(t)
	p, _ := newProvider(t, ns, func(o *Options) { o.StorageClass = "" })
	got, _ := preflightErr(t, p, testSpec())
	if !strings.Contains(got, "no StorageClass named and none is the default") || !strings.Contains(got, "fast") {
		t.Fatalf("no default class: %q", got)
	}
	// A container disk booted ephemerally needs no class at all.
	p.opts.EphemeralContainerDisk = true
	cd := testSpec()
	cd.Image = platform.Image{ContainerDisk: "quay.io/x/rhcos:1"}
	if got, _ := preflightErr(t, p, cd); got != "" {
		t.Errorf("ephemeral container disk refused: %s", got)
	}
	p.opts.EphemeralContainerDisk = false

	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "default-" + ns, Annotations: map[string]string{annDefaultClass: "true"}},
		Provisioner: "example.com/default"}
	if err := kube.c.Create(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.c.Delete(context.Background(), sc) })
	if got, _ := preflightErr(t, p, testSpec()); got != "" {
		t.Errorf("with a default class: %s", got)
	}
}

// TestPreflightAccess checks a namespace-bound user: what it may not do is
// refused, what it may not read is only a warning.
func TestPreflightAccess(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	all := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "get", "list", "update", "delete"}},
		{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachines"}, Verbs: []string{"create", "get", "list", "patch", "delete"}},
		{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachineinstances"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"cdi.kubevirt.io"}, Resources: []string{"datavolumes", "datavolumes/source"}, Verbs: []string{"create", "get", "list", "delete"}},
		{APIGroups: []string{"k8s.cni.cncf.io"}, Resources: []string{"network-attachment-definitions"}, Verbs: []string{"get"}},
	}
	grant(t, ns, "tenant-"+ns, all...)
	got, warnings := preflightErr(t, impersonating(t, ns, "tenant-"+ns), testSpec())
	if got != "" {
		t.Errorf("a tenant with every namespaced right was refused: %s", got)
	}
	joined := strings.Join(warnings, "\n")
	for _, want := range []string{`may not read namespace "` + ns + `"`, `may not read StorageClasses (cluster-scoped)`, `StorageClass "fast" is not checked`} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings lack %q:\n%s", want, joined)
		}
	}

	grant(t, ns, "reader-"+ns, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}})
	got, warnings = preflightErr(t, impersonating(t, ns, "reader-"+ns), testSpec())
	for _, want := range []string{
		"may not create virtualmachines.kubevirt.io in namespace " + ns,
		"may not list virtualmachineinstances.kubevirt.io in namespace " + ns + " on the API server",
		"may not list secrets in namespace",
		"may not patch virtualmachines.kubevirt.io",
		"may not create datavolumes.cdi.kubevirt.io in namespace",
		"may not create datavolumes.cdi.kubevirt.io/source",
		"RoleBinding in " + ns,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("refusal lacks %q:\n%s", want, got)
		}
	}
	if w := strings.Join(warnings, "\n"); !strings.Contains(w, "may not read NetworkAttachmentDefinition "+ns+"/machine-net") {
		t.Errorf("warnings lack the unreadable network:\n%s", w)
	}
	if strings.Contains(got, "may not create secrets") {
		t.Errorf("refused what the user may do:\n%s", got)
	}
}

// TestPreflightWithoutKubeVirt runs a second, bare API server: first with
// no CRD at all, then with KubeVirt's and CDI's but not Multus'.
func TestPreflightWithoutKubeVirt(t *testing.T) {
	needAPI(t)
	t.Parallel()
	srv, skip, err := kubevirttest.StartBare()
	t.Cleanup(srv.Stop)
	if err != nil {
		t.Fatal(err)
	}
	if srv == nil {
		kubevirttest.Skip(t, skip)
	}
	kc := srv.Kubeconfig

	_, err = New(context.Background(), Options{Kubeconfig: kc, Namespace: "default", Network: "machine-net"}, nil)
	if err == nil || !strings.Contains(err.Error(), "serves no KubeVirt kubevirt.io/v1 VirtualMachine API") || !strings.Contains(err.Error(), KubeVirtRelease) {
		t.Errorf("New without KubeVirt: %v", err)
	}
	bare := func() *Provider {
		cfg, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(cfg, client.Options{Scheme: kube.scheme})
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewWithClient(c, Options{Namespace: "default", Network: "machine-net", StorageClass: "fast"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, _ := preflightErr(t, bare(), testSpec())
	if !strings.Contains(got, "serves no VirtualMachine in kubevirt.io/v1: KubeVirt is not installed there") || !strings.Contains(got, KubeVirtRelease) {
		t.Errorf("preflight without KubeVirt: %s", got)
	}

	if err := srv.InstallCRDs(false); err != nil {
		t.Fatal(err)
	}
	got, _ = preflightErr(t, bare(), testSpec())
	if !strings.Contains(got, "serves no NetworkAttachmentDefinition in k8s.cni.cncf.io/v1: Multus is not installed") ||
		strings.Contains(got, "KubeVirt is not installed") {
		t.Errorf("preflight without Multus: %s", got)
	}
}
