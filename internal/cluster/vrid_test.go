package cluster

import "testing"

// Worked example, Fletcher8("ocp4-api"); a and b are the two running sums
// mod 15, and the result is b<<4 | a:
//
//	'o' 111: a = (0+111)%15  = 6    b = (0+6)%15   = 6
//	'c'  99: a = (6+99)%15   = 0    b = (6+0)%15   = 6
//	'p' 112: a = (0+112)%15  = 7    b = (6+7)%15   = 13
//	'4'  52: a = (7+52)%15   = 14   b = (13+14)%15 = 12
//	'-'  45: a = (14+45)%15  = 14   b = (12+14)%15 = 11
//	'a'  97: a = (14+97)%15  = 6    b = (11+6)%15  = 2
//	'p' 112: a = (6+112)%15  = 13   b = (2+13)%15  = 0
//	'i' 105: a = (13+105)%15 = 13   b = (0+13)%15  = 13
//
// 0xDD = 221, so cluster "ocp4" has API VRID 222. Continuing from "ocp4-"
// (a=14, b=11) through "ingress" gives a=12, b=3: 0x3C = 60, ingress VRID 61.
func TestFletcher8(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint8
	}{
		{"", 0x00},
		{"a", 0x77},  // 97%15 = 7 in both sums
		{"ab", 0x70}, // a = (7+98)%15 = 0, b = (7+0)%15 = 7
		{"ocp4-api", 0xdd},
		{"ocp4-ingress", 0x3c},
		{"test-api", 0x0c},
		{"test-ingress", 0x1b},
		// uint8 wrap: a=14 after 0x0e, then 14+250 wraps to 8 before the
		// modulo (without the wrap it would be 264%15 = 9 and 0x89).
		{"\x0e\xfa", 0x78},
	} {
		if got := Fletcher8(tc.in); got != tc.want {
			t.Errorf("Fletcher8(%q) = %#02x, want %#02x", tc.in, got, tc.want)
		}
	}
}

func TestDeriveVRIDs(t *testing.T) {
	for _, tc := range []struct {
		name         string
		api, ingress uint8
	}{
		{"ocp4", 222, 61},
		{"test", 13, 28},
		{"ostest", 14, 93},
		{"sno", 6, 53},
		{"mycluster", 74, 137},
		{"cluster1", 169, 168},
		{"", 95, 238},
	} {
		api, ingress := DeriveVRIDs(tc.name)
		if api != tc.api || ingress != tc.ingress {
			t.Errorf("DeriveVRIDs(%q) = %d, %d; want %d, %d", tc.name, api, ingress, tc.api, tc.ingress)
		}
	}
}

// TestDeriveVRIDsRange covers every two-byte name, which reaches every state
// of the two sums: the IDs stay in 1..239 and, as it happens, "-api" and
// "-ingress" never land on the same checksum, so the collision bump is kept
// for parity only.
func TestDeriveVRIDsRange(t *testing.T) {
	for i := range 1 << 16 {
		name := string([]byte{byte(i >> 8), byte(i)})
		api, ingress := DeriveVRIDs(name)
		if api < 1 || api > 239 || ingress < 1 || ingress > 239 {
			t.Fatalf("DeriveVRIDs(%q) = %d, %d: out of 1..239", name, api, ingress)
		}
		if Fletcher8(name+"-api") == Fletcher8(name+"-ingress") {
			t.Fatalf("DeriveVRIDs(%q): collision", name)
		}
	}
}
