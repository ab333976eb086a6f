package kubevirt

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/platform"
)

// applyAll runs the engine's Apply, which calls PrepareImage, Create and
// Start as `appliance provision apply` does.
func applyAll(t *testing.T, p *Provider, spec *platform.Spec, noStart bool) *platform.Result {
	t.Helper()
	res, err := platform.Apply(context.Background(), p, spec, platform.ApplyOptions{Parallel: 4, NoStart: noStart})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return res
}

// snapshot maps kind/name to resourceVersion for every object in ns.
func snapshot(t *testing.T, c client.Client, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	ctx := context.Background()
	var vms kubevirtv1.VirtualMachineList
	var dvs cdiv1.DataVolumeList
	var secs corev1.SecretList
	for _, l := range []client.ObjectList{&vms, &dvs, &secs} {
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range vms.Items {
		out["vm/"+o.Name] = o.ResourceVersion
	}
	for _, o := range dvs.Items {
		out["dv/"+o.Name] = o.ResourceVersion
	}
	for _, o := range secs.Items {
		out["secret/"+o.Name] = o.ResourceVersion
	}
	return out
}

// seed creates objs as other programs would have: a DataVolume's status is
// written after the create (status subresource, as CDI does), and a PVC
// loses the protection finalizer the API server adds, whose controller
// does not run here (it would hold every PVC's deletion forever).
func seed(t *testing.T, objs ...client.Object) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		o = o.DeepCopyObject().(client.Object)
		var status cdiv1.DataVolumeStatus
		dv, isDV := o.(*cdiv1.DataVolume)
		if isDV {
			status = dv.Status
		}
		if err := kube.c.Create(ctx, o); err != nil {
			t.Fatalf("seed %T %s: %v", o, o.GetName(), err)
		}
		if isDV && status.Phase != "" {
			dv.Status = status
			if err := kube.c.Status().Update(ctx, dv); err != nil {
				t.Fatalf("seed status of %s: %v", dv.Name, err)
			}
		}
		if pvc, ok := o.(*corev1.PersistentVolumeClaim); ok && len(pvc.Finalizers) > 0 {
			pvc.Finalizers = nil
			if err := kube.c.Update(ctx, pvc); err != nil {
				t.Fatalf("seed %s without finalizers: %v", pvc.Name, err)
			}
		}
	}
}

// testPVC is a claim as CDI would make it.
func testPVC(ns, name string, labels map[string]string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: gib(1)}},
		},
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestStrictCreates proves the provider's client is strict: a field the
// CRD does not know fails the create instead of vanishing.
func TestStrictCreates(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	p, _ := newProvider(t, ns, nil)
	spec := testSpec()
	vm := BuildVirtualMachine(spec, spec.Machines[1], p.opts)
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(vm)
	if err != nil {
		t.Fatal(err)
	}
	ifc := u["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["domain"].(map[string]any)["devices"].(map[string]any)["interfaces"].([]any)[0].(map[string]any)
	ifc["macAdress"] = ifc["macAddress"] // misspelt
	obj := &unstructured.Unstructured{Object: u}
	obj.SetAPIVersion("kubevirt.io/v1")
	obj.SetKind("VirtualMachine")
	err = p.c.Create(context.Background(), obj)
	if err == nil || !strings.Contains(err.Error(), `unknown field "spec.template.spec.domain.devices.interfaces[0].macAdress"`) {
		t.Fatalf("create with a misspelt field: %v; want a strict-decoding refusal", err)
	}
}
