package node

import (
	"bytes"
	"encoding/json"
	"testing"

	"appliance/internal/cluster"
)

// TestStatusJSON keeps the "node" section of /status what it was as a map:
// the same keys, values and order, indented as the admin listener writes it.
func TestStatusJSON(t *testing.T) {
	encode := func(v any) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	for _, c := range []struct {
		name string
		role cluster.Role
		plan Plan
	}{
		{"master-0", cluster.RoleMaster, Plan{APIVIP: true, IngressVIP: true, LB: true, DNS: true, MDNS: true, DHCP: true}},
		{"worker-<1>&", cluster.RoleWorker, Plan{}},
		{"", "", Plan{DNS: true}},
	} {
		was := map[string]any{"name": c.name, "role": c.role, "plan": c.plan.String()}
		got := encode(Status{Name: c.name, Plan: c.plan.String(), Role: c.role})
		if want := encode(was); got != want {
			t.Errorf("node section:\n%s\nwas:\n%s", got, want)
		}
		// The version, when the binary has one, comes last, as a map
		// would order it too.
		was["version"] = "v1.2-3-gabc1234"
		got = encode(Status{Name: c.name, Plan: c.plan.String(), Role: c.role, Version: "v1.2-3-gabc1234"})
		if want := encode(was); got != want {
			t.Errorf("node section with a version:\n%s\nwant:\n%s", got, want)
		}
	}
}
