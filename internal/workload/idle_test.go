package workload

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestWaitIdleLooksInARow: a look that finds nothing running, followed by
// one that finds a compaction scheduled a moment later, does not end the
// wait; IdleLooks idle looks in a row do.
func TestWaitIdleLooksInARow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		looks := []bool{true, false, true, false, false, true, false, false, false, true}
		n := 0
		err := WaitIdle(t.Context(), time.Minute, func() bool {
			b := looks[n]
			n++
			return b
		})
		if err != nil || n != 9 {
			t.Fatalf("WaitIdle = %v after %d looks, want nil after 9", err, n)
		}
	})
}

// TestWaitIdleDeadline: work that never ends gives ErrStillBusy at the
// deadline, and a cancelled context its error.
func TestWaitIdleDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		err := WaitIdle(t.Context(), 30*time.Second, func() bool { return true })
		if !errors.Is(err, ErrStillBusy) || time.Since(start) != 30*time.Second {
			t.Fatalf("WaitIdle = %v after %v, want ErrStillBusy after 30s", err, time.Since(start))
		}
		// Idle on every look but the last before the deadline: still busy.
		start = time.Now()
		err = WaitIdle(t.Context(), 30*time.Second, func() bool {
			return time.Since(start) < 30*time.Second && (time.Since(start)/IdlePoll)%IdleLooks == IdleLooks-1
		})
		if !errors.Is(err, ErrStillBusy) {
			t.Fatalf("WaitIdle over work seen on every %dth look = %v, want ErrStillBusy", IdleLooks, err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := WaitIdle(ctx, 0, func() bool { return true }); !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitIdle with a cancelled context = %v, want context.Canceled", err)
		}
	})
}
