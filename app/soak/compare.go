package soak

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
)

// ReadReport reads a soak's report.json.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("soak: %s: %w", path, err)
	}
	return &rep, nil
}

// Compare writes two soaks side by side: per fault kind what each stack
// lost, then the totals and every invariant's verdict. The two should be
// one schedule (seed and duration) run on two stacks; it says when not.
func Compare(w io.Writer, a, b *Report) {
	fmt.Fprintf(w, "=== Side by side: %s | %s (seed %d, %s)\n", a.Stack, b.Stack, a.Seed, a.Duration)
	if a.Seed != b.Seed || a.Duration != b.Duration {
		fmt.Fprintf(w, "NOTE: not one schedule: seed %d, %s against seed %d, %s\n", a.Seed, a.Duration, b.Seed, b.Duration)
	}
	fmt.Fprintln(w)
	pair := func(x, y string) string { return x + " | " + y }
	ka, kb := map[Kind]KindSummary{}, map[Kind]KindSummary{}
	for _, k := range a.ByKind() {
		ka[k.Kind] = k
	}
	for _, k := range b.ByKind() {
		kb[k.Kind] = k
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tinjected\tworst API outage\tworst VIP gap\tfailed calls\tbroken streams\tDNS failures")
	for _, k := range Kinds() {
		x, okA := ka[k]
		y, okB := kb[k]
		if !okA && !okB {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k,
			pair(fmt.Sprint(x.Injected), fmt.Sprint(y.Injected)),
			pair(dur(x.WorstOutage), dur(y.WorstOutage)),
			pair(dur(x.WorstVIPGap), dur(y.WorstVIPGap)),
			pair(fmt.Sprint(x.FailedCalls), fmt.Sprint(y.FailedCalls)),
			pair(fmt.Sprint(x.BrokenStreams), fmt.Sprint(y.BrokenStreams)),
			pair(fmt.Sprint(x.DNSFailures), fmt.Sprint(y.DNSFailures)))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "total\t%s\t%s\n", a.Stack, b.Stack)
	broken := func(r *Report) int {
		n := 0
		for end, c := range r.Streams.Ends {
			if end != "eof" && end != "open" {
				n += c
			}
		}
		return n
	}
	rows := []struct {
		name string
		x, y int
	}{
		{"API calls", a.Calls, b.Calls},
		{"failed calls", a.FailedCalls, b.FailedCalls},
		{"failed calls no unplanned fault explains", a.UnattributedFailures, b.UnattributedFailures},
		{"streams", a.Streams.Opened, b.Streams.Opened},
		{"streams broken (reset, stalled, cut)", broken(a), broken(b)},
		{"DNS questions", a.DNS.Queries, b.DNS.Queries},
		{"DNS unanswered", a.DNS.Failed, b.DNS.Failed},
		{"DNS unanswered no fault explains", len(a.DNS.Unattributed), len(b.DNS.Unattributed)},
		{"DNS answered wrong", len(a.DNS.Wrong), len(b.DNS.Wrong)},
		{"DHCP exchanges", a.DHCP.Exchanges, b.DHCP.Exchanges},
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", r.name, r.x, r.y)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "invariant\t%s\t%s\n", a.Stack, b.Stack)
	// Invariants match by Key; a report written before keys existed
	// matches by Name.
	id := func(inv invariant) string {
		if inv.Key != "" {
			return inv.Key
		}
		return inv.Name
	}
	verdict := func(r *Report, key string) string {
		for _, inv := range r.Invariants {
			if id(inv) != key {
				continue
			}
			switch {
			case inv.NA != "":
				return "n/a"
			case inv.Held:
				return "held"
			}
			return fmt.Sprintf("BROKEN (%d)", len(inv.Violations))
		}
		return "-"
	}
	seen := map[string]bool{}
	for _, r := range []*Report{a, b} {
		for _, inv := range r.Invariants {
			if k := id(inv); !seen[k] {
				seen[k] = true
				fmt.Fprintf(tw, "%s\t%s\t%s\n", inv.Name, verdict(a, k), verdict(b, k))
			}
		}
	}
	tw.Flush()
}
