package lb

import "net/netip"

// Family is the address family a backend is reached over, and the family
// of the client connections it may take.
type Family uint8

// Families. A single-stack pool's backends are FamilyAny: each member's
// first address takes every client, as before dual-stack existed; so does
// a member known by one address in a dual-stack pool.
const (
	FamilyAny Family = iota
	FamilyIPv4
	FamilyIPv6
)

// String is the family as /status and logs show it.
func (f Family) String() string {
	switch f {
	case FamilyIPv4:
		return "ipv4"
	case FamilyIPv6:
		return "ipv6"
	}
	return "any"
}

// familyOf is a's family; an IPv4-mapped IPv6 address (an IPv4 client of a
// dual-stack listener) is IPv4.
func familyOf(a netip.Addr) Family {
	if a.Is4() || a.Is4In6() {
		return FamilyIPv4
	}
	return FamilyIPv6
}

// serves says whether a backend of family b may take a client of family c:
// same family only, so an apiserver bound per family sees the family the
// client used, and an IPv6 VIP never leads to a member's IPv4 address when
// the member has an IPv6 one. FamilyAny on either side (a single-stack
// pool, a member known by one address, a client whose family is not known)
// matches everything.
func serves(b, c Family) bool {
	return b == FamilyAny || c == FamilyAny || b == c
}

// dualStack says whether VIPs of both families are configured: only then
// does a pool hold a backend per member and family.
func dualStack(vips []netip.Addr) bool {
	var v4, v6 bool
	for _, v := range vips {
		if familyOf(v) == FamilyIPv4 {
			v4 = true
		} else {
			v6 = true
		}
	}
	return v4 && v6
}

// vipFamily is the family of the clients a VIP brings: FamilyAny when
// single-stack, where every backend takes every client.
func (l *LB) vipFamily(v netip.Addr) Family {
	if !l.dual {
		return FamilyAny
	}
	return familyOf(v)
}
