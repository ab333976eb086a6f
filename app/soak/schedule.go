package soak

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The faults the soak injects. Each can be switched off (Options.Off).
const (
	// KindKill9 SIGKILLs a node's appliance and starts it again after a
	// pause, as the kubelet restarts a crashed static pod.
	KindKill9 Kind = "kill9"
	// KindSigtermHolder SIGTERMs the appliance of the API VIP's holder
	// (a static pod updated or deleted), and starts it again once gone.
	KindSigtermHolder Kind = "sigterm-holder"
	// KindLinkFlap cuts a node's link (its bridge port down) for a while.
	KindLinkFlap Kind = "link-flap"
	// KindPacketLoss drops a share of a node's frames both ways for a while.
	KindPacketLoss Kind = "packet-loss"
	// KindVIPDelete deletes a VIP from under its holder.
	KindVIPDelete Kind = "vip-delete"
	// KindBrEx moves a node's address onto a new bridge br-ex with its NIC
	// as port, as OVN-Kubernetes' configure-ovs does (or back again).
	KindBrEx Kind = "br-ex"
	// KindNftFlush runs `nft flush ruleset` on a node, as nftables.service
	// does when it starts.
	KindNftFlush Kind = "nft-flush"
	// KindAPIServerUnready makes a control-plane node's apiserver fail
	// /readyz for a while, as one shutting down or restarting does.
	KindAPIServerUnready Kind = "apiserver-unready"
	// KindAPIServerKill SIGKILLs a control-plane node's apiserver and
	// starts it again after a pause.
	KindAPIServerKill Kind = "apiserver-kill"
	// KindAPIServerRestart stops an apiserver gracefully and starts it
	// again at once.
	KindAPIServerRestart Kind = "apiserver-restart"
	// KindKubeRestart stops the Kubernetes API (the Node source) and
	// starts it again after a pause.
	KindKubeRestart Kind = "kube-restart"
	// KindUpstreamBlackhole drops everything sent to one upstream DNS
	// server for a while.
	KindUpstreamBlackhole Kind = "upstream-blackhole"
	// KindBootstrapTeardown tears the bootstrap down, once, in order: its
	// apiserver fails /readyz, the masters take the VIP, its appliance gets
	// SIGTERM, its stand-ins stop.
	KindBootstrapTeardown Kind = "bootstrap-teardown"
	// KindDay2Node creates a day-2 worker's Node object and deletes it
	// after a while.
	KindDay2Node Kind = "day2-node"
)

// kindInfo says how a kind is scheduled and what it may explain.
type kindInfo struct {
	kind Kind
	// weight is its share of the random schedule (0: scheduled apart).
	weight int
	// minDur and maxDur bound how long it lasts (0: instantaneous).
	minDur, maxDur time.Duration
	// planned faults are moves an operator or the platform makes on
	// purpose: they must cost no API call.
	planned bool
	// what is a short description for the report.
	what string
}

// kinds lists every kind, in the report's order.
var kinds = []kindInfo{
	{KindKill9, 10, time.Second, 5 * time.Second, false, "kill -9 of a node's appliance, restarted after the pause"},
	{KindSigtermHolder, 8, 0, 0, true, "SIGTERM of the API VIP holder's appliance, restarted once gone"},
	{KindLinkFlap, 7, time.Second, 6 * time.Second, false, "a node's link down, then up"},
	{KindPacketLoss, 6, 10 * time.Second, 25 * time.Second, false, "10-40% of a node's frames dropped both ways"},
	{KindVIPDelete, 6, 0, 0, false, "a VIP deleted from under its holder"},
	{KindBrEx, 4, 0, 0, false, "a node's address moved onto a new br-ex (or back to eth0)"},
	{KindNftFlush, 6, 0, 0, false, "nft flush ruleset on a control-plane node"},
	{KindAPIServerUnready, 6, 5 * time.Second, 20 * time.Second, true, "an apiserver failing /readyz"},
	{KindAPIServerKill, 6, 2 * time.Second, 10 * time.Second, false, "an apiserver killed, started again after the pause"},
	{KindAPIServerRestart, 5, 0, 0, true, "an apiserver stopped gracefully and started again"},
	{KindKubeRestart, 3, 5 * time.Second, 20 * time.Second, false, "the Kubernetes API (the Node source) stopped, then started"},
	{KindUpstreamBlackhole, 4, 10 * time.Second, 30 * time.Second, false, "one upstream DNS server black-holed"},
	{KindBootstrapTeardown, 0, 0, 0, true, "the bootstrap torn down (once, in order)"},
	{KindDay2Node, 4, 10 * time.Second, 30 * time.Second, true, "a day-2 worker's Node created, then deleted"},
}

// Kinds lists every fault kind the soak knows, in the report's order.
func Kinds() []Kind {
	out := make([]Kind, len(kinds))
	for i, k := range kinds {
		out[i] = k.kind
	}
	return out
}

func infoOf(k Kind) kindInfo {
	for _, ki := range kinds {
		if ki.kind == k {
			return ki
		}
	}
	return kindInfo{kind: k}
}

// ParseKinds reads a comma-separated list of kinds ("" is none).
func ParseKinds(s string) ([]Kind, error) {
	var out []Kind
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !slices.Contains(Kinds(), Kind(f)) {
			return nil, fmt.Errorf("no fault kind %q; the kinds are %s", f, KindList())
		}
		out = append(out, Kind(f))
	}
	return out, nil
}

// KindList is every kind's name, comma-separated, for help texts.
func KindList() string {
	var s []string
	for _, k := range Kinds() {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}

// Fault is one planned fault: what, when (from the start of the load),
// for how long, and the seeded choices it makes when it runs.
type Fault struct {
	ID   int           `json:"id"`
	Kind Kind          `json:"kind"`
	At   time.Duration `json:"at"`
	Dur  time.Duration `json:"duration"`
	// Pick chooses among the eligible targets when the fault runs (which
	// ones are eligible depends on the cluster then: the VIP's holder, the
	// nodes not already faulted).
	Pick uint32 `json:"pick"`
	// Level is the kind's strength where it has one: the percentage of
	// frames dropped.
	Level int `json:"level,omitempty"`
}

// Schedule timing.
const (
	// warmup is how long the load runs before the first fault: every
	// check starts from a cluster known to be whole.
	warmup = 15 * time.Second
	// cooldown is the end of the soak without new faults, so the last
	// recoveries are measured.
	cooldown = 20 * time.Second
	// minGap and maxGap bound the pause between faults; overlapShare of
	// the faults start while the one before still runs.
	minGap, maxGap = 6 * time.Second, 16 * time.Second
	overlapShare   = 0.25
)

// Plan is the seeded schedule of a soak of duration d with the kinds not
// in off: the same seed and duration give the same faults. Every kind comes
// once before any comes twice (as far as d allows); the bootstrap's
// teardown comes once, between a sixth and a third of the soak.
func Plan(seed uint64, d time.Duration, off []Kind) []Fault {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var pool []kindInfo
	total := 0
	for _, ki := range kinds {
		if ki.weight > 0 && !slices.Contains(off, ki.kind) {
			pool = append(pool, ki)
			total += ki.weight
		}
	}
	end := d - cooldown
	var out []Fault
	if !slices.Contains(off, KindBootstrapTeardown) && end > warmup {
		at := max(warmup, d/6+time.Duration(rng.Int64N(int64(d/6)+1)))
		out = append(out, Fault{Kind: KindBootstrapTeardown, At: at, Pick: rng.Uint32()})
	}
	// Every kind once first, in a seeded order, then by weight: a short
	// soak (the one in make test) meets every kind, not only the common.
	deck := slices.Clone(pool)
	rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
	for t := warmup + time.Duration(rng.Int64N(int64(minGap))); t < end && total > 0; {
		var ki kindInfo
		if len(deck) > 0 {
			ki, deck = deck[0], deck[1:]
		} else {
			n := rng.IntN(total)
			for _, k := range pool {
				if n < k.weight {
					ki = k
					break
				}
				n -= k.weight
			}
		}
		f := Fault{Kind: ki.kind, At: t, Pick: rng.Uint32()}
		if ki.maxDur > 0 {
			f.Dur = ki.minDur + time.Duration(rng.Int64N(int64(ki.maxDur-ki.minDur)+1))
			f.Dur = f.Dur.Round(100 * time.Millisecond)
		}
		if ki.kind == KindPacketLoss {
			f.Level = 10 + rng.IntN(31)
		}
		out = append(out, f)
		if len(deck) > 0 {
			// Still dealing every kind once: the next comes without
			// waiting for this one to end (it hits another node, or
			// waits for one), so that a 3-minute soak deals them all.
			t += minGap + time.Duration(rng.Int64N(int64(maxGap-minGap)/2))
			continue
		}
		if rng.Float64() < overlapShare {
			t += time.Duration(rng.Int64N(int64(2 * time.Second)))
		} else {
			t += f.Dur + minGap + time.Duration(rng.Int64N(int64(maxGap-minGap)))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	for i := range out {
		out[i].ID = i + 1
		out[i].At = out[i].At.Round(time.Millisecond)
	}
	return out
}
