package workload

import (
	"context"
	"errors"
	"time"
)

// IdlePoll is how often WaitIdle looks at a store's background work, and
// IdleLooks how many looks in a row must find none: pebble counts a
// compaction done a moment before it schedules the next one, so one look
// that finds nothing running does not mean nothing will.
const (
	IdlePoll  = time.Millisecond
	IdleLooks = 3
)

// ErrStillBusy is returned by WaitIdle when the store's background work
// was still running at the deadline.
var ErrStillBusy = errors.New("workload: flush or compaction still running at the deadline")

// WaitIdle polls busy every IdlePoll until it reports false on IdleLooks
// looks in a row, then returns nil. It returns ctx's error if ctx is done
// first, and ErrStillBusy if wait (when positive) passes first: a caller
// counting disk writes must then leave the figure out, since background
// work it caused can land after it.
func WaitIdle(ctx context.Context, wait time.Duration, busy func() bool) error {
	var deadline <-chan time.Time
	if wait > 0 {
		d := time.NewTimer(wait)
		defer d.Stop()
		deadline = d.C
	}
	t := time.NewTicker(IdlePoll)
	defer t.Stop()
	for seen := 0; ; {
		if busy() {
			seen = 0
		} else if seen++; seen == IdleLooks {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return ErrStillBusy
		case <-t.C:
		}
	}
}
