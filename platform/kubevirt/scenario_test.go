package kubevirt

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"appliance/platform"
)

func TestApplyCreatesClusterObjects(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	p, _ := newProvider(t, ns, func(o *Options) { o.Network = ns + "/machine-net" })
	c := kube.c
	spec := testSpec()
	ctx := context.Background()

	res := applyAll(t, p, spec, true)
	if len(res.Created) != 6 {
		t.Fatalf("created %v", res.Created)
	}
	objs := snapshot(t, c, ns)
	if len(objs) != 6+6+1 {
		t.Errorf("objects = %v", objs)
	}
	for _, m := range spec.Machines {
		for _, k := range []string{"vm/" + m.Name, "secret/" + m.Name + "-ignition"} {
			if _, ok := objs[k]; !ok {
				t.Errorf("missing %s", k)
			}
		}
	}

	// The golden image as the API server stored it.
	dv := &cdiv1.DataVolume{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ocp4-x7k2p-rhcos"}, dv); err != nil {
		t.Fatal(err)
	}
	if dv.Spec.Source.HTTP.URL != spec.Image.URL || dv.Labels[LabelInfraID] != testInfraID {
		t.Errorf("golden = %+v", dv)
	}
	if q := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]; q.String() != "17Gi" {
		t.Errorf("golden size %s", q.String())
	}

	// One VM read back from the API server: nothing pruned on the way.
	vm := &kubevirtv1.VirtualMachine{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ocp4-x7k2p-master-1"}, vm); err != nil {
		t.Fatal(err)
	}
	vm.APIVersion, vm.Kind = "kubevirt.io/v1", "VirtualMachine"
	b, err := yaml.Marshal(vm)
	if err != nil {
		t.Fatal(err)
	}
	y := string(b)
	for _, want := range []string{
		"runStrategy: Halted",
		"macAddress: 52:54:00:7e:00:11",
		"networkName: " + ns + "/machine-net",
		"    - bridge: {}\n",
		"secretRef:\n            name: ocp4-x7k2p-master-1-ignition",
		"pvc:\n          name: ocp4-x7k2p-rhcos\n          namespace: " + ns,
		"storage: 120Gi",
		"storageClassName: fast",
		"appliance.io/infra-id: ocp4-x7k2p",
		"appliance.io/node: master-1",
		"appliance.io/role: master",
		"podAntiAffinity:\n          preferredDuringSchedulingIgnoredDuringExecution:",
		"topologyKey: kubernetes.io/hostname",
		"hostname: master-1",
		"cores: 4",
		"guest: 16Gi",
	} {
		if !strings.Contains(y, want) {
			t.Errorf("VM YAML lacks %q:\n%s", want, y)
			break
		}
	}

	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ocp4-x7k2p-bootstrap-ignition"}, sec); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sec.Data["userdata"], spec.Machines[0].Ignition) || sec.Labels[LabelRole] != "bootstrap" {
		t.Errorf("bootstrap secret = %v %q", sec.Labels, sec.Data["userdata"])
	}

	// List sees them all, halted, with MACs and node names.
	vms, err := p.List(ctx, testInfraID)
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != 6 {
		t.Fatalf("list = %+v", vms)
	}
	for _, v := range vms {
		if !v.Complete || v.Power != platform.PowerStopped || v.Node == "" || len(v.MAC) != 6 {
			t.Errorf("listed %+v", v)
		}
	}

	// Re-running changes nothing: no object created or rewritten.
	res = applyAll(t, p, spec, true)
	if len(res.Created)+len(res.Completed) != 0 || len(res.Existing) != 6 {
		t.Errorf("second apply: %+v", res)
	}
	for _, m := range spec.Machines {
		if err := p.Create(ctx, spec, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.PrepareImage(ctx, spec, nil); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, c, ns); !mapsEqual(after, objs) {
		t.Errorf("re-run changed objects:\nbefore %v\nafter  %v", objs, after)
	}
}
