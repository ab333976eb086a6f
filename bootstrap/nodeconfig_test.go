package bootstrap

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"appliance/internal/cluster"
)

// TestNodeConfig pins the node's appliance.yaml byte for byte: the header,
// then what cluster.Marshal writes, which internal/cluster's goldens hold
// (nodes in the field have these files; that package owns the schema, the
// round trip and the goldens' -update).
func TestNodeConfig(t *testing.T) {
	ins, _ := filepath.Glob("../internal/cluster/testdata/marshal/*.in.yaml")
	if len(ins) < 5 {
		t.Fatalf("only %d golden inputs", len(ins))
	}
	for _, in := range ins {
		t.Run(strings.TrimSuffix(filepath.Base(in), ".in.yaml"), func(t *testing.T) {
			cfg, err := cluster.Load(in)
			if err != nil {
				t.Fatal(err)
			}
			y, err := NodeConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			body, ok := bytes.CutPrefix(y, []byte(nodeConfigHeader))
			if !ok {
				t.Fatalf("no header:\n%s", y)
			}
			want, err := os.ReadFile(strings.TrimSuffix(in, ".in.yaml") + ".out.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(body, want) {
				t.Errorf("the node's appliance.yaml changed:\n got:\n%s\nwant:\n%s", body, want)
			}
			// The header is a comment: the node reads the same model.
			if _, err := cluster.Parse(y); err != nil {
				t.Errorf("the node cannot read its config: %v", err)
			}
		})
	}
	if _, err := NodeConfig(nil); err == nil {
		t.Error("NodeConfig(nil) succeeded")
	}
}
