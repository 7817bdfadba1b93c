//go:build kvbuf_failpoints

package kvbuf

import (
	"testing"

	"github.com/kvbuf/kvbuf/internal/failpoint"
)

// TestCrashFlushBitsHeader kills TestCrashRecovery's children in the
// engine's flush after a bitslice's words and header are durable and
// before the store's batch with the catalog and the watermark
// (failpoint.FlushBitsHeader): the file is then a generation ahead of
// its catalog entry and its words ahead of the watermark. Each reopen
// must hold every acknowledged op, nothing under the watermark lost, and
// the replay completes it (verifyCrash). TestCrashRecovery reaches the
// point only in a soak (it takes the points in turn); this test kills
// three children there, between three killed at random moments.
func TestCrashFlushBitsHeader(t *testing.T) {
	byMode := crashRecovery(t, 6, []string{failpoint.FlushBitsHeader})
	if n := byMode[failpoint.FlushBitsHeader+"/self-kill"]; n == 0 {
		t.Fatalf("no child killed itself at %s (kills by mode: %v)", failpoint.FlushBitsHeader, byMode)
	}
}
