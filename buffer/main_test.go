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

// skipWithoutPool skips an allocation test in a -tags kvbuf_nopool build:
// such tests assert that recycled tables make steady cycles allocation-free,
// which is exactly what the tag turns off.
func skipWithoutPool(t *testing.T) {
	t.Helper()
	if !poolEnabled {
		t.Skip("table pooling compiled out (-tags kvbuf_nopool): steady cycles allocate by design")
	}
}
