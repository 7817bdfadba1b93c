package buffer

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines after closing the process-wide
// benchmark fixtures (their pebble instances run background goroutines).
func TestMain(m *testing.M) {
	code := m.Run()
	w2Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
