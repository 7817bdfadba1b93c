//go:build kvbuf_failpoints

package kvbuf

// Fault tests through the bitslice failpoints (go test -tags
// kvbuf_failpoints): each injected error, or a panic, fails the flush, which
// reports it, again at every attempt while the fault lasts; the watermark
// stays; every pending change stays readable, including writes made while
// the fault lasts; and the first flush after the fault is gone makes
// everything durable (checked after a reopen).

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/kvbuf/kvbuf/internal/failpoint"
)

func TestFaultBitsliceFailpoints(t *testing.T) {
	cases := []struct {
		name  string
		point string
		fail  func() error
		want  error
		grow  bool // the failing flush must grow the files to reach the point
	}{
		{"msync-EIO", failpoint.BitsliceSyncMsync, func() error { return syscall.EIO }, syscall.EIO, false},
		// The flush's word writes (WriteWords) torn by a failed pwrite.
		{"pwrite-EIO", failpoint.BitsliceWriteWords, func() error { return syscall.EIO }, syscall.EIO, false},
		{"header-EIO", failpoint.BitsliceSyncHeader, func() error { return syscall.EIO }, syscall.EIO, false},
		// The engine's flush failing after the bitslices' words and
		// headers are durable, before the store's batch with the
		// watermark: the retry writes the same words again.
		{"after-header-EIO", failpoint.FlushBitsHeader, func() error { return syscall.EIO }, syscall.EIO, false},
		{"after-header-panic", failpoint.FlushBitsHeader, func() error { panic("injected panic") }, ErrPanicked, false},
		{"grow-allocate-ENOSPC", failpoint.BitsliceGrowAllocate, func() error { return syscall.ENOSPC }, syscall.ENOSPC, true},
		{"grow-header-EIO", failpoint.BitsliceGrowHeader, func() error { return syscall.EIO }, syscall.EIO, true},
		{"msync-panic", failpoint.BitsliceSyncMsync, func() error { panic("injected panic") }, ErrPanicked, false},
		{"grow-header-panic", failpoint.BitsliceGrowHeader, func() error { panic(syscall.EIO) }, ErrPanicked, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			faultRound(t, c.point, c.fail, c.want, c.grow)
		})
	}
}

func faultRound(t *testing.T, point string, fail func() error, want error, grow bool) {
	ctx := context.Background()
	dir := t.TempDir()
	fe := openFaultEngine(t, dir, &Options{FlushInterval: -1})
	db := fe.db
	fe.run(50)
	good := fe.flushAll(ctx, "before the fault")

	var hits atomic.Int64 // the callback runs on the flusher's goroutines
	disable := failpoint.Enable(point, func() error { hits.Add(1); return fail() })
	defer disable()
	if grow {
		fe.apply(farBitsOp(fe.m.upTo+1, 1<<20)) // past the files' end: the flush must grow them
	}
	fe.run(30)
	for attempt := range 3 {
		err := db.Flush(ctx)
		if !errors.Is(err, want) {
			t.Fatalf("flush %d with %s failing = %v, want %v", attempt, point, err, want)
		}
		if wm := db.Watermark(); wm != good {
			t.Fatalf("flush %d failed, yet the watermark moved from %d to %d", attempt, good, wm)
		}
		// The receipt in the store too: a watermark committed ahead of
		// the failed step would be what a crash now reopens at.
		if swm, err := db.store.Watermark(); err != nil || swm != good {
			t.Fatalf("flush %d failed, yet the store's persisted watermark is %d (%v), want %d", attempt, swm, err, good)
		}
		fe.check(fmt.Sprintf("after failed flush %d", attempt))
		fe.run(10) // writes during the fault join the retry
	}
	disable()
	if n := hits.Load(); n < 3 {
		t.Fatalf("the failpoint was hit %d times in 3 failed flushes", n)
	}
	fe.recoverAndReopen(ctx, dir, nil, want)
}
