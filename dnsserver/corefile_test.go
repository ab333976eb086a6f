package dnsserver

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestCorefileGolden(t *testing.T) {
	for _, c := range []struct {
		golden string
		p      CorefileParams
	}{
		{"all-addresses", CorefileParams{Listen: ":53", Zone: "ocp4.example.com", Instance: 1, CacheTTL: 30, BufSize: 1232}},
		{"bind-v4-log", CorefileParams{Listen: "192.168.126.10:5353", Zone: "ocp4.example.com.", Instance: 7, CacheTTL: 30, QueryLog: true}},
		{"bind-v6-nocache", CorefileParams{Listen: "[fd00::10]:53", Zone: "lab.test", Instance: 2}},
	} {
		t.Run(c.golden, func(t *testing.T) {
			got, err := Corefile(c.p)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", c.golden+".Corefile")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Fatalf("Corefile differs from %s:\n%s", path, got)
			}
		})
	}
}

func TestCorefileErrors(t *testing.T) {
	for _, c := range []struct {
		p    CorefileParams
		want string
	}{
		{CorefileParams{Listen: "53", Zone: "a.b"}, "listen address"},
		{CorefileParams{Listen: "localhost:53", Zone: "a.b"}, "host must be an IP address"},
		{CorefileParams{Listen: "127.0.0.1:", Zone: "a.b"}, "no port"},
		{CorefileParams{Listen: ":53", Zone: "a.b {"}, "not a DNS name"},
	} {
		_, err := Corefile(c.p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Corefile(%+v) = %v, want an error with %q", c.p, err, c.want)
		}
	}
}
