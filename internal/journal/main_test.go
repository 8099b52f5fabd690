package journal

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine (a commit goroutine, a segment
// being prepared) outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
