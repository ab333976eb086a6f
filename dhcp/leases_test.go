package dhcp

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestStorePersistsAndReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "leases.json")
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			c := Change{Kind: ChangeBind, IP: netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}),
				MAC: net.HardwareAddr{2, 0, 0, 0, 0, byte(i)}, Expiry: exp}
			gen := s.Apply(c)
			if err := s.WaitDurable(ctx, gen); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// An offer is never persisted; a decline is.
	s.Apply(Change{Kind: ChangeOffer, IP: netip.MustParseAddr("10.0.1.1"), MAC: net.HardwareAddr{2, 0, 0, 0, 1, 1}, Expiry: exp})
	if err := s.WaitDurable(ctx, s.Apply(Change{Kind: ChangeDecline, IP: netip.MustParseAddr("10.0.1.2"), Expiry: exp})); err != nil {
		t.Fatal(err)
	}
	// Rebinding a MAC to another address frees the old one.
	s.WaitDurable(ctx, s.Apply(Change{Kind: ChangeBind, IP: netip.MustParseAddr("10.0.2.0"), MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0}, Expiry: exp}))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path+".tmp123", []byte("half"), 0o644) // a crash mid-write
	s2, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	ls := s2.Leases()
	if len(ls) != 51 {
		t.Fatalf("%d leases after reload, want 51: %+v", len(ls), ls)
	}
	if _, ok := s2.ByIP(netip.MustParseAddr("10.0.0.0")); ok {
		t.Error("old address of a rebound MAC kept")
	}
	if l, ok := s2.ByMAC(net.HardwareAddr{2, 0, 0, 0, 0, 7}); !ok || l.IP != netip.MustParseAddr("10.0.0.7") || !l.Expiry.Equal(exp) {
		t.Errorf("lease of 02:..:07 = %+v, %v", l, ok)
	}
	if l, ok := s2.ByIP(netip.MustParseAddr("10.0.1.2")); !ok || !l.Declined {
		t.Errorf("declined address lost: %+v", l)
	}
	if _, err := os.Stat(path + ".tmp123"); err == nil {
		t.Error("stale temp file kept")
	}
	if n := s2.Expire(exp.Add(time.Second)); n != 51 {
		t.Errorf("expired %d, want 51", n)
	}
}

func TestStoreRejectsCorruptFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.json")
	os.WriteFile(path, []byte("{not json"), 0o644)
	if _, err := OpenStore(path); err == nil {
		t.Fatal("corrupt lease file accepted")
	}
}
