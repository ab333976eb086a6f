package dnsserver

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMmsgFrom reads the sockaddrs recvmmsg fills in, as the kernel lays
// them out.
func TestMmsgFrom(t *testing.T) {
	sa4 := func(a string, port uint16) []byte {
		b := make([]byte, unix.SizeofSockaddrInet4)
		binary.NativeEndian.PutUint16(b, unix.AF_INET)
		binary.BigEndian.PutUint16(b[2:], port)
		ip := netip.MustParseAddr(a).As4()
		copy(b[4:], ip[:])
		return b
	}
	sa6 := func(a string, port uint16, scope uint32) []byte {
		b := make([]byte, unix.SizeofSockaddrInet6)
		binary.NativeEndian.PutUint16(b, unix.AF_INET6)
		binary.BigEndian.PutUint16(b[2:], port)
		ip := netip.MustParseAddr(a).As16()
		copy(b[8:], ip[:])
		binary.NativeEndian.PutUint32(b[24:], scope)
		return b
	}
	for _, tc := range []struct {
		name string
		sa   []byte
		want string // "" when refused
	}{
		{"IPv4", sa4("192.0.2.7", 40000), "192.0.2.7:40000"},
		{"IPv6", sa6("2001:db8::7", 53, 0), "[2001:db8::7]:53"},
		{"IPv4 on a dual-stack socket", sa6("::ffff:192.0.2.7", 1234, 0), "[::ffff:192.0.2.7]:1234"},
		{"link-local IPv6 keeps its interface", sa6("fe80::1", 5353, 3), "[fe80::1%3]:5353"},
		{"truncated IPv4", sa4("192.0.2.7", 1)[:8], ""},
		{"truncated IPv6", sa6("2001:db8::7", 1, 0)[:20], ""},
		{"another family", []byte{1, 0, 0, 0}, ""},
		{"empty", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newMmsgBatch(nil, 1, 16, 0)
			copy(b.names[0][:], tc.sa)
			b.hdrs[0].hdr.Namelen = uint32(len(tc.sa))
			got, ok := b.from(0)
			switch {
			case tc.want == "" && ok:
				t.Fatalf("accepted %v", got)
			case tc.want != "" && (!ok || got.String() != tc.want):
				t.Fatalf("got %v %v, want %s", got, ok, tc.want)
			}
		})
	}
}
