package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExitErrorInJSONLog: a command that logs JSON (the static pod's `run`,
// whose stderr is the container's log) reports the error it exits with as
// its last JSON record; a pod's log read by `crictl logs` or a collector
// held a plain "appliance: ..." line there before. In text it stays the
// plain line a person at a terminal reads.
func TestExitErrorInJSONLog(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	run := func(format string) (string, int) {
		cmd := exec.Command(selfExe(t), "--log-format", format, "run", "--config", missing)
		cmd.Env = append(os.Environ(), envRunMain+"=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stderr.String(), code
	}
	out, code := run("json")
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	var last map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if err := json.Unmarshal([]byte(line), &last); err != nil {
			t.Errorf("a line of the JSON log is not JSON: %q", line)
		}
	}
	if last["level"] != "ERROR" || last["msg"] != "exiting" || !strings.Contains(last["err"].(string), missing) {
		t.Errorf("last record %v; want the error naming %s", last, missing)
	}
	out, _ = run("text")
	if !strings.HasPrefix(out, "appliance: ") || !strings.Contains(out, missing) {
		t.Errorf("text: %q; want the plain line", out)
	}
}

// TestJSONLogDurations: durations in JSON records read as in text ("1.5s"),
// not as nanoseconds.
func TestJSONLogDurations(t *testing.T) {
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: readableDurations})).
		Info("stopped", "took", 1500*time.Millisecond, "count", 3)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["took"] != "1.5s" || rec["count"] != float64(3) {
		t.Errorf("record %s; want took \"1.5s\" and count 3", buf.Bytes())
	}
}
