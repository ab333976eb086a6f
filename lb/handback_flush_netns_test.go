package lb

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestNetnsHandbackAfterNftFlush: `nft flush ruleset` on a node that has
// just taken the API VIP from a live one (nftables.service starting, an
// operator's script) removes its handback table with its redirect. The
// redirect comes back at the flush's nftables event; the handback must
// too, at that event, or every packet of a connection the old holder
// still serves is reset until the next periodic check (5 s).
//
// The soak found it: four watch-like streams handed back to the bootstrap
// after the teardown were reset by an nft flush on the new holder.
func TestNetnsHandbackAfterNftFlush(t *testing.T) {
	p := newPreemptLab(t, "lbhbf", 0)
	kc, n1 := p.kc, p.n1
	p.preempt(t)
	for range 5 {
		if got := kc.peer(); !strings.HasPrefix(got, "master ") {
			t.Fatalf("kept connection after the move, before the flush: %q", got)
		}
	}

	// Between the flush and the nftables event that restores the tables
	// (tens of ms) a packet of the kept connection would be reset: no
	// rule can cover that window. What matters is that the window is that
	// event's delay, not the periodic check's 5 s; the client stays quiet
	// through it, its delayed ACKs (up to 40 ms) sent before.
	time.Sleep(200 * time.Millisecond)
	// The table comes back whole: the rule passing packets back with TTL
	// 1 and the one dropping what was passed back, not only a dup.
	before := counterRE.ReplaceAllString(p.handback(), "counter")
	if !strings.Contains(before, "dup to "+p.n0.IPv4.Addr().String()) || !strings.Contains(before, "ip ttl set 1") || !strings.Contains(before, "ip ttl <= 1") {
		t.Fatalf("n1's handback table before the flush:\n%s", before)
	}
	if _, err := n1.Run(context.Background(), "nft", "flush", "ruleset"); err != nil {
		t.Fatal(err)
	}
	flushed := time.Now()
	for counterRE.ReplaceAllString(p.handback(), "counter") != before {
		if time.Since(flushed) > time.Second {
			t.Fatalf("n1's handback table not back 1 s after nft flush ruleset (the periodic check comes within 5 s):\n%s\nwas:\n%s", p.handback(), before)
		}
		time.Sleep(5 * time.Millisecond)
	}
	back := time.Since(flushed)
	answered := 0
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		if got := kc.peer(); !strings.HasPrefix(got, "master ") {
			t.Fatalf("kept connection after the handback table came back: %q (%d answered before)", got, answered)
		}
		answered++
	}
	t.Logf("handback table back %s after the flush; the kept connection answered %d requests after it", back.Round(time.Millisecond), answered)
}
