package kvbuf

import (
	"errors"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/internal/diskfull"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// A full disk. Every error whose cause is ENOSPC matches ErrDiskFull (and
// still syscall.ENOSPC). Where the engine meets one:
//
//   - A bitslice growth (or any bitslice write) of a flush: the flush
//     fails, its changes stay pending and readable, the watermark stays,
//     and the flusher retries (Flush at once, the background after a
//     backoff); writes held by backpressure get the error.
//   - A write of the store: the store's file system is guarded (package
//     internal/diskfull). A write of pebble's write-ahead log, MANIFEST or
//     marker files that finds no space waits and retries until it
//     succeeds, so pebble, which cannot survive a failed log write
//     (ErrSyncFailed until a reopen) or MANIFEST write (it ends the
//     process), never sees it. Meanwhile the flusher is stalled: Flush
//     returns ErrDiskFull at once, writes held by backpressure get it,
//     reads go on, and the generations in flight complete, in order, when
//     space returns. Other store writes (pebble's sstables) fail and
//     pebble tries again later.
//   - A Checkpoint: it fails, removes what it made and returns the error;
//     the engine is not affected.
//   - The engine directory's manifest (Open, MarkReady, Checkpoint): the
//     call fails with the error and a later one finishes the job.
//
// Metrics.DiskFull counts the episodes; Metrics.DiskFullWaiting says that
// the store is waiting for space now. Close on a full disk stops the
// store's waiting for its log: the final flush fails with ErrDiskFull,
// which Close returns, and the host replays from the watermark after the
// reopen. A MANIFEST write of one of pebble's background flushes or
// compactions is never abandoned: Close waits for space with it.

// guardStore returns the store's file system, guarded, and keeps the guard.
func (db *DB) guardStore() vfs.FS {
	base := db.opts.storeFSOrOS()
	o := &diskfull.Options{Full: db.storeFull, Waiting: db.storeWaiting, Space: db.storeSpace}
	if h := db.opts.hooks; h != nil && h.diskRetryMax > 0 {
		o.RetryMax = h.diskRetryMax
	}
	db.guard = diskfull.New(base, db.dir.StorePath(), o)
	return db.guard
}

// storeFull is the guard's report that a store write found the disk full.
func (db *DB) storeFull(error) { db.diskFull.Add(1) }

// storeWaiting is the guard's report that a store write waits for space:
// the flusher is stalled until a generation is released.
func (db *DB) storeWaiting(err error) {
	if f := db.stallTo.Load(); f != nil {
		f.Stall(kverr.Errorf("store %s waits for disk space: %w", db.dir.StorePath(), err))
	}
}

// storeSpace is the guard's report that a store write succeeded after the
// disk was found full: the flusher is no longer stalled.
func (db *DB) storeSpace() {
	if f := db.stallTo.Load(); f != nil {
		f.Unstall()
	}
}

// noteDiskFull counts err if it is a full disk, and returns it.
func (db *DB) noteDiskFull(err error) error {
	if err != nil && errors.Is(err, ErrDiskFull) {
		db.diskFull.Add(1)
	}
	return err
}
