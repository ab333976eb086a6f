package libvirt

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestMarkRoundTrip(t *testing.T) {
	for _, mk := range []Mark{
		{InfraID: "c1", Kind: kindNode, Node: "master-0", Role: "master", Complete: true,
			Volumes: []MarkVolume{{Pool: "default", Name: "c1-master-0.qcow2", Purpose: purposeDisk}, {Pool: "default", Name: "c1-master-0.ign", Purpose: purposeIgnition}}},
		{InfraID: "c1", Kind: kindImage, Complete: true,
			Volumes: []MarkVolume{{Pool: "p", Name: "c1-base-abc.qcow2", Purpose: purposeBase, SHA256: "abc", Complete: true}}},
		{InfraID: `we<ird"&`, Kind: kindNode},
	} {
		s, err := encodeMark(mk)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(s, `xmlns:appliance="`+Namespace+`"`) || !strings.HasPrefix(s, "<appliance:machine") {
			t.Errorf("encoded mark lacks our prefixed namespace: %s", s)
		}
		got, err := decodeMark(s)
		if err != nil {
			t.Fatalf("decode %s: %v", s, err)
		}
		if !reflect.DeepEqual(got, mk) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, mk)
		}
	}
}

func TestDecodeMark(t *testing.T) {
	for _, tc := range []struct {
		name, inner string
		want        string // infraID, or "" for errNoMark
		err         bool
	}{
		{"empty", "", "", false},
		{"other namespace", `<x:machine xmlns:x="urn:other" infraID="c1" kind="node"/>`, "", false},
		{"no namespace", `<machine infraID="c1" kind="node"/>`, "", false},
		{"other prefix, our namespace", `<q:machine xmlns:q="` + Namespace + `" infraID="c1" kind="node"><q:volume pool="p" name="v" purpose="disk"/></q:machine>`, "c1", false},
		{"beside other elements", `<a:b xmlns:a="urn:a"><c/></a:b><appliance:machine xmlns:appliance="` + Namespace + `" infraID="c2" kind="node"/>`, "c2", false},
		{"empty infraID", `<appliance:machine xmlns:appliance="` + Namespace + `" infraID="" kind="node"/>`, "", false},
		{"broken", `<appliance:machine xmlns:appliance="` + Namespace + `" infraID="c1"`, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mk, err := decodeMark(tc.inner)
			switch {
			case tc.err:
				if err == nil || errors.Is(err, errNoMark) {
					t.Fatalf("want a parse error, got %v", err)
				}
			case tc.want == "":
				if !errors.Is(err, errNoMark) {
					t.Fatalf("want errNoMark, got %+v %v", mk, err)
				}
			default:
				if err != nil || mk.InfraID != tc.want {
					t.Fatalf("got %+v %v, want infraID %s", mk, err, tc.want)
				}
			}
		})
	}
}

func FuzzDecodeMark(f *testing.F) {
	s, _ := encodeMark(Mark{InfraID: "c", Kind: kindNode, Volumes: []MarkVolume{{Pool: "p", Name: "n", Purpose: purposeDisk}}})
	f.Add(s)
	f.Add(`<a:b xmlns:a="urn:a"/>`)
	f.Fuzz(func(t *testing.T, inner string) {
		mk, err := decodeMark(inner)
		if err == nil && mk.InfraID == "" {
			t.Fatal("accepted a mark without infraID")
		}
	})
}
