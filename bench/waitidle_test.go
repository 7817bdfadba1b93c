package bench

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvbuf/kvbuf/internal/workload"
)

// fakeBusy is a fake store's busy report: busy on the looks before its
// busyUntil'th (always when busyUntil < 0), counting its looks.
type fakeBusy struct {
	busyUntil, looks int
}

func (f *fakeBusy) report() bool {
	f.looks++
	return f.busyUntil < 0 || f.looks <= f.busyUntil
}

// reports returns the busy reports of fs, in order.
func reports(fs ...*fakeBusy) []func() bool {
	var busy []func() bool
	for _, f := range fs {
		busy = append(busy, f.report)
	}
	return busy
}

// TestWaitIdleAllStillBusy: a store still busy at quiesceWait makes
// waitIdleAll return workload.ErrStillBusy, after every other store was
// still waited for, wherever it stands in the list.
func TestWaitIdleAllStillBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Busy then idle first, always busy second.
		first, second := &fakeBusy{busyUntil: 5}, &fakeBusy{busyUntil: -1}
		start := time.Now()
		err := waitIdleAll(t.Context(), reports(first, second))
		if !errors.Is(err, workload.ErrStillBusy) {
			t.Fatalf("waitIdleAll(busy then idle, always busy) = %v, want ErrStillBusy", err)
		}
		// At the deadline of the second's wait, not after closing passes.
		if el := time.Since(start); el < quiesceWait || el > quiesceWait+time.Second {
			t.Errorf("waitIdleAll returned after %v, want about quiesceWait (%v)", el, quiesceWait)
		}
		if first.looks < 5+workload.IdleLooks {
			t.Errorf("first report looked at %d times, want at least %d", first.looks, 5+workload.IdleLooks)
		}
		if second.looks < 2 {
			t.Errorf("second report looked at %d times: it was not polled until the deadline", second.looks)
		}

		// Idle, always busy, idle: the third is still waited for.
		a, b, c := &fakeBusy{}, &fakeBusy{busyUntil: -1}, &fakeBusy{}
		err = waitIdleAll(t.Context(), reports(a, b, c))
		if !errors.Is(err, workload.ErrStillBusy) {
			t.Fatalf("waitIdleAll(idle, always busy, idle) = %v, want ErrStillBusy", err)
		}
		if c.looks < workload.IdleLooks {
			t.Errorf("the store after the busy one was looked at %d times, want at least %d", c.looks, workload.IdleLooks)
		}
	})
}

// TestWaitIdleAllCancelled: a cancelled context gives its error at once,
// whether the store is busy or idle.
func TestWaitIdleAllCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		for _, f := range []*fakeBusy{{busyUntil: -1}, {}} {
			start := time.Now()
			err := waitIdleAll(ctx, reports(f, &fakeBusy{busyUntil: -1}))
			if !errors.Is(err, context.Canceled) || time.Since(start) != 0 {
				t.Fatalf("waitIdleAll with a cancelled context = %v after %v, want context.Canceled at once", err, time.Since(start))
			}
		}
	})
}

// TestWaitIdleAllClosingPass: a store found idle, then started again
// while a later one was waited for, is waited for again; waitIdleAll
// returns nil only once one pass finds every store idle.
func TestWaitIdleAllClosingPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var restarted bool
		first := &fakeBusy{}
		second := &fakeBusy{busyUntil: 4}
		busy := []func() bool{
			func() bool {
				// Busy again for a few looks once the second store was seen busy.
				if second.looks > 0 && !restarted {
					restarted, first.looks, first.busyUntil = true, 0, 3
				}
				return first.report()
			},
			second.report,
		}
		// The first store is looked at while idle, then the second waited
		// for; only the closing pass sees the first one restarted.
		if err := waitIdleAll(t.Context(), busy); err != nil {
			t.Fatalf("waitIdleAll = %v, want nil", err)
		}
		if !restarted || first.looks < 3+workload.IdleLooks {
			t.Fatalf("the restarted store was looked at %d times after its restart, want at least %d", first.looks, 3+workload.IdleLooks)
		}

		// A store that keeps going busy between passes: ErrStillBusy at the
		// closing passes' deadline.
		flap := 0
		start := time.Now()
		err := waitIdleAll(t.Context(), []func() bool{
			func() bool { flap++; return flap%(workload.IdleLooks+1) == 0 },
		})
		if !errors.Is(err, workload.ErrStillBusy) {
			t.Fatalf("waitIdleAll over a store that restarts before every pass = %v, want ErrStillBusy", err)
		}
		if el := time.Since(start); el < quiesceWait || el > 2*quiesceWait {
			t.Errorf("waitIdleAll returned after %v, want between quiesceWait and twice it", el)
		}

		// A store idle at the closing pass's first look but busy at the
		// next (pebble's moment between a compaction and the next it
		// schedules): the pass takes IdleLooks looks, so it sees the busy
		// one and waits again (one look per store passed it).
		looks, gap := 0, 0
		err = waitIdleAll(t.Context(), []func() bool{func() bool {
			looks++
			if looks == workload.IdleLooks+2 { // the closing pass's second look
				gap = looks
				return true
			}
			return false
		}})
		if err != nil || gap == 0 || looks < gap+2*workload.IdleLooks {
			t.Fatalf("waitIdleAll over a store busy at one look of the closing pass = %v after %d looks (busy at look %d), want nil after at least %d", err, looks, gap, gap+2*workload.IdleLooks)
		}
	})
}
