package health

import "testing"

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Unknown: "unknown", Up: "up", Down: "down", State(7): "unknown"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", int(s), got, want)
		}
	}
	// The values are metric values (appliance_lb_backend_state).
	if Unknown != 0 || Up != 1 || Down != 2 {
		t.Errorf("state values moved: unknown %d up %d down %d, want 0 1 2", Unknown, Up, Down)
	}
}

func TestHysteresis(t *testing.T) {
	// results: o ok, x fail. want: the state after each result (u up,
	// d down), upper case where Observe reported a change.
	tests := []struct {
		name       string
		start      State
		rise, fall int
		results    string
		want       string
	}{
		// Starting Unknown (the LB): the first result decides.
		{"unknown: first ok decides up", Unknown, 3, 3, "o", "U"},
		{"unknown: first fail decides down", Unknown, 3, 3, "x", "D"},
		{"unknown: fall needs three in a row", Unknown, 3, 3, "oxxoxxx", "UuuuuuD"},
		{"unknown: rise needs three in a row", Unknown, 3, 3, "xoooo", "DddUu"},
		{"unknown: flap never re-added", Unknown, 3, 3, "oxxxoxoxoxoo", "UuuDdddddddd"},
		{"unknown: recovers after rise", Unknown, 3, 3, "oxxxooo", "UuuDddU"},

		// Starting Down (VRRP tracking): Rise successes before Up.
		{"down: rises after 2", Down, 2, 2, "ooo", "dUu"},
		{"down: one failure does not fall", Down, 2, 2, "ooxoxx", "dUuuuD"},
		{"down: interrupted rise starts over", Down, 3, 1, "ooxooo", "dddddU"},
		{"down: rise 1 fall 1 follows every outcome", Down, 1, 1, "oxxo", "UDdU"},
		{"down: failures while down change nothing", Down, 2, 3, "xxooxxx", "dddUuuD"},

		// Zero Rise and Fall count as 1.
		{"zero counts as one", Down, 0, 0, "oxo", "UDU"},
		{"zero value starts unknown", Unknown, 0, 0, "xo", "DU"},
	}
	code := map[State]byte{Up: 'u', Down: 'd', Unknown: '?'}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHysteresis(tt.rise, tt.fall, tt.start)
			if h.State() != tt.start {
				t.Fatalf("starts %v, want %v", h.State(), tt.start)
			}
			for i, r := range tt.results {
				changed := h.Observe(r == 'o')
				got := code[h.State()]
				if changed {
					got -= 'a' - 'A'
				}
				if got != tt.want[i] {
					t.Fatalf("after %q: %c, want %c (upper case: changed)", tt.results[:i+1], got, tt.want[i])
				}
			}
		})
	}
}

func TestHysteresisSettling(t *testing.T) {
	var h Hysteresis // zero value: Unknown, as the LB starts
	h.Rise, h.Fall = 3, 3
	steps := []struct {
		ok       bool
		settling bool
		why      string
	}{
		{true, false, "the first result settles Up"},
		{true, false, "an agreeing result keeps it settled"},
		{false, true, "a contrary result starts a streak"},
		{true, false, "an agreeing result ends the streak"},
		{false, true, "a new streak"},
		{false, true, "still short of Fall"},
		{false, false, "Fall reached: settled Down"},
	}
	if !h.Settling() {
		t.Fatal("Unknown must be settling")
	}
	for i, s := range steps {
		h.Observe(s.ok)
		if h.Settling() != s.settling {
			t.Fatalf("step %d (%s): Settling() = %v", i, s.why, h.Settling())
		}
	}
	if d := NewHysteresis(2, 2, Down); d.Settling() {
		t.Error("starting Down is settled until a success arrives")
	}
}
