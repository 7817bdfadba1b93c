package kvbuf

// Full-disk tests (issue 30): an injected ENOSPC (pebble's errorfs under the
// store; the failpoint build for bitslices, checkpoint copies and the
// manifest, in diskfull_failpoints_test.go) at each place the engine writes.
// Each checks: errors match ErrDiskFull and syscall.ENOSPC; the watermark
// does not move while the disk is full; every change stays readable; writes
// held by backpressure get ErrDiskFull; Metrics count it; once space
// returns the engine recovers without a restart, and a reopen finds every
// acknowledged change.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// diskModel is a disk that fills: while full, every write, creation,
// rename and link of a file under prefix fails with ENOSPC (as a
// *os.PathError, the way the OS reports it). Reads and syncs succeed.
type diskModel struct {
	full   atomic.Bool
	prefix atomic.Pointer[string]
	hits   atomic.Int64
}

func newDiskModel(prefix string) *diskModel {
	d := &diskModel{}
	d.prefix.Store(&prefix)
	return d
}

func (d *diskModel) injector() errorfs.Injector {
	return errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !d.full.Load() || !strings.HasPrefix(op.Path, *d.prefix.Load()) {
			return nil
		}
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpCreate, errorfs.OpReuseForWrite,
			errorfs.OpRename, errorfs.OpLink, errorfs.OpMkdirAll:
			d.hits.Add(1)
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	})
}

// wantDiskFull fails t unless err matches ErrDiskFull and ENOSPC.
func wantDiskFull(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrDiskFull) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("%s = %v; want an error matching ErrDiskFull and syscall.ENOSPC", what, err)
	}
}

// diskFullOptions are the engine options of these tests: no interval
// flushes, a small pending bound, the store on disk through d, retries of a
// store write waiting for space every few milliseconds.
func diskFullOptions(d *diskModel) *Options {
	return &Options{
		FlushInterval:   -1,
		MaxPendingBytes: 256 << 10,
		storeFS:         errorfs.Wrap(vfs.Default, d.injector()),
		hooks:           &testHooks{diskRetryMax: 5 * time.Millisecond},
	}
}

// fillUntilRefused writes values of 4 KiB to keyspace "bulk" until a write
// fails, and returns that error and the keys acknowledged. A write held by
// backpressure on a full disk must fail with ErrDiskFull, not wait.
func fillUntilRefused(t testing.TB, db *DB, tag string) (error, []string) {
	t.Helper()
	k := mustKV(t, db, "bulk")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	val := make([]byte, 4096)
	var acked []string
	for i := 0; ; i++ {
		key := fmt.Sprintf("%s-%05d", tag, i)
		copy(val, key)
		if err := k.Put(ctx, []byte(key), val, 0); err != nil {
			return err, acked
		}
		acked = append(acked, key)
		if i > 100_000 {
			t.Fatalf("%d writes of 4 KiB accepted on a full disk with a pending bound of 256 KiB", i)
		}
	}
}

// checkBulk checks that every acknowledged bulk key reads back.
func checkBulk(t testing.TB, db *DB, keys []string) {
	t.Helper()
	k := mustKV(t, db, "bulk")
	for _, key := range keys {
		v, err := k.Get([]byte(key))
		if err != nil || !strings.HasPrefix(string(v), key) {
			t.Fatalf("bulk %s = %.20q, %v after it was acknowledged", key, v, err)
		}
	}
}

// TestDiskFullStore fills the store's disk under a flush (the write-ahead
// log write with every keyspace's changes, a new keyspace's catalog entry
// and the watermark): Flush returns ErrDiskFull at once; the watermark
// stays; reads go on and see every write; writes go on until pending memory
// reaches its bound, then fail with ErrDiskFull; Metrics report the wait.
// Then space returns: the same engine flushes everything, with no restart,
// and a reopen finds it all.
//
// It runs twice: generations committed as store batches, and every
// generation flushed by ingestion (IngestThreshold 1: the sstables a flush
// writes into the store's kvbuf-ingest directory fail at once, the ingest's
// MANIFEST edit waits).
func TestDiskFullStore(t *testing.T) {
	for _, c := range []struct {
		name   string
		ingest int64
	}{{"batch", -1}, {"ingest", 1}} {
		t.Run(c.name, func(t *testing.T) { testDiskFullStore(t, c.ingest) })
	}
}

func testDiskFullStore(t *testing.T, ingestThreshold int64) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newDiskModel(filepath.Join(dir, "store"))
	opts := diskFullOptions(d)
	opts.IngestThreshold = ingestThreshold
	fe := openFaultEngine(t, dir, opts)
	// Space returns before the engine's cleanup closes it: a test that
	// failed with the disk full would otherwise leave a MANIFEST write of
	// pebble's waiting for ever, and Close with it.
	t.Cleanup(func() { d.full.Store(false) })
	db := fe.db
	fe.run(40)
	good := fe.flushAll(ctx, "before the disk fills")

	d.full.Store(true)
	fe.run(30)
	mustPut(t, mustKV(t, db, "born-full"), "k", "v", 0) // a catalog change
	for attempt := range 3 {
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := db.Flush(fctx)
		cancel()
		wantDiskFull(t, fmt.Sprintf("flush %d on a full disk", attempt), err)
		if wm := db.Watermark(); wm != good {
			t.Fatalf("flush %d on a full disk moved the watermark from %d to %d", attempt, good, wm)
		}
		fe.check(fmt.Sprintf("after flush %d on a full disk", attempt))
		fe.run(5)
	}
	err, acked := fillUntilRefused(t, db, "full")
	wantDiskFull(t, "a write held by backpressure on a full disk", err)
	checkBulk(t, db, acked)
	fe.check("after the writes were refused")
	m := db.Metrics()
	// A batch's log write waits for space; an ingestion's sstables fail
	// at once, and something waits only if a compaction's or an ingest's
	// MANIFEST write found the disk full.
	if m.DiskFull < 1 || ingestThreshold < 0 && !m.DiskFullWaiting {
		t.Fatalf("Metrics on a full disk: DiskFull %d, DiskFullWaiting %v; want >= 1, true", m.DiskFull, m.DiskFullWaiting)
	}
	if d.hits.Load() == 0 {
		t.Fatal("no ENOSPC was injected")
	}

	d.full.Store(false) // space returns
	waitSpace(t, db)
	// A background retry that began before space returned may still fail,
	// and a Flush waiting on it gets its error (each Flush gets the result
	// of one attempt): with ingestion the sstables fail at once, so the
	// flusher retries every few milliseconds while the disk is full. The
	// attempt after it has space.
	for try := 1; ; try++ {
		err := db.Flush(ctx)
		if err == nil {
			break
		}
		wantDiskFull(t, fmt.Sprintf("flush %d as space returned", try), err)
		if try == 5 {
			t.Fatalf("flush %d after space returned still failed: %v", try, err)
		}
	}
	last := fe.flushAll(ctx, "once space returned")
	if last <= good {
		t.Fatalf("watermark %d after recovery, %d before the disk filled", last, good)
	}
	if m := db.Metrics(); m.DiskFullWaiting {
		t.Fatal("Metrics.DiskFullWaiting after recovery")
	}
	// With space, the bound only holds writers back while flushes make
	// room: 800 KiB through a bound of 256 KiB.
	more := writeBulk(t, db, "after", 200)
	closeT(t, db)
	db = openT(t, dir, opts)
	defer closeT(t, db)
	if wm := db.Watermark(); wm != last {
		t.Fatalf("watermark %d after reopen, want %d", wm, last)
	}
	checkFaultState(t, "after reopen", db, fe.m)
	checkBulk(t, db, acked)
	checkBulk(t, db, more)
	wantGet(t, mustKV(t, db, "born-full"), "k", "v")
}

// waitSpace waits until the store's writes no longer wait for space (the
// next retry of a waiting write finds it), as a host that saw ErrDiskFull
// would poll Metrics before it flushes again.
func waitSpace(t testing.TB, db *DB) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); db.Metrics().DiskFullWaiting; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("store writes still wait for space 20 s after it returned")
		}
	}
}

// writeBulk writes n values of 4 KiB to keyspace "bulk"; every write must
// succeed.
func writeBulk(t testing.TB, db *DB, tag string, n int) []string {
	t.Helper()
	k := mustKV(t, db, "bulk")
	val := make([]byte, 4096)
	var keys []string
	for i := range n {
		key := fmt.Sprintf("%s-%05d", tag, i)
		copy(val, key)
		if err := k.Put(context.Background(), []byte(key), val, 0); err != nil {
			t.Fatalf("bulk write %d: %v", i, err)
		}
		keys = append(keys, key)
	}
	return keys
}

// TestDiskFullClose closes the engine while its store waits for space: Close
// does not wait for space; it stops the waiting and returns the full disk's
// error. Everything a Flush acknowledged is there after the reopen, and the
// host's replay from the watermark makes the rest durable.
func TestDiskFullClose(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newDiskModel(filepath.Join(dir, "store"))
	opts := diskFullOptions(d)
	fe := openFaultEngine(t, dir, opts)
	t.Cleanup(func() { d.full.Store(false) }) // see testDiskFullStore
	fe.run(40)
	good := fe.flushAll(ctx, "before the disk fills")
	d.full.Store(true)
	fe.run(20)
	wantDiskFull(t, "flush on a full disk", fe.db.Flush(ctx))
	lastOp := fe.m.upTo
	wantDiskFull(t, "Close on a full disk", fe.db.Close())
	d.full.Store(false)

	m := newCrashModel()
	wm := verifyCrash(t, dir, nil, m, crashAcks{wm: good, done: good}, lastOp, lastOp)
	fe = openFaultEngine(t, dir, nil)
	fe.m = m
	fe.run(int(lastOp - wm))
	fe.flushAll(ctx, "after the replay")
	fe.check("after the replay")
}

// TestDiskFullCheckpoint fills the disk under a Checkpoint's copy of the
// store: Checkpoint fails with ErrDiskFull and removes what it made; the
// engine goes on (flushes, reads); Metrics count it; with space the next
// Checkpoint to the same place succeeds.
func TestDiskFullCheckpoint(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cp := filepath.Join(t.TempDir(), "cp")
	d := newDiskModel(cp)
	fe := openFaultEngine(t, dir, diskFullOptions(d))
	db := fe.db
	fe.run(40)
	fe.flushAll(ctx, "before the checkpoint")
	d.full.Store(true)
	before := db.Metrics().DiskFull
	_, err := db.Checkpoint(ctx, cp)
	wantDiskFull(t, "Checkpoint on a full disk", err)
	if _, serr := os.Stat(cp); !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("a failed Checkpoint left %s: %v", cp, listTree(cp))
	}
	if got := db.Metrics().DiskFull; got != before+1 {
		t.Fatalf("Metrics.DiskFull %d after a failed Checkpoint, %d before", got, before)
	}
	fe.run(10)
	fe.flushAll(ctx, "after the failed checkpoint")
	d.full.Store(false)
	wm, err := db.Checkpoint(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	c := openT(t, cp, nil)
	defer closeT(t, c)
	if c.Watermark() != wm || wm != fe.m.upTo {
		t.Fatalf("checkpoint at watermark %d opens at %d; the engine's is %d", wm, c.Watermark(), fe.m.upTo)
	}
	checkFaultState(t, "the checkpoint", c, fe.m)
}
