//go:build kvbuf_failpoints

package kvbuf

import (
	"context"
	"testing"

	"github.com/kvbuf/kvbuf/internal/failpoint"
)

// TestErrorTextsFailpoints drives the sentinel a normal build cannot reach
// (a panic inside a flush, a bug) and checks errors.Is and the exact text.
func TestErrorTextsFailpoints(t *testing.T) {
	ctx := context.Background()
	checkErrCase(t, errCase{"panicked", func(t *testing.T, dir string) error {
		db := errDB(t, dir, nil)
		b := mustBits(t, db, "seen")
		mustSet(t, b, 3, true, 1)
		mustFlush(t, db) // the file exists: the next flush syncs it
		mustSet(t, b, 4, true, 2)
		disable := failpoint.Enable(failpoint.BitsliceSyncMsync, func() error { panic("injected panic") })
		defer disable()
		return db.Flush(ctx)
	}, []error{ErrPanicked}, `kvbuf: flush generation 2 write: flush panicked: injected panic`, false})
}
