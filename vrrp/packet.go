package vrrp

import (
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// ProtocolNumber is the IP protocol number of VRRP (both versions).
const ProtocolNumber = 112

// Multicast groups adverts are sent to in multicast (Config.Unicast off and
// no UnicastPeers); in unicast they are still joined, to see strangers.
var (
	MulticastGroupV4 = netip.MustParseAddr("224.0.0.18")
	MulticastGroupV6 = netip.MustParseAddr("ff02::12")
)

// Authentication types of VRRPv2 (RFC 3768 keeps the field; RFC 2338 defined
// the values). VRRPv3 has no authentication.
const (
	AuthTypeNone uint8 = 0 // no authentication
	AuthTypePass uint8 = 1 // simple text password, 8 bytes zero-padded
)

// Wire layout. Both versions share the first four bytes (version/type, VRID,
// priority, address count); byte 4..5 differ, 6..7 hold the checksum.
const (
	advertType     = 1 // the only VRRP message type
	vrrpHeaderLen  = 8
	v2AuthLen      = 8
	v3IntervalMask = 0x0fff // 12-bit Max Adver Int; top 4 bits reserved
	centisecond    = 10 * time.Millisecond
)

// DropReason says why a received advert was discarded. Values are short,
// stable strings so they can be used as metric labels.
type DropReason string

// Drop reasons. The codec returns the first group from Parse; the others are
// decided by the receive path (TTL, peers, VRID, auth, interval) but are
// defined here so all reasons live in one list.
const (
	ReasonShort     DropReason = "short"      // fewer bytes than a VRRP header
	ReasonVersion   DropReason = "version"    // version is neither 2 nor 3, or not the configured one
	ReasonType      DropReason = "type"       // type is not ADVERTISEMENT
	ReasonChecksum  DropReason = "checksum"   // checksum does not verify
	ReasonLength    DropReason = "length"     // length does not match the address count
	ReasonAddrCount DropReason = "addr_count" // address count is zero
	ReasonFamily    DropReason = "family"     // src/dst families differ, or VRRPv2 over IPv6
	ReasonInterval  DropReason = "interval"   // zero interval, or (v2) not the configured one

	ReasonAuth        DropReason = "auth"         // v2 authentication mismatch
	ReasonTTL         DropReason = "ttl"          // TTL / hop limit is not 255
	ReasonVRID        DropReason = "vrid"         // advert for another virtual router
	ReasonUnknownPeer DropReason = "unknown_peer" // unicast: an advert on our VRID from no peer
)

// DropReasons lists every reason defined by the codec, so a metric can be
// initialised for all of them before the first drop.
func DropReasons() []DropReason {
	return []DropReason{ReasonShort, ReasonVersion, ReasonType, ReasonChecksum, ReasonLength,
		ReasonAddrCount, ReasonFamily, ReasonInterval, ReasonAuth, ReasonTTL, ReasonVRID,
		ReasonUnknownPeer}
}

// ParseError is a rejected advert: Reason for counting, Err for the detail.
// Callers match it with errors.As.
type ParseError struct {
	Reason DropReason
	Err    error
}

func (e *ParseError) Error() string {
	if e.Err == nil {
		return "vrrp: drop: " + string(e.Reason)
	}
	return "vrrp: drop: " + string(e.Reason) + ": " + e.Err.Error()
}

// Unwrap returns the detail error.
func (e *ParseError) Unwrap() error { return e.Err }

func dropErr(r DropReason, format string, args ...any) error {
	return &ParseError{Reason: r, Err: fmt.Errorf(format, args...)}
}

// Packet is one VRRP advertisement, version 2 or 3.
type Packet struct {
	Version  uint8         // 2 or 3
	VRID     uint8         // virtual router ID, 1..255 in practice (0 is not checked here)
	Priority uint8         // 0 = master is leaving, 255 = address owner
	Interval time.Duration // v2: whole seconds 1..255; v3: 10 ms steps, 10 ms..40.95 s
	AuthType uint8         // v2 only: AuthTypeNone or AuthTypePass; zero for v3
	AuthData [8]byte       // v2 only; zero for v3
	Addrs    []netip.Addr  // virtual addresses, all of the family of the IP header
}

// PassAuth returns the 8-byte v2 authentication data for a simple password:
// truncated to 8 bytes and zero-padded, as keepalived does.
func PassAuth(s string) [8]byte {
	var b [8]byte
	copy(b[:], s)
	return b
}

// CheckAuth reports whether a v2 advert carries the expected authentication.
// Type None accepts any data (RFC 3768 says to ignore it); PASS compares the
// 8 bytes; any other type (IP AH, long obsolete) is refused. VRRPv3 has no
// authentication, so v3 adverts always pass.
func CheckAuth(p Packet, wantType uint8, want [8]byte) bool {
	if p.Version != 2 {
		return true
	}
	if p.AuthType != wantType {
		return false
	}
	switch wantType {
	case AuthTypeNone:
		return true
	case AuthTypePass:
		return subtle.ConstantTimeCompare(p.AuthData[:], want[:]) == 1
	default:
		return false
	}
}

// Marshal encodes p for sending from src to dst (the IP header's addresses),
// computing the checksum: v3 over the IPv4/IPv6 pseudo-header plus the
// packet (RFC 5798 5.2.8), v2 over the packet alone (RFC 3768 5.3.8).
func (p *Packet) Marshal(src, dst netip.Addr) ([]byte, error) {
	return p.AppendMarshal(make([]byte, 0, p.wireLen(src.Unmap().Is6())), src, dst)
}

func (p *Packet) wireLen(v6 bool) int {
	alen := 4
	if v6 {
		alen = 16
	}
	n := vrrpHeaderLen + alen*len(p.Addrs)
	if p.Version == 2 {
		n += v2AuthLen
	}
	return n
}

// AppendMarshal appends the encoded packet to b and returns the extended
// slice; it does not allocate when b has room. See Marshal.
func (p *Packet) AppendMarshal(b []byte, src, dst netip.Addr) ([]byte, error) {
	src, dst = src.Unmap(), dst.Unmap()
	if !src.IsValid() || !dst.IsValid() {
		return b, errors.New("vrrp: marshal: source and destination addresses are required")
	}
	v6 := src.Is6()
	if dst.Is6() != v6 {
		return b, fmt.Errorf("vrrp: marshal: source %s and destination %s are of different families", src, dst)
	}
	var intervalField uint16
	switch p.Version {
	case 2:
		if v6 {
			return b, errors.New("vrrp: marshal: VRRPv2 is IPv4 only; use version 3 for IPv6")
		}
		if p.Interval%time.Second != 0 || p.Interval < time.Second || p.Interval > 255*time.Second {
			return b, fmt.Errorf("vrrp: marshal: interval %v: VRRPv2 needs whole seconds from 1s to 255s", p.Interval)
		}
		intervalField = uint16(p.Interval / time.Second)
	case 3:
		if p.Interval%centisecond != 0 || p.Interval < centisecond || p.Interval > v3IntervalMask*centisecond {
			return b, fmt.Errorf("vrrp: marshal: interval %v: VRRPv3 needs a multiple of 10ms from 10ms to 40.95s", p.Interval)
		}
		intervalField = uint16(p.Interval / centisecond)
	default:
		return b, fmt.Errorf("vrrp: marshal: version %d: want 2 or 3", p.Version)
	}
	if len(p.Addrs) == 0 {
		return b, errors.New("vrrp: marshal: no addresses: an advert lists at least one virtual address")
	}
	if len(p.Addrs) > 255 {
		return b, fmt.Errorf("vrrp: marshal: %d addresses: at most 255 fit in an advert", len(p.Addrs))
	}
	for _, a := range p.Addrs {
		a = a.Unmap()
		if !a.IsValid() || a.Is6() != v6 {
			return b, fmt.Errorf("vrrp: marshal: address %v is not of the family of source %s", a, src)
		}
	}

	start := len(b)
	b = append(b, p.Version<<4|advertType, p.VRID, p.Priority, uint8(len(p.Addrs)))
	if p.Version == 2 {
		b = append(b, p.AuthType, uint8(intervalField))
	} else {
		b = binary.BigEndian.AppendUint16(b, intervalField)
	}
	b = append(b, 0, 0) // checksum, filled below
	for _, a := range p.Addrs {
		a = a.Unmap()
		if v6 {
			s := a.As16()
			b = append(b, s[:]...)
		} else {
			s := a.As4()
			b = append(b, s[:]...)
		}
	}
	if p.Version == 2 {
		b = append(b, p.AuthData[:]...)
	}
	pkt := b[start:]
	var sum uint32
	if p.Version == 3 {
		sum = pseudoHeaderSum(src, dst, len(pkt))
	}
	binary.BigEndian.PutUint16(pkt[6:8], foldChecksum(onesSum(sum, pkt)))
	return b, nil
}

// Parse decodes a VRRP advert. b is the IP payload; src and dst are the IP
// header's addresses, which give the address family and feed the v3
// pseudo-header. It checks version, type, length against the address count,
// a non-zero interval and the checksum. Errors are *ParseError.
//
// TTL, VRID, authentication and interval agreement are left to the caller,
// which knows the configuration.
func Parse(b []byte, src, dst netip.Addr) (Packet, error) {
	src, dst = src.Unmap(), dst.Unmap()
	if len(b) < vrrpHeaderLen {
		return Packet{}, dropErr(ReasonShort, "%d bytes, want at least %d", len(b), vrrpHeaderLen)
	}
	p := Packet{Version: b[0] >> 4, VRID: b[1], Priority: b[2]}
	if p.Version != 2 && p.Version != 3 {
		return Packet{}, dropErr(ReasonVersion, "version %d", p.Version)
	}
	if t := b[0] & 0x0f; t != advertType {
		return Packet{}, dropErr(ReasonType, "type %d, want %d (advertisement)", t, advertType)
	}
	if !src.IsValid() || !dst.IsValid() || src.Is6() != dst.Is6() {
		return Packet{}, dropErr(ReasonFamily, "source %v and destination %v", src, dst)
	}
	v6 := src.Is6()
	if v6 && p.Version == 2 {
		return Packet{}, dropErr(ReasonFamily, "VRRPv2 over IPv6 from %s", src)
	}
	count := int(b[3])
	if count == 0 {
		return Packet{}, dropErr(ReasonAddrCount, "address count 0")
	}
	alen := 4
	if v6 {
		alen = 16
	}
	want := vrrpHeaderLen + alen*count
	if p.Version == 2 {
		want += v2AuthLen
	}
	if len(b) != want {
		return Packet{}, dropErr(ReasonLength, "%d bytes for %d addresses, want %d", len(b), count, want)
	}
	var sum uint32
	if p.Version == 3 {
		sum = pseudoHeaderSum(src, dst, len(b))
	}
	if c := foldChecksum(onesSum(sum, b)); c != 0 {
		return Packet{}, dropErr(ReasonChecksum, "0x%04x does not verify", binary.BigEndian.Uint16(b[6:8]))
	}
	if p.Version == 2 {
		p.AuthType = b[4]
		p.Interval = time.Duration(b[5]) * time.Second
		copy(p.AuthData[:], b[len(b)-v2AuthLen:])
	} else {
		p.Interval = time.Duration(binary.BigEndian.Uint16(b[4:6])&v3IntervalMask) * centisecond
	}
	if p.Interval == 0 {
		return Packet{}, dropErr(ReasonInterval, "advert interval 0")
	}
	p.Addrs = make([]netip.Addr, count)
	for i := range count {
		off := vrrpHeaderLen + i*alen
		if v6 {
			p.Addrs[i] = netip.AddrFrom16([16]byte(b[off : off+16]))
		} else {
			p.Addrs[i] = netip.AddrFrom4([4]byte(b[off : off+4]))
		}
	}
	return p, nil
}

// pseudoHeaderSum is the unfolded one's-complement sum of the IPv4 or IPv6
// pseudo-header for protocol 112 and an upper-layer length of n bytes.
func pseudoHeaderSum(src, dst netip.Addr, n int) uint32 {
	var sum uint32
	if src.Is4() {
		s, d := src.As4(), dst.As4()
		sum = onesSum(sum, s[:])
		sum = onesSum(sum, d[:])
	} else {
		s, d := src.As16(), dst.As16()
		sum = onesSum(sum, s[:])
		sum = onesSum(sum, d[:])
		sum += uint32(n) >> 16 // IPv6 length is 32 bits; adverts never need the top half
	}
	return sum + uint32(uint16(n)) + ProtocolNumber
}

// onesSum adds b as big-endian 16-bit words to sum, padding an odd tail.
func onesSum(sum uint32, b []byte) uint32 {
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	return sum
}

// foldChecksum folds carries and complements: the value to put in the
// checksum field, or zero when verifying a packet whose checksum is right.
func foldChecksum(sum uint32) uint16 {
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
