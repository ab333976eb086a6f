package dhcp

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestGoldenReplies pins the bytes of the replies a reservation gets, so a
// change of options, their order or the header shows up in review.
func TestGoldenReplies(t *testing.T) {
	p, err := NewPolicy(testOptions())
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]*dhcpv4.DHCPv4{
		"offer": msg(dhcpv4.MessageTypeDiscover, macM0),
		"ack":   msg(dhcpv4.MessageTypeRequest, macM0, withSID(testServer), withWant(ipM0)),
		"nak":   msg(dhcpv4.MessageTypeRequest, macM0, withWant(netip.MustParseAddr("192.168.126.99"))),
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			d := p.Decide(Input{Request: req, Leases: memLeases{}, Now: t0})
			if d.Reply == nil {
				t.Fatalf("no reply: %q", d.Drop)
			}
			got := []byte(hex.Dump(d.Reply.ToBytes()))
			path := filepath.Join("testdata", name+".hex")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s reply changed:\n%s\nwant:\n%s\n%s", name, got, want, strings.TrimSpace(d.Reply.Summary()))
			}
		})
	}
}

// FuzzOpenStore: any lease file is loaded or refused with an error, never a
// panic, and what loads can be written and loaded again.
func FuzzOpenStore(f *testing.F) {
	f.Add([]byte(`{"version":1,"leases":[{"ip":"192.168.126.100","mac":"02:00:00:00:00:01","expiry":"2026-11-22T08:00:00Z"},{"ip":"192.168.126.101","expiry":"2026-11-22T08:00:00Z","declined":true}]}`))
	f.Add([]byte(`{"version":1,"leases":[{"ip":"::1"}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		leases, err := parseLeaseFile(b, "fuzz")
		if err != nil {
			return
		}
		s := &Store{byIP: map[netip.Addr]*Lease{}, byMAC: map[string]*Lease{}}
		for _, l := range leases {
			s.putLocked(l)
		}
		out, err := json.Marshal(leaseFile{Version: leaseFileVersion, Leases: s.Leases()})
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseLeaseFile(out, "rewritten")
		if err != nil {
			t.Fatalf("rewritten file refused: %v\n%s", err, out)
		}
		if len(again) != len(s.Leases()) {
			t.Fatalf("%d leases, %d after rewrite", len(s.Leases()), len(again))
		}
	})
}
