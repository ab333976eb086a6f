package provision

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"testing"

	"appliance/internal/cluster"
)

// The test binary doubles as an apply of its own, so a scenario can kill
// one midway or run one beside the test's own Kubernetes client (client-go's
// process-wide logger would race with it in one process).
const (
	envApply  = "APPLIANCE_PROVISION_TEST_APPLY" // appliance.yaml's path
	envAssets = "APPLIANCE_PROVISION_TEST_ASSETS"
	envServe  = "APPLIANCE_PROVISION_TEST_SERVE" // --serve-ignition
)

func TestMain(m *testing.M) {
	if path := os.Getenv(envApply); path != "" {
		if err := childApply(path, os.Getenv(envAssets), os.Getenv(envServe)); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// childApply applies appliance.yaml at path with the assets, printing each
// event as a line "event <type> <fields>".
func childApply(path, assets, serve string) error {
	cfg, err := cluster.Load(path)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx := context.Background()
	s, err := Open(ctx, Options{Config: cfg, ConfigPath: path, Assets: assets, NeedAssets: true}, log)
	if err != nil {
		return err
	}
	defer s.Close()
	_, err = s.Apply(ctx, ApplyOptions{Ignition: Ignition{Files: testFiles(testImageRef), Serve: serve}}, func(e Event) {
		fmt.Printf("event %T %+v\n", e, e)
	})
	return err
}

// applyProcess is an apply of appliance.yaml at path in a process of its
// own, not started yet.
func applyProcess(t *testing.T, path, assets, serve string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envApply+"="+path, envAssets+"="+assets, envServe+"="+serve)
	return cmd
}

// testLog logs warnings to stderr: not into the test's output, since
// client-go keeps a run's logger process-wide and may log after the test.
func testLog(*testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// recorder collects a run's events.
type recorder struct{ events []Event }

func (r *recorder) emit(e Event) { r.events = append(r.events, e) }

// has reports whether an event of e's type and value came.
func (r *recorder) has(e Event) bool {
	for _, got := range r.events {
		if fmt.Sprintf("%#v", got) == fmt.Sprintf("%#v", e) {
			return true
		}
	}
	return false
}

// kinds lists the events' types, in order.
func (r *recorder) kinds() []string {
	var out []string
	for _, e := range r.events {
		out = append(out, fmt.Sprintf("%T", e))
	}
	return out
}
