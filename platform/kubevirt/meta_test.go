package kubevirt

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestRefusesForeignObjects(t *testing.T) {
	t.Parallel()
	spec := testSpec()
	m := spec.Machines[1]
	ctx := context.Background()
	tests := []struct {
		name string
		obj  func(ns string) client.Object
		do   func(p *Provider) error
		want string
	}{
		{"VM with our name but no label",
			func(ns string) client.Object {
				vm := BuildVirtualMachine(spec, m, Options{Namespace: ns, Network: "machine-net"}.withDefaults())
				vm.Labels = nil
				return vm
			},
			func(p *Provider) error { return p.Create(ctx, spec, m, nil) }, "VirtualMachine %s/ocp4-x7k2p-master-0 exists without label"},
		{"Secret with our name, other cluster",
			func(ns string) client.Object {
				return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: m.Name + "-ignition", Namespace: ns, Labels: map[string]string{LabelInfraID: "other"}}}
			},
			func(p *Provider) error { return p.Create(ctx, spec, m, nil) }, "Secret %s/ocp4-x7k2p-master-0-ignition exists without label"},
		{"golden DataVolume of someone else",
			func(ns string) client.Object {
				dv := BuildGoldenDataVolume(spec, Options{Namespace: ns}, 16)
				dv.Labels = nil
				return dv
			},
			func(p *Provider) error { return p.PrepareImage(ctx, spec, nil) }, "DataVolume %s/ocp4-x7k2p-rhcos exists without label"},
		{"start a VM that is not ours",
			func(ns string) client.Object {
				vm := BuildVirtualMachine(spec, m, Options{Namespace: ns, Network: "machine-net"}.withDefaults())
				vm.Labels = map[string]string{LabelInfraID: "other"}
				return vm
			},
			func(p *Provider) error { return p.Start(ctx, spec, m) }, "not ours"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			obj := tt.obj(ns)
			seed(t, obj)
			p, _ := newProvider(t, ns, nil)
			before := obj.DeepCopyObject().(client.Object)
			if err := kube.c.Get(ctx, client.ObjectKeyFromObject(obj), before); err != nil {
				t.Fatal(err)
			}
			err := tt.do(p)
			want := tt.want
			if strings.Contains(want, "%s") {
				want = fmt.Sprintf(want, ns)
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %v, want %q", err, want)
			}
			after := obj.DeepCopyObject().(client.Object)
			if err := kube.c.Get(ctx, client.ObjectKeyFromObject(obj), after); err != nil {
				t.Fatal(err)
			}
			if after.GetResourceVersion() != before.GetResourceVersion() {
				t.Error("foreign object modified")
			}
		})
	}
}
