package health

// State is a checked target's health as decided by a Hysteresis. The values
// are exported as metric values (the LB's backend state gauge), so they must
// not be reordered.
type State int

// Health states.
const (
	Unknown State = iota // no result taken yet
	Up
	Down
)

// String names the state for logs and /status.
func (s State) String() string {
	switch s {
	case Up:
		return "up"
	case Down:
		return "down"
	}
	return "unknown"
}

// Hysteresis turns probe outcomes into a State that only flips after Rise
// consecutive successes or Fall consecutive failures, so one lost probe does
// not move a VIP or drop a backend. Rise and Fall below 1 count as 1.
//
// Where it starts decides how eager it is. From Unknown (the zero value) the
// first outcome decides Up or Down at once: a starting load balancer must
// not wait Rise probes before it forwards. From Down it needs Rise successes
// like any recovery: a VRRP node must not claim more priority, or leave
// FAULT, before its checks have shown it can serve.
//
// A Hysteresis is not safe for concurrent use.
type Hysteresis struct {
	Rise, Fall int

	state  State
	streak int // consecutive outcomes contrary to state
}

// NewHysteresis returns a Hysteresis in state start.
func NewHysteresis(rise, fall int, start State) Hysteresis {
	return Hysteresis{Rise: rise, Fall: fall, state: start}
}

// State is the current decision.
func (h *Hysteresis) State() State { return h.state }

// Settling reports whether a decision is pending: no result has been taken
// yet, or the latest outcomes disagree with the state. A caller probing on
// a timer probes faster meanwhile so that Rise or Fall is reached soon.
func (h *Hysteresis) Settling() bool { return h.state == Unknown || h.streak > 0 }

// Observe records one outcome and reports whether the state changed.
func (h *Hysteresis) Observe(ok bool) (changed bool) {
	to := Down
	if ok {
		to = Up
	}
	switch {
	case h.state == Unknown:
		h.state, h.streak = to, 0
		return true
	case h.state == to:
		h.streak = 0
		return false
	}
	h.streak++
	need := h.Fall
	if ok {
		need = h.Rise
	}
	if h.streak < max(need, 1) {
		return false
	}
	h.state, h.streak = to, 0
	return true
}
