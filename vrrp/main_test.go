package vrrp

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them: every
// goroutine an instance starts ends before its Run returns. netlab's spawner
// goroutine lives as long as the process by design (netlab.StartCommand).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("appliance/internal/netlab.StartCommand.func1.1"))
}
