package lb

import (
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNetnsPreemptedHolderEndsItsSessions moves the API VIP away from a
// node whose LB lives on (preempted, as when its own apiserver fails
// /readyz and a peer takes over) while a client keeps a connection open
// through it, as a watch does. The new holder passes that connection's
// packets back for the handback window only; the old holder must end it
// cleanly (EOF) within that window, never leave it to the new holder's
// reset once the window is over.
//
// The soak found it: three watch-like streams through the API VIP were
// reset 12 s (DrainTimeout + 2 s) after their holder's apiserver went
// unready and the VIP moved away.
func TestNetnsPreemptedHolderEndsItsSessions(t *testing.T) {
	const drain = 3 * time.Second
	p := newPreemptLab(t, "lbpre", drain)
	kc := p.kc
	p.preempt(t)
	moved := time.Now()

	// A request every 100 ms on the kept connection until it ends, or
	// until well past the handback window (DrainTimeout + 2 s).
	answered := 0
	var end string
	var endErr error
	for time.Since(moved) < handbackWindow(drain)+4*time.Second {
		time.Sleep(100 * time.Millisecond)
		got := kc.peer()
		if strings.HasPrefix(got, "master ") {
			answered++
			continue
		}
		end = got
		// peer() flattens the error: ask the socket how it ended.
		_ = kc.c.SetReadDeadline(time.Now().Add(time.Second))
		_, endErr = kc.c.Read(make([]byte, 1))
		break
	}
	after := time.Since(moved)
	t.Logf("kept connection: %d requests answered after the move; ended %s after it: %q (then read: %v)", answered, after.Round(time.Millisecond), end, endErr)
	switch {
	case end == "":
		t.Fatalf("the kept connection was still served %s after the move: n0 kept a session only the handback reaches", after.Round(time.Millisecond))
	case strings.Contains(end, "reset") || errors.Is(endErr, syscall.ECONNRESET):
		t.Errorf("the kept connection was reset %s after the move (%q); want a clean end (EOF) from n0 before the handback window (%s) ends",
			after.Round(time.Millisecond), end, handbackWindow(drain))
	case !strings.Contains(end, "EOF") && !errors.Is(endErr, io.EOF):
		t.Errorf("the kept connection ended %s after the move with %q (then read: %v); want a clean end (EOF)", after.Round(time.Millisecond), end, endErr)
	}
	if answered < 5 {
		t.Errorf("only %d requests answered on the kept connection after the move; the handback should carry it until n0 ends it", answered)
	}
	if after < drain/2 {
		t.Errorf("the kept connection ended %s after the move; n0 should serve it for about DrainTimeout (%s) first", after.Round(time.Millisecond), drain)
	}
}
