//go:build kvbuf_failpoints

package kvbuf

// Full-disk tests through failpoints (go test -tags kvbuf_failpoints): a
// bitslice growth, a checkpoint's bitslice copy and the engine directory's
// manifest write fail with ENOSPC as a full disk would.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/kvbuf/kvbuf/internal/failpoint"
)

// enospcPoint makes point fail with ENOSPC while full is set.
func enospcPoint(t *testing.T, point string, full *atomic.Bool) {
	t.Helper()
	disable := failpoint.Enable(point, func() error {
		if full.Load() {
			return &os.PathError{Op: "fallocate", Path: point, Err: syscall.ENOSPC}
		}
		return nil
	})
	t.Cleanup(disable)
}

// TestDiskFullGrowth: a flush that must grow the bitslices fails with
// ErrDiskFull, again at every attempt; the watermark stays; every change
// stays readable; writes held by backpressure get ErrDiskFull; Metrics
// count the failures. Once space returns the same engine flushes
// everything.
func TestDiskFullGrowth(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var full atomic.Bool
	enospcPoint(t, failpoint.BitsliceGrowAllocate, &full)
	fe := openFaultEngine(t, dir, &Options{FlushInterval: -1, MaxPendingBytes: 256 << 10})
	db := fe.db
	fe.run(40)
	good := fe.flushAll(ctx, "before the disk fills")
	full.Store(true)
	fe.apply(farBitsOp(fe.m.upTo+1, 1<<20)) // the next flush must grow the files
	fe.run(20)
	for attempt := range 3 {
		wantDiskFull(t, "flush that grows a bitslice on a full disk", db.Flush(ctx))
		if wm := db.Watermark(); wm != good {
			t.Fatalf("flush %d failed, yet the watermark moved from %d to %d", attempt, good, wm)
		}
		fe.check("after a failed growth")
		fe.run(5)
	}
	err, acked := fillUntilRefused(t, db, "full")
	wantDiskFull(t, "a write held by backpressure while growth fails", err)
	checkBulk(t, db, acked)
	if m := db.Metrics(); m.DiskFull < 3 || !errors.Is(m.LastError, ErrDiskFull) {
		t.Fatalf("Metrics: DiskFull %d, LastError %v; want >= 3 and ErrDiskFull", m.DiskFull, m.LastError)
	}
	full.Store(false)
	last := fe.flushAll(ctx, "once space returned")
	closeT(t, db)
	db = openT(t, dir, nil)
	defer closeT(t, db)
	if wm := db.Watermark(); wm != last {
		t.Fatalf("watermark %d after reopen, want %d", wm, last)
	}
	checkFaultState(t, "after reopen", db, fe.m)
	checkBulk(t, db, acked)
}

// TestDiskFullCheckpointCopy: a Checkpoint whose bitslice copy finds the
// disk full fails with ErrDiskFull and leaves nothing; so does one whose
// final manifest write (MarkReady) does. With space, the next one works.
func TestDiskFullCheckpointCopy(t *testing.T) {
	ctx := context.Background()
	for _, point := range []string{failpoint.CheckpointCopy, failpoint.EnginedirManifest} {
		t.Run(filepath.Base(point), func(t *testing.T) {
			var full atomic.Bool
			enospcPoint(t, point, &full)
			fe := openFaultEngine(t, t.TempDir(), &Options{FlushInterval: -1})
			db := fe.db
			fe.run(30)
			fe.flushAll(ctx, "before the checkpoint")
			cp := filepath.Join(t.TempDir(), "cp")
			full.Store(true)
			_, err := db.Checkpoint(ctx, cp)
			wantDiskFull(t, "Checkpoint on a full disk", err)
			if _, serr := os.Stat(cp); !errors.Is(serr, os.ErrNotExist) {
				t.Fatalf("a failed Checkpoint left %s: %v", cp, listTree(cp))
			}
			if m := db.Metrics(); m.DiskFull != 1 {
				t.Fatalf("Metrics.DiskFull %d after one failed Checkpoint", m.DiskFull)
			}
			fe.run(5)
			fe.flushAll(ctx, "after the failed checkpoint")
			full.Store(false)
			if _, err := db.Checkpoint(ctx, cp); err != nil {
				t.Fatal(err)
			}
			c := openT(t, cp, nil)
			defer closeT(t, c)
			checkFaultState(t, "the checkpoint", c, fe.m)
		})
	}
}

// TestDiskFullManifest: Open of a new engine whose manifest write finds the
// disk full fails with ErrDiskFull, leaving only what the next Open
// finishes; with space, the next Open makes the engine.
func TestDiskFullManifest(t *testing.T) {
	var full atomic.Bool
	enospcPoint(t, failpoint.EnginedirManifest, &full)
	dir := filepath.Join(t.TempDir(), "engine")
	full.Store(true)
	if db, err := Open(dir, nil); err == nil {
		db.Close()
		t.Fatal("Open with the manifest write failing succeeded")
	} else {
		wantDiskFull(t, "Open on a full disk", err)
	}
	full.Store(false)
	db := openT(t, dir, nil)
	mustPut(t, mustKV(t, db, "k"), "a", "1", 1)
	closeT(t, db)
	db = openT(t, dir, nil)
	defer closeT(t, db)
	wantGet(t, mustKV(t, db, "k"), "a", "1")
}
