package kvbuf

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/internal/buffer"
	"github.com/kvbuf/kvbuf/internal/diskfull"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/flush"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// DB is an open engine: one pebble store holding every keyspace, any number
// of named bitslices, each behind its pending-changes overlay, and one
// flusher that makes all of them durable under a single watermark.
//
// All methods are safe for concurrent use.
//
// # Caveats
//
//   - kvbuf builds on Linux only: its files rely on fdatasync, flock and
//     sync_file_range (golang.org/x/sys/unix).
//   - The watermark is a receipt for whole ops only if the host keeps the
//     rules of "Ops and the watermark" in the package documentation. A
//     late write that arrives after the watermark passed its op is skipped
//     as a redelivered op (nil), so a host with concurrent writers that
//     skips BeginOp can lose such a write silently: begin ops under the
//     log lock.
//   - After a crash the store and the bitslices may hold writes of ops
//     above the watermark: of ops that had ended after an op still open,
//     and the first writes of an op a flush caught open (a flush persists
//     everything pending, and a watermark only up to the op before the
//     first open one). Replaying the host's log from Watermark()+1 rewrites
//     every one of them, as the writes are assignments, not increments;
//     the host must replay before it serves reads.
//   - Close leaves each bitslice file mapped until the garbage collector
//     finds no read of it in flight (package bitslice's Close leaves its
//     mappings in place, so that a lookup racing Close reads the file's
//     words with one load of its view): the file's inode, and its blocks
//     if it was removed, are released by the next collection after Close,
//     not by Close itself. A host that unmounts the engine's file system
//     after Close runs runtime.GC first (and again until /proc/self/maps
//     no longer lists the files, if reads may still be in flight).
//   - Close persists every pending write but covers in its watermark only
//     ops that had ended: an op begun and never ended (including the last
//     op of single calls without EndOp) is replayed after the reopen. Call
//     EndOp first to cover it.
//   - A host that never ends an op it began holds the watermark below it
//     (Metrics.OpenOps counts open ops).
//   - Concurrent ops that write the same key must write it in op order
//     (the host's row locks held across BeginOp and the writes): the
//     engine keeps the last write, and once the watermark covers both ops
//     no replay repairs a later op's write overwritten by an earlier op's.
//   - LogBeforeData caps the watermark, not the data: a flush persists
//     every pending write, so after a power loss the engine may hold writes
//     of ops the host's log lost. A host that must not see them writes an
//     op only once its log record is durable.
//   - A Batch's bit changes are applied one by one: a reader of a bitslice
//     concurrent with the batch may see part of them, before or after the
//     batch's KV changes (which every reader sees all or none of); a
//     Snapshot never sees part of a batch.
//   - A KV iterator reads its keyspace as of NewIter; for one instant across
//     keyspaces and bitslices, use a Snapshot.
//   - Bits.Count is exact for writes that have returned; a write in progress
//     may or may not be counted yet.
//   - If Close's final flush fails, Close still closes every file and
//     returns that error: the changes it could not flush are gone, and the
//     host replays them from Watermark as after a crash.
//   - After a failed write or sync of the store's write-ahead log every
//     flush fails with ErrSyncFailed (pebble cannot write that log again):
//     reads go on, pending changes stay pending, and Close reports the
//     error. Reopen to recover. A log write that finds the disk full is
//     not such a failure: it waits for space (see the next caveat).
//   - A full disk (errors match ErrDiskFull and syscall.ENOSPC): a flush
//     that cannot grow a bitslice fails and is retried; a store write of
//     pebble's log or MANIFEST waits and retries until space returns
//     (pebble cannot survive it failing), and meanwhile Flush returns
//     ErrDiskFull at once. Either way the watermark stays, every change
//     stays readable, writes go on until pending memory reaches
//     Options.MaxPendingBytes and then get ErrDiskFull, and once space
//     returns the same engine flushes everything (no reopen).
//     Metrics.DiskFull counts these, Metrics.DiskFullWaiting reports a
//     wait. A Checkpoint on a full disk fails and leaves nothing. Close on
//     a full disk does not wait for space to flush: its final flush fails
//     with ErrDiskFull, which Close returns (replay from Watermark, as
//     after a crash); but if one of pebble's background flushes or
//     compactions is writing the MANIFEST and found no space, Close waits
//     for space with it (pebble cannot abandon that write).
//   - A flush by ingestion (Options.IngestThreshold) writes a log record of its own when it overlaps
//     pebble's memtable: pebble ends the process if that write fails, as
//     it does for a failed MANIFEST write.
//   - The read tier (Options.ReadTierBytes) holds memory on top of
//     MaxPendingBytes: Metrics.ReadTierBytes.
//   - While a Snapshot is open, each flush keeps the bitslice words it
//     overwrites (memory proportional to the words changed) until the
//     snapshot is closed.
//   - A new keyspace is persisted with the next flush, together with its
//     first data.
//   - Without Options.WatchRetain the change feed (DB.Watch) holds its
//     changes in memory only: after a restart a watch may start only above
//     the watermark at Open (with Options.WatchFromOpen; without it, at
//     ops begun after the first Watch), and the host's replay from
//     Watermark()+1 delivers those ops again. Once recording begins, every
//     write copies its change into the feed until Close, watched or not.
//   - With Options.WatchRetain every flush also writes the retained
//     changes of the ops its watermark covers (store space and flush work
//     in proportion to the changes retained). Writes of op 0 are not
//     retained (they have no place in op order). The keyspaces and
//     bitslices retained are not recorded in the store: a watch from the
//     store is checked against the Options of this Open, so reopening with
//     a wider selection than an earlier session retained lets a watch of
//     the wider selection start at ops whose changes were not retained. A
//     session opened without WatchRetain leaves a gap: the next session
//     with it retains from its Open's watermark + 1 on. One flush's
//     retained changes are never trimmed by that flush, so a flush larger
//     than WatchRetention.MaxBytes passes the bound until the next one.
//   - Writes of op 0 have no place in the feed's op order: each is
//     delivered with op 0 after the numbered changes of the first resolved
//     mark cut after it, in record order. Two writes of one key in the
//     same op, from different goroutines, reach the feed in either order;
//     the engine keeps the one applied last, which may differ.
//   - An op held open while others write keeps the feed from resolving
//     past it: its later ops' changes wait in the feed, and if they
//     outgrow WatchBufferBytes plus MaxPendingBytes every watch ends with
//     ErrLagged.
//   - While an Iter of a keyspace (not of a Snapshot) is open, every
//     overwrite of a key pending in that keyspace takes new memory, counted
//     in PendingBytes (the iterator may need the older value). With none
//     open, a key overwritten again and again with values of up to 32
//     bytes keeps two or three records, rewritten in place.
type DB struct {
	closing atomic.Bool // set when Close begins; reads check it after reading

	opts    *Options // resolved
	bopts   *buffer.Options
	dir     *enginedir.Dir
	store   *storage.Store
	flusher *flush.Flusher
	acct    buffer.Account

	// targets is every overlay a flush freezes, copy-on-write under mu, so
	// that Freeze and PendingBytes read it without a lock.
	targets atomic.Pointer[targetSet]

	// engineID is stamped in every bitslice file the engine creates or
	// adopts; genBase + a flush generation's number is the write
	// generation recorded in the headers of the bitslices it writes (see
	// open.go: "Bitslice identity").
	engineID uint64
	genBase  uint64

	// writeMu is held by every generation Write (bitslice files and the
	// store commit) and by Checkpoint while it copies: the files do not
	// change under the copy.
	writeMu sync.Mutex

	mu        sync.Mutex // guards the fields below
	keyspaces map[string]*KV
	bits      map[string]*Bits
	catalog   enginedir.Catalog
	catDirty  bool // the catalog changed since the last freeze
	snaps     map[*Snapshot]struct{}
	// bitsAdded are bitslices to record in the bitslice catalog with the
	// next freeze (created, or adopted at Open), with their first entries.
	bitsAdded enginedir.BitsCatalog
	// catPending is catDirty || len(bitsAdded) > 0, stored under mu
	// wherever either changes (markCatalog, Freeze), so that admission
	// reads it without mu (target.PendingBytes, with nothing pending).
	catPending atomic.Bool

	// catW is the bitslice catalog as the latest generation Write recorded
	// it; only the flusher's writer goroutine (Write), and Open before it
	// starts, use it.
	catW enginedir.BitsCatalog

	// guard is the store's file system, guarded against a full disk
	// (diskfull.go); stallTo is the flusher it stalls, once there is one;
	// diskFull counts the episodes (Metrics.DiskFull).
	guard    *diskfull.FS
	lastLSM  atomic.Pointer[storage.LSMStats] // Metrics' last store reading (metrics.go)
	stallTo  atomic.Pointer[flush.Flusher]
	diskFull atomic.Int64
	// ingests counts generations flushed by ingestion (Metrics).
	ingests atomic.Int64
	// l0Waits and l0WaitNs count the ingestions that waited for the
	// store's compactions (storage.Store.WaitL0) and their total wait
	// (Metrics.StoreL0Waits, StoreL0WaitTime).
	l0Waits, l0WaitNs atomic.Int64
	// tier is the read tier (tier.go).
	tier readTier
	// pacer bounds the flusher's CPU while it writes tables (pace.go).
	pacer *flushPacer
	// share is the engine's part of Options.MemoryBudget (budget.go); nil
	// without one.
	share *budgetShare
	// feed is the change feed (watch.go).
	feed feed

	closeOnce sync.Once
	closeErr  error
}

type targetSet struct {
	kvs  []*KV
	bits []*Bits
}

// addTarget adds an overlay to the flush target list. db.mu held.
//
// It appends to the current set's slices instead of copying them (a copy
// made creating n keyspaces cost O(n^2)): an append may write past their
// length into a shared backing array, which no reader of the current set
// reads, and a slice is only ever extended this way (removal builds new
// ones), so nothing a reader can see changes.
func (db *DB) addTarget(k *KV, b *Bits) {
	cur := db.targets.Load()
	ts := &targetSet{kvs: cur.kvs, bits: cur.bits}
	if k != nil {
		ts.kvs = append(ts.kvs, k)
	}
	if b != nil {
		ts.bits = append(ts.bits, b)
	}
	db.targets.Store(ts)
}

// Dir returns the engine directory.
func (db *DB) Dir() string { return db.dir.Path() }

// Flush returns once every write that completed before the call is durable
// and the watermark covering it is persisted. Concurrent callers share
// physical flushes. It returns ctx.Err() if ctx ends first (the flush goes
// on for the others) and ErrClosed after Close has begun.
func (db *DB) Flush(ctx context.Context) error { return db.flusher.Flush(ctx) }

// FlushMemtables flushes like Flush, then writes pebble's memtables to
// sstables, so that recovery does not replay the write-ahead log (kvtool
// flush uses it). It blocks until pebble's flush is done.
func (db *DB) FlushMemtables(ctx context.Context) error {
	if err := db.flusher.Flush(ctx); err != nil {
		return err
	}
	t, err := db.flusher.Enter()
	if err != nil {
		return err
	}
	defer t.End()
	if err := db.store.Flush(); err != nil {
		return kverr.Errorf("flush memtables of %s: %w", db.Dir(), err)
	}
	return nil
}

// Compact compacts the store (every key, pending changes excepted: Flush
// first to include them) down to pebble's last level and waits for it, or
// for ctx to end. Reads and writes go on meanwhile. An operator's tool
// after a bulk load or a large drop; benchmarks use it so that the stores
// they compare have the same shape (see doc/workloads.md, W2). Errors:
// ErrClosed, ctx's error, the store's errors.
func (db *DB) Compact(ctx context.Context) error {
	t, err := db.flusher.Enter()
	if err != nil {
		return err
	}
	defer t.End()
	if err := db.store.Compact(ctx); err != nil {
		return kverr.Errorf("compact %s: %w", db.Dir(), err)
	}
	return nil
}

// Watermark returns the persisted watermark: every write of every op up to
// it is durable. After a crash, reopen and replay the host's log from the
// op after it.
func (db *DB) Watermark() uint64 { return db.flusher.Watermark() }

// Keyspaces returns the names of the engine's keyspaces, sorted.
func (db *DB) Keyspaces() []string {
	db.mu.Lock()
	defer db.mu.Unlock()
	return sortedNames(db.keyspaces)
}

// Bitslices returns the names of the engine's bitslices, sorted.
func (db *DB) Bitslices() []string {
	db.mu.Lock()
	defer db.mu.Unlock()
	return sortedNames(db.bits)
}

// sortedNames returns m's keys sorted, never nil (hosts print the list as
// JSON, where an engine without keyspaces shows [], not null).
func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Close refuses new writes, flushes and snapshots (ErrClosed), waits for
// in-flight ones, runs a final flush, stops the background flusher, closes
// open snapshots and every file. It is idempotent and safe to call from many
// goroutines: every call returns the first call's result (the final flush's
// error, or a close error). Done reports when it has finished. Iterators
// left open stop with ErrClosed.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		// Every bitslice's overlay closed first, then the flag: Bits.Get
		// reports ErrClosed from the overlay's view, not from the flag,
		// so a Get that starts after a read saw the flag must find its
		// view closed (B12). db.mu: no bitslice is added meanwhile
		// (handle checks the flag under it).
		db.mu.Lock()
		for _, b := range db.bits {
			b.ov.MarkClosed()
		}
		db.closing.Store(true)
		db.mu.Unlock()
		// A store write waiting for disk space fails now: the final flush
		// reports the full disk instead of waiting for space forever.
		db.guard.Abort()
		err := db.flusher.Close()
		if db.share != nil {
			// No write can begin now: the budget forgets the engine.
			db.share.detach()
		}
		// The final flush's steps are resolved; watches read what is
		// ready, then end with ErrClosed.
		db.feed.shutdown()
		db.mu.Lock()
		snaps := make([]*Snapshot, 0, len(db.snaps))
		for s := range db.snaps {
			snaps = append(snaps, s)
		}
		db.mu.Unlock()
		for _, s := range snaps {
			s.Close()
		}
		db.mu.Lock()
		for _, b := range db.bits {
			if err == nil {
				// A flush's header records the previous flush's
				// watermark (BitsGen.WriteLagged): after the final
				// flush, whose words are durable, the header records
				// its watermark too, for inspection (one header write).
				if serr := b.file.Sync(); serr != nil {
					err = kverr.Errorf("close bitslice %q: %w", b.name, serr)
				}
			}
			if cerr := b.file.Close(); err == nil && cerr != nil {
				err = kverr.Errorf("close bitslice %q: %w", b.name, cerr)
			}
			// The file's Close left its mappings in place for the reads
			// that loaded a view before MarkClosed; the overlay lets go of
			// them, so that a handle kept after Close does not keep the
			// file mapped (B12).
			b.ov.DropFile()
		}
		db.mu.Unlock()
		// The store's counters' last reading, which Metrics reports
		// after Close (not while its writes wait for space: see lsmStats).
		db.lsmStats(db.guard != nil && db.guard.Waiting() > 0)
		if cerr := db.store.Close(); err == nil && cerr != nil {
			err = kverr.Errorf("close store: %w", cerr)
		}
		if cerr := db.dir.Close(); err == nil && cerr != nil {
			err = kverr.Errorf("close %s: %w", db.Dir(), cerr)
		}
		db.closeErr = err
	})
	return db.closeErr
}

// Done returns a channel closed once Close has drained every in-flight
// operation and made the final flush; any number of goroutines may wait on
// it.
func (db *DB) Done() <-chan struct{} { return db.flusher.Done() }

// Wait blocks until Close has drained the engine (see Done), returning
// Close's final flush error, or until ctx ends. It does not start Close.
func (db *DB) Wait(ctx context.Context) error { return db.flusher.Wait(ctx) }

// closed returns ErrClosed once Close has begun: reads call it after reading.
func (db *DB) closed() error {
	if db.closing.Load() {
		return ErrClosed
	}
	return nil
}
