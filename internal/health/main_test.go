package health

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them: a check
// leaves no connection or transport goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
