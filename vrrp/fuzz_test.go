package vrrp

import (
	"encoding/binary"
	"net/netip"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// fuzzAddrs picks the IP header addresses for FuzzParse: IPv4 or IPv6,
// multicast or unicast destination.
func fuzzAddrs(v6, unicast bool) (src, dst netip.Addr) {
	switch {
	case v6 && unicast:
		return netip.MustParseAddr("fe80::2"), netip.MustParseAddr("fe80::3")
	case v6:
		return netip.MustParseAddr("fe80::2"), MulticastGroupV6
	case unicast:
		return netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	}
	return netip.MustParseAddr("192.0.2.1"), MulticastGroupV4
}

// FuzzParse: no input panics; whatever parses re-encodes to an advert of the
// same length that parses to the same Packet. With fixSum the checksum is
// corrected first so the fuzzer reaches the checks behind it.
func FuzzParse(f *testing.F) {
	for _, g := range goldenPackets {
		f.Add(g.wire, g.src.Is6(), !g.dst.IsMulticast(), false)
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "keepalived-*.hex"))
	for _, name := range files {
		caps, err := loadCaptured(filepath.Base(name))
		if err != nil {
			f.Fatal(err)
		}
		for _, c := range caps {
			f.Add(c.payload, c.src.Is6(), false, false)
		}
	}
	f.Add([]byte{0x31, 1, 100, 1, 0, 100, 0, 0, 10, 0, 0, 1}, false, false, true)
	f.Add([]byte{0x21, 1, 100, 1, 1, 1, 0, 0, 10, 0, 0, 1, 'p', 'w'}, false, true, true)
	f.Add([]byte{}, true, false, false)

	f.Fuzz(func(t *testing.T, b []byte, v6, unicast, fixSum bool) {
		src, dst := fuzzAddrs(v6, unicast)
		if fixSum && len(b) >= vrrpHeaderLen {
			b[6], b[7] = 0, 0
			var sum uint32
			if b[0]>>4 == 3 {
				sum = pseudoHeaderSum(src, dst, len(b))
			}
			binary.BigEndian.PutUint16(b[6:8], foldChecksum(onesSum(sum, b)))
		}
		p, err := Parse(b, src, dst)
		if err != nil {
			if _, ok := err.(*ParseError); !ok {
				t.Fatalf("Parse error %T %v is not a *ParseError", err, err)
			}
			return
		}
		again, err := p.Marshal(src, dst)
		if err != nil {
			t.Fatalf("parsed %+v but cannot marshal it: %v", p, err)
		}
		if len(again) != len(b) {
			t.Fatalf("re-marshal is %d bytes, input %d", len(again), len(b))
		}
		back, err := Parse(again, src, dst)
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if !reflect.DeepEqual(back, p) {
			t.Fatalf("round trip changed the packet:\n%+v\n%+v", p, back)
		}
	})
}

// FuzzMachine drives one machine with random events and checks that VIPs are
// never taken twice or released when not held, that the state is always
// valid and matches VIP ownership, that state changes are announced exactly
// when they happen, and that a running machine always has a future deadline
// after Tick.
func FuzzMachine(f *testing.F) {
	f.Add(uint8(3), uint8(100), uint8(10), true, uint8(0), []byte{0, 0, 0, 3, 0, 0, 4, 200, 2, 3, 0, 0})
	f.Add(uint8(2), uint8(255), uint8(1), false, uint8(0), []byte{0, 0, 0, 4, 255, 2, 2, 100, 0, 6, 0, 0, 7, 0, 0})
	f.Add(uint8(3), uint8(1), uint8(0), true, uint8(3), []byte{0, 0, 0, 4, 0, 1, 3, 0, 0, 5, 254, 0, 3, 0, 0, 1, 0, 0})
	peers := []netip.Addr{fsmLow, fsmSelf, fsmHigh}

	f.Fuzz(func(t *testing.T, version, prio, interval uint8, preempt bool, delay uint8, ops []byte) {
		cfg := MachineConfig{
			Version:      2 + version%2,
			Priority:     prio,
			Interval:     time.Duration(int(interval)%50+1) * 10 * time.Millisecond,
			Preempt:      preempt,
			PreemptDelay: time.Duration(delay) * 100 * time.Millisecond,
			Self:         fsmSelf,
		}
		if cfg.Version == 2 {
			cfg.Interval = time.Duration(int(interval)%3+1) * time.Second
		}
		m := NewMachine(cfg)
		owner := m.Priority() == OwnerPriority
		now := fsmT0
		holding := false
		for len(ops) >= 3 {
			op, a, b := ops[0], ops[1], ops[2]
			ops = ops[3:]
			now = now.Add(time.Duration(b%16) * 7 * time.Millisecond)
			before := m.State()
			var acts []Action
			ticked := false
			switch op % 9 {
			case 0:
				acts = m.Start(now)
			case 1:
				acts = m.Stop(now)
			case 2:
				acts, ticked = m.Tick(now), true
			case 3:
				if d := m.Deadline(); d.After(now) {
					now = d
				}
				acts, ticked = m.Tick(now), true
			case 4, 5:
				iv := time.Duration(b%8) * 50 * time.Millisecond // 0 is a bogus interval the machine must survive
				p := Packet{Version: cfg.Version, VRID: 1, Priority: a, Interval: iv,
					Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.100")}}
				acts = m.Receive(now, p, peers[int(b/8)%len(peers)])
			case 6:
				acts = m.SetPriority(now, a)
			case 7:
				acts = m.SetFault(now, true)
			case 8:
				acts = m.SetFault(now, false)
			}
			after := m.State()
			if after > StateFault {
				t.Fatalf("invalid state %d", after)
			}
			changes := 0
			for i, act := range acts {
				switch act := act.(type) {
				case ActTakeVIPs:
					if holding {
						t.Fatalf("TakeVIPs twice without release: %v", acts)
					}
					holding = true
				case ActReleaseVIPs:
					if !holding {
						t.Fatalf("ReleaseVIPs without TakeVIPs: %v", acts)
					}
					holding = false
				case ActStateChange:
					changes++
					if i != 0 || act.From != before || act.To != after || act.From == act.To || act.Reason == "" {
						t.Fatalf("bad state change %+v for %v -> %v in %v", act, before, after, acts)
					}
				case ActSendAdvert:
					if act.Priority == 0 && after == StateMaster {
						t.Fatalf("master sent priority 0: %v", acts)
					}
				case ActAnnounce:
					if after != StateMaster {
						t.Fatalf("announce outside MASTER: %v", acts)
					}
				case ActPredecessor:
					if before != StateMaster || after != StateMaster || !act.Addr.IsValid() {
						t.Fatalf("predecessor %v learned in %v -> %v: %v", act.Addr, before, after, acts)
					}
				default:
					t.Fatalf("unknown action %T", act)
				}
			}
			if (before != after) != (changes == 1) || changes > 1 {
				t.Fatalf("%v -> %v with %d state change actions: %v", before, after, changes, acts)
			}
			if holding != (after == StateMaster) {
				t.Fatalf("holding VIPs %v in state %v", holding, after)
			}
			running := after == StateMaster || after == StateBackup
			if m.Deadline().IsZero() == running {
				t.Fatalf("state %v with deadline %v", after, m.Deadline())
			}
			if ticked && running && !m.Deadline().After(now) {
				t.Fatalf("after Tick(%v) the deadline %v is not in the future", now.Sub(fsmT0), m.Deadline().Sub(fsmT0))
			}
			if p := m.Priority(); p == 0 || (owner && p != OwnerPriority) || (!owner && p == OwnerPriority) {
				t.Fatalf("priority %d (owner %v)", p, owner)
			}
			if after == StateMaster && m.MasterAddr() != fsmSelf {
				t.Fatalf("master reports master address %v", m.MasterAddr())
			}
		}
	})
}
