package preflight

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Status is a check's verdict.
type Status string

// Statuses, from best to worst for a reader; only StatusFail makes the
// command exit 1.
const (
	StatusPass    Status = "pass"
	StatusWarn    Status = "warn"
	StatusSkipped Status = "skipped"
	StatusFail    Status = "fail"
)

// Result is one check's outcome. ID is stable across runs and releases so
// scripts can match on it; Message names the culprit and the fix; Details
// carries what was observed, for JSON readers.
type Result struct {
	ID      string `json:"id"`
	Status  Status `json:"status"`
	Message string `json:"message"`
	Details any    `json:"details,omitempty"`
}

func pass(id, format string, args ...any) Result {
	return Result{ID: id, Status: StatusPass, Message: fmt.Sprintf(format, args...)}
}

func fail(id, format string, args ...any) Result {
	return Result{ID: id, Status: StatusFail, Message: fmt.Sprintf(format, args...)}
}

func warn(id, format string, args ...any) Result {
	return Result{ID: id, Status: StatusWarn, Message: fmt.Sprintf(format, args...)}
}

func skipped(id, format string, args ...any) Result {
	return Result{ID: id, Status: StatusSkipped, Message: fmt.Sprintf(format, args...)}
}

func (r Result) with(details any) Result {
	r.Details = details
	return r
}

// Failed reports whether any result failed.
func Failed(rs []Result) bool {
	for _, r := range rs {
		if r.Status == StatusFail {
			return true
		}
	}
	return false
}

// WriteJSON writes the results as one JSON array of {id, status, message,
// details}; an empty run is [] rather than null.
func WriteJSON(w io.Writer, rs []Result) error {
	if rs == nil {
		rs = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rs); err != nil {
		return fmt.Errorf("preflight: write JSON: %w", err)
	}
	return nil
}

// WriteText writes one line per result, the status first so a failure is
// found by eye, then a summary line.
func WriteText(w io.Writer, rs []Result) error {
	var b strings.Builder
	width := 0
	for _, r := range rs {
		width = max(width, len(r.ID))
	}
	counts := map[Status]int{}
	for _, r := range rs {
		counts[r.Status]++
		// Continuation lines of a multi-line message line up under the first.
		msg := strings.ReplaceAll(r.Message, "\n", "\n"+strings.Repeat(" ", 8+width+2))
		fmt.Fprintf(&b, "%-7s %-*s  %s\n", strings.ToUpper(string(r.Status)), width, r.ID, msg)
	}
	fmt.Fprintf(&b, "%d checks: %d passed, %d failed, %d warnings, %d skipped\n",
		len(rs), counts[StatusPass], counts[StatusFail], counts[StatusWarn], counts[StatusSkipped])
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("preflight: write report: %w", err)
	}
	return nil
}
