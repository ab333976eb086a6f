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
// too, or every packet of a connection the old holder still serves is
// reset until the next periodic check (5 s).
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

	if _, err := n1.Run(context.Background(), "nft", "flush", "ruleset"); err != nil {
		t.Fatal(err)
	}
	flushed := time.Now()
	answered := 0
	for time.Since(flushed) < 2*time.Second {
		time.Sleep(20 * time.Millisecond)
		got := kc.peer()
		if !strings.HasPrefix(got, "master ") {
			t.Fatalf("kept connection %s after nft flush ruleset on the new holder: %q (%d answered before); its handback table: %q",
				time.Since(flushed).Round(time.Millisecond), got, answered, p.handback())
		}
		answered++
	}
	t.Logf("kept connection: %d requests answered in the 2 s after the flush", answered)
}
