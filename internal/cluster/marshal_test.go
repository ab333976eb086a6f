package cluster

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/marshal/*.out.yaml from Marshal")

// goldenInputs are the configs under testdata/marshal: between them they set
// every field of the model to something other than its default (see
// TestMarshalCoversTheModel), and X.out.yaml pins what Marshal writes for
// X.in.yaml.
func goldenInputs(t testing.TB) []string {
	ins, err := filepath.Glob(filepath.Join("testdata", "marshal", "*.in.yaml"))
	if err != nil || len(ins) < 5 {
		t.Fatalf("golden inputs: %d, %v", len(ins), err)
	}
	return ins
}

// checkMarshalRoundTrip holds for any model Parse or ParseInstallConfig
// gives: the written file reads back as the same model, less what the file
// leaves out, and writing that again changes no byte.
func checkMarshalRoundTrip(t *testing.T, cfg *Config) []byte {
	t.Helper()
	y, err := Marshal(cfg)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	back, err := Parse(y)
	if err != nil {
		t.Fatalf("the written file does not read back: %v\n%s", err, y)
	}
	want := *cfg
	want.Provision, want.Origin = nil, nil
	if !reflect.DeepEqual(back, &want) {
		t.Fatalf("read back differs:\n got %+v\nwant %+v\n%s", back, &want, y)
	}
	again, err := Marshal(back)
	if err != nil {
		t.Fatalf("marshal again: %v", err)
	}
	if !bytes.Equal(again, y) {
		t.Fatalf("not a fixed point:\nfirst:\n%s\nagain:\n%s", y, again)
	}
	return y
}

// TestMarshalGolden: nodes in the field hold these files (bootstrap writes
// them after a header), so a change of key order or of what is left out must
// be a decision. Run with -update to rewrite them, and read the diff.
func TestMarshalGolden(t *testing.T) {
	for _, in := range goldenInputs(t) {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			cfg, err := Load(in)
			if err != nil {
				t.Fatal(err)
			}
			y, err := Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			out := strings.TrimSuffix(in, ".in.yaml") + ".out.yaml"
			if *updateGolden {
				if err := os.WriteFile(out, y, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(y, want) {
				t.Errorf("Marshal output changed:\n got:\n%s\nwant (%s):\n%s", y, out, want)
			}
		})
	}
}

// TestMarshalCompatAuthPass: keepalived-openshift mode derives the password
// and Parse refuses one, so one put into the model by hand is not written.
func TestMarshalCompatAuthPass(t *testing.T) {
	cfg, err := Load(filepath.Join("testdata", "marshal", "keepalived-openshift.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.VRRP.AuthPass = "s3cret"
	got, err := Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("compat mode wrote a password:\n%s", got)
	}
	if _, err := Parse(got); err != nil {
		t.Errorf("does not read back: %v", err)
	}
}

func TestMarshalNil(t *testing.T) {
	if _, err := Marshal(nil); err == nil {
		t.Error("Marshal(nil) succeeded")
	}
}

// TestMarshalRoundTrip: every config under testdata that reads, appliance.yaml
// or install-config.yaml, is written back as the same model, and nothing the
// file leaves behind (provision, install-config secrets) reaches it.
func TestMarshalRoundTrip(t *testing.T) {
	inputs, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	inputs = append(inputs, goldenInputs(t)...)
	read := 0
	for _, in := range inputs {
		cfg, err := Load(in)
		if err != nil {
			continue // the folder may hold configs meant to fail
		}
		read++
		t.Run(in, func(t *testing.T) {
			y := checkMarshalRoundTrip(t, cfg)
			for _, secret := range []string{"pullSecret", "sshKey", "dXNlcjpwYXNz", "ssh-ed25519", "password", "provision", "credentials"} {
				if strings.Contains(string(y), secret) {
					t.Errorf("the written file holds %q:\n%s", secret, y)
				}
			}
		})
	}
	if read < 10 {
		t.Fatalf("only %d configs read", read)
	}
}

// TestMarshalCoversTheModel fails when the model gains a field Marshal does
// not write, or the schema a key it does not fill. The golden inputs between
// them set every model field away from its default (a new field must be set
// in one of them, which also shows it in a golden file); each round-trips,
// so each such value was written. And the documents Marshal builds from them
// fill every key of the schema but the ones it never writes.
func TestMarshalCoversTheModel(t *testing.T) {
	minimal, err := Load(filepath.Join("testdata", "marshal", "minimal.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string][]reflect.Value{}
	walkLeaves(reflect.ValueOf(*minimal), "", func(path string, v reflect.Value) {
		defaults[path] = append(defaults[path], v)
	})

	modelSet := map[string]bool{}
	rawSet := map[string]bool{}
	for _, in := range goldenInputs(t) {
		cfg, err := Load(in)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.Base(in), func(t *testing.T) { checkMarshalRoundTrip(t, cfg) })
		walkLeaves(reflect.ValueOf(*cfg), "", func(path string, v reflect.Value) {
			if !containsValue(defaults[path], v) {
				modelSet[path] = true
			}
		})
		walkLeaves(reflect.ValueOf(*toRaw(cfg)), "", func(path string, v reflect.Value) {
			if !v.IsZero() {
				rawSet[path] = true
			}
		})
	}

	notWritten := map[string]bool{"Provision": true, "Origin": true}
	walkLeaves(reflect.ValueOf(Config{}), "", func(path string, _ reflect.Value) {
		if !modelSet[path] && !notWritten[topField(path)] {
			t.Errorf("model field %s has its default in every testdata/marshal input: set it in one (and write it in toRaw), then run this package's tests with -update", path)
		}
	})
	// machineCIDR is the one-network spelling Parse also reads; Marshal
	// always writes the list.
	notFilled := map[string]bool{"Provision": true, "Network.MachineCIDR": true}
	walkLeaves(reflect.ValueOf(rawConfig{}), "", func(path string, _ reflect.Value) {
		if !rawSet[path] && !notFilled[path] && !notFilled[topField(path)] {
			t.Errorf("schema key %s is never filled by toRaw: Parse reads it, so Marshal must write it", path)
		}
	})
}

// walkLeaves calls leaf for every field below v, named by its Go path
// ("VRRP.AuthPass", "Nodes[].MAC"). It descends into this package's structs,
// through pointers and into every element of slices of them (a zero element
// when the slice is empty, so every path is seen); anything else is a leaf.
func walkLeaves(v reflect.Value, path string, leaf func(string, reflect.Value)) {
	t := v.Type()
	own := func(t reflect.Type) bool {
		return t.Kind() == reflect.Struct && t.PkgPath() == reflect.TypeFor[Config]().PkgPath()
	}
	switch {
	case own(t):
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				walkLeaves(v.Field(i), joinGo(path, f.Name), leaf)
			}
		}
	case t.Kind() == reflect.Pointer && own(t.Elem()):
		if v.IsNil() {
			v = reflect.New(t.Elem())
		}
		walkLeaves(v.Elem(), path, leaf)
	case t.Kind() == reflect.Slice && own(t.Elem()):
		if v.Len() == 0 {
			walkLeaves(reflect.New(t.Elem()).Elem(), path+"[]", leaf)
		}
		for i := range v.Len() {
			walkLeaves(v.Index(i), path+"[]", leaf)
		}
	default:
		leaf(path, v)
	}
}

func joinGo(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func topField(path string) string {
	top, _, _ := strings.Cut(path, ".")
	return strings.TrimSuffix(top, "[]")
}

func containsValue(vs []reflect.Value, v reflect.Value) bool {
	for _, x := range vs {
		if reflect.DeepEqual(x.Interface(), v.Interface()) {
			return true
		}
	}
	return false
}

// TestMarshalC0Controls: a tab or another C0 control in a free-text value is
// written as an escape and read back, so Parse keeps taking them.
func TestMarshalC0Controls(t *testing.T) {
	cfg, err := Parse([]byte("cluster: {name: a, baseDomain: b.c}\nnetwork: {machineCIDR: 10.0.0.0/24, apiVIPs: [10.0.0.5]}\n" +
		"vrrp: {version: 2, authPass: \"a\\tb\\x00\\x1f\"}\ndhcp: {leaseFile: \"/a\\nb\\rc\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	checkMarshalRoundTrip(t, cfg)
}
