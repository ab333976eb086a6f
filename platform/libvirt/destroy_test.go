package libvirt

import (
	"reflect"
	"testing"
)

func TestPlanDestroy(t *testing.T) {
	vol := func(n string) MarkVolume { return MarkVolume{Pool: "p", Name: n} }
	all := []markedDomain{
		{Name: "c1-base-image", Mark: Mark{InfraID: "c1", Kind: kindImage, Volumes: []MarkVolume{vol("c1-base.qcow2")}}},
		{Name: "c1-worker-0", Mark: Mark{InfraID: "c1", Kind: kindNode, Volumes: []MarkVolume{vol("c1-worker-0.qcow2"), vol("c1-worker-0.ign")}}},
		{Name: "c1-master-0", Mark: Mark{InfraID: "c1", Kind: kindNode, Volumes: []MarkVolume{vol("c1-master-0.qcow2")}}},
		// Similar names, not ours or another cluster's:
		{Name: "c1-master-1", Foreign: true},
		{Name: "c1x-master-0", Mark: Mark{InfraID: "c1x", Kind: kindNode, Volumes: []MarkVolume{vol("c1x-master-0.qcow2")}}},
		// Another cluster's mark claims a volume c1's mark also lists: kept.
		{Name: "c2-odd", Mark: Mark{InfraID: "c2", Kind: kindNode, Volumes: []MarkVolume{vol("c1-worker-0.ign")}}},
	}
	got := planDestroy(all, "c1")
	want := []destroyStep{
		{Domain: "c1-master-0", Kind: kindNode, Volumes: []MarkVolume{vol("c1-master-0.qcow2")}},
		{Domain: "c1-worker-0", Kind: kindNode, Volumes: []MarkVolume{vol("c1-worker-0.qcow2")}},
		{Domain: "c1-base-image", Kind: kindImage, Volumes: []MarkVolume{vol("c1-base.qcow2")}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("plan\n got %+v\nwant %+v", got, want)
	}
	if p := planDestroy(all, ""); p != nil {
		t.Errorf("empty infraID selected %+v", p)
	}
	if p := planDestroy(all, "c3"); len(p) != 0 {
		t.Errorf("unknown infraID selected %+v", p)
	}
}
