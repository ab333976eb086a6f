package ovirt

import (
	"context"
	"strings"
	"testing"
)

func TestParseMark(t *testing.T) {
	tests := []struct {
		in   string
		want mark
		ok   bool
	}{
		{"appliance-provision infraID=a node=master-0 role=master", mark{InfraID: "a", Node: "master-0", Role: "master"}, true},
		{"appliance-provision infraID=a image=abc", mark{InfraID: "a", Image: "abc"}, true},
		{"appliance-provision node=x", mark{}, false},
		{"appliance-provision infraID=", mark{}, false},
		{"appliance-provision infraID=a color=red", mark{}, false},
		{"not appliance-provision infraID=a", mark{}, false},
		{"", mark{}, false},
	}
	for _, tt := range tests {
		got, ok := parseMark(tt.in)
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseMark(%q) = %+v %v", tt.in, got, ok)
		}
	}
	m := mark{InfraID: "a", Node: "n", Role: "worker"}
	if got, ok := parseMark(m.String()); !ok || got != m {
		t.Errorf("round trip %+v", got)
	}
}

func FuzzParseMark(f *testing.F) {
	f.Add("appliance-provision infraID=ocp4-x node=master-0 role=master")
	f.Add("appliance-provision infraID=a image=abc")
	f.Add("appliance-provision")
	f.Add("something else")
	f.Fuzz(func(t *testing.T, s string) {
		m, ok := parseMark(s)
		if !ok {
			return
		}
		if m.InfraID == "" {
			t.Fatal("ok without infraID")
		}
		// A parsed mark survives a round trip when its values are single words.
		if strings.ContainsAny(m.InfraID+m.Node+m.Role+m.Image, " \t\n\v\f\r\u0085\u00a0=") {
			return
		}
		if m2, ok := parseMark(m.String()); !ok || m2 != m {
			t.Fatalf("round trip %q -> %+v -> %+v", s, m, m2)
		}
	})
}

func TestForeignTagWithOurNameIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	if _, err := e.mock.CreateTag(infraID, nil); err != nil {
		t.Fatal(err)
	}
	err := e.p.PrepareImage(context.Background(), testSpec(t, 0), nil)
	if err == nil || !strings.Contains(err.Error(), "not created by appliance provision") {
		t.Fatalf("err = %v", err)
	}
	if _, err := e.p.Destroy(context.Background(), infraID); err == nil {
		t.Fatal("destroy ignored a foreign tag with the cluster's name")
	}
	if tags, _ := e.mock.ListTags(); len(tags) != 1 {
		t.Fatalf("tags: %d", len(tags))
	}
}
