package lb

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them: every
// goroutine the LB starts, its redirect watcher's included, ends with Run.
// netlab's spawner goroutine lives as long as the process by design (see
// netlab.StartCommand).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("appliance/internal/netlab.StartCommand.func1.1"))
}
