package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/workload"
	"github.com/kvbuf/kvbuf/storage"
)

// kvEntryBytes is the pending memory budgeted per KV entry of 8-byte keys
// and 16-byte values when sizing a pending limit (kvNeed): somewhat more
// than the engine takes today, so that a table that grows differently
// still fits.
const kvEntryBytes = 128

// kvNeed is the pending memory budgeted for n KV entries.
func kvNeed(n int) int64 { return int64(n) * kvEntryBytes }

// pendingOptions are the options of an engine whose changes must stay
// pending while a workload reads or flushes them: no interval flush (the
// read rows would otherwise read a store that a background flush filled
// at a moment that differs between runs), and a pending limit sized to the
// workload, never disabled, so that every write pays the admission
// accounting a user's writes pay. The limit is four times need (a flush
// starts at half of it), and never below the default limit. Setups check
// that no flush ran while they made changes pending (pendingGuard).
func pendingOptions(need int64) *kvbuf.Options {
	def := (&kvbuf.Options{}).EnsureDefaults().MaxPendingBytes
	return &kvbuf.Options{FlushInterval: -1, MaxPendingBytes: max(def, 4*need)}
}

// openEngine opens a kvbuf engine in dir/name (nil opts: defaults, as a
// user opens it) and registers its Close.
func openEngine(s *Suite, name string, opts *kvbuf.Options) (*kvbuf.DB, error) {
	db, err := kvbuf.Open(filepath.Join(s.dir, name), opts)
	if err != nil {
		return nil, err
	}
	s.onClose(db.Close)
	return db, nil
}

// openKV opens an engine and its keyspace name.
func openKV(s *Suite, dir, name string, opts *kvbuf.Options) (*kvbuf.DB, *kvbuf.KV, error) {
	db, err := openEngine(s, dir, opts)
	if err != nil {
		return nil, nil, err
	}
	kv, err := db.KV(name)
	return db, kv, err
}

// pendingGuard records the physical flush counts of dbs; the returned
// check fails if any of them flushed since. A setup that makes changes
// pending for a read workload calls it around the writes: the pending
// limit must not have flushed them (raise kvEntryBytes if it did).
func pendingGuard(dbs ...*kvbuf.DB) func() error {
	g0 := make([]int64, len(dbs))
	for i, db := range dbs {
		g0[i] = db.Metrics().Generations
	}
	return func() error {
		for i, db := range dbs {
			if m := db.Metrics(); m.Generations != g0[i] {
				return fmt.Errorf("%w: engine %s flushed %d times while changes were made pending (%d bytes pending): the pending limit is too small for the workload",
					ErrBadConfig, db.Dir(), m.Generations-g0[i], m.PendingBytes)
			}
		}
		return nil
	}
}

// openPebble opens a raw pebble database in dir/name configured like the
// engine's store (storage.PebbleOptions: the same format and logger) with
// a memtable of memtable bytes (0: the store's default, 4 MiB) and a block
// cache of cache bytes (baselineCache: the engine's cache plus its read
// tier), and registers its Close.
func openPebble(s *Suite, name string, memtable uint64, cache int64) (*pebble.DB, error) {
	pdb, err := pebble.Open(filepath.Join(s.dir, name), storage.PebbleOptions(&storage.Options{MemTableSize: memtable, CacheSize: cache}))
	if err != nil {
		return nil, err
	}
	s.onClose(pdb.Close)
	return pdb, nil
}

// createBits creates a raw bitslice file of n bits in dir/name and
// registers its Close.
func createBits(s *Suite, name string, n uint64) (*bitslice.File, error) {
	f, err := bitslice.Create(filepath.Join(s.dir, name), n)
	if err != nil {
		return nil, err
	}
	s.onClose(f.Close)
	return f, nil
}

// snapshotOpener returns, for a count n, a prepare step that opens
// snapshots of db until n are open (the snapshot rows of W1 and W2 open 1,
// then 16). The suite closes them.
func snapshotOpener(s *Suite, db *kvbuf.DB) func(n int) func(context.Context) error {
	var snaps []*kvbuf.Snapshot
	s.onClose(func() error {
		for _, sn := range snaps {
			sn.Close()
		}
		return nil
	})
	return func(n int) func(context.Context) error {
		return func(context.Context) error {
			for len(snaps) < n {
				sn, err := db.NewSnapshot()
				if err != nil {
					return err
				}
				snaps = append(snaps, sn)
			}
			return nil
		}
	}
}

// mixedSides is what W6 and W7 compare: an engine with one keyspace and
// one bitslice, both named ks, against raw pebble (opened like the
// engine's store) and a raw bitslice file of nbits.
type mixedSides struct {
	db   *kvbuf.DB
	kv   *kvbuf.KV
	bits *kvbuf.Bits
	pdb  *pebble.DB
	raw  *bitslice.File
}

func openMixedSides(s *Suite, ks string, nbits uint64, opts *kvbuf.Options) (m mixedSides, err error) {
	if m.db, m.kv, err = openKV(s, "engine", ks, opts); err != nil {
		return m, err
	}
	if m.bits, err = m.db.Bits(ks); err != nil {
		return m, err
	}
	if m.pdb, err = openPebble(s, "pebble", 0, baselineCache(opts)); err != nil {
		return m, err
	}
	m.raw, err = createBits(s, "raw.bits", nbits)
	return m, err
}

// The raw pebble baselines hold the bytes the engine's store holds: keys in
// the store's documented layout (storage package documentation, "Key
// layout": [0x02][keyspace ID, 4 bytes big-endian][user key]) under
// keyspace id 1, the id a new engine gives its first keyspace (kvtool
// inspect shows it). Only the layout matters for fairness: the same key
// lengths, the same shared prefix.
const (
	userKeyTag  = 0x02
	rawKeyspace = 1
)

// storedKey appends the pebble key under which the store layout keeps
// user key k.
func storedKey(dst, k []byte) []byte {
	dst = append(dst, userKeyTag)
	dst = binary.BigEndian.AppendUint32(dst, rawKeyspace)
	return append(dst, k...)
}

// storedPrefix is the length of storedKey's prefix.
const storedPrefix = 5

// keyspaceEnd is the first stored key after the raw keyspace.
func keyspaceEnd() []byte {
	return binary.BigEndian.AppendUint32([]byte{userKeyTag}, rawKeyspace+1)
}

// u64Key encodes key number k as an 8-byte big-endian key.
func u64Key(dst []byte, k uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, k)
}

// flatKeys holds fixed-size keys in one allocation.
type flatKeys struct {
	b    []byte
	size int
}

func newFlatKeys(size, n int) flatKeys { return flatKeys{make([]byte, 0, size*n), size} }

// u64Keys returns the 8-byte keys of ks.
func u64Keys(ks []uint64) flatKeys {
	f := newFlatKeys(8, len(ks))
	for _, k := range ks {
		f.b = u64Key(f.b, k)
	}
	return f
}

func (f flatKeys) len() int { return len(f.b) / f.size }

func (f flatKeys) at(i int) []byte { return f.b[i*f.size : (i+1)*f.size : (i+1)*f.size] }

// slices returns a slice header per key (for GetMany), sharing f's memory.
func (f flatKeys) slices() [][]byte {
	out := make([][]byte, f.len())
	for i := range out {
		out[i] = f.at(i)
	}
	return out
}

// stored returns f's keys in the store layout.
func (f flatKeys) stored() flatKeys {
	o := newFlatKeys(f.size+storedPrefix, f.len())
	for i := range f.len() {
		o.b = storedKey(o.b, f.at(i))
	}
	return o
}

// distinct draws n distinct numbers uniformly from [0, space), in draw
// order (n <= space/2, so rejection stays cheap).
func distinct(rng *rand.Rand, n int, space uint64) []uint64 {
	seen := make([]uint64, (space+63)/64)
	out := make([]uint64, 0, n)
	for len(out) < n {
		k := rng.Uint64N(space)
		if seen[k/64]&(1<<(k%64)) != 0 {
			continue
		}
		seen[k/64] |= 1 << (k % 64)
		out = append(out, k)
	}
	return out
}

// checkEvery is how often long setup loops look at their context.
const checkEvery = 1 << 12

// cancelled returns ctx's error every checkEvery iterations (i is the
// iteration), so that an interrupted kvtool bench stops setting up.
func cancelled(ctx context.Context, i int) error {
	if i%checkEvery != 0 {
		return nil
	}
	return ctx.Err()
}

// quiesceWait bounds how long a quiesce or settle step waits for one
// store's background work (workload.WaitIdle); past it the step returns
// workload.ErrStillBusy and the round's disk figure is left out
// (Workload.measure).
const quiesceWait = 30 * time.Second

// pebbleBusy reports whether pdb has a flush or compaction in progress.
func pebbleBusy(pdb *pebble.DB) bool {
	m := pdb.Metrics()
	return m.Compact.NumInProgress > 0 || m.Flush.NumInProgress > 0
}

// settleAll returns a quiesce step that waits until no engine's store and
// no raw pebble database has a flush or compaction in progress, on
// workload.IdleLooks looks in a row (workload.WaitIdle), without flushing
// anything: pending changes stay pending. A store still busy after
// quiesceWait makes it return workload.ErrStillBusy, once every store has
// been waited for (waitIdleAll).
func settleAll(dbs []*kvbuf.DB, pdbs ...*pebble.DB) func(context.Context) error {
	busy := busyReports(dbs, pdbs)
	return func(ctx context.Context) error { return waitIdleAll(ctx, busy) }
}

// busyReports is, for each engine's store and then each raw pebble
// database, a report of whether it has a flush or compaction in progress.
func busyReports(dbs []*kvbuf.DB, pdbs []*pebble.DB) []func() bool {
	var busy []func() bool
	for _, db := range dbs {
		busy = append(busy, func() bool { return db.Metrics().StoreJobs > 0 })
	}
	for _, pdb := range pdbs {
		busy = append(busy, func() bool { return pebbleBusy(pdb) })
	}
	return busy
}

// waitIdleAll waits (workload.WaitIdle, up to quiesceWait each) until each
// of busy reports false, in order. A store still busy past quiesceWait
// does not stop the others' waits: waitIdleAll then returns
// workload.ErrStillBusy after the last; any other error at once. When
// every store went idle it makes closing passes, since a store found idle
// early may have been started again (an engine's background flusher) while
// a later one was waited for: each pass waits (workload.WaitIdle, its
// workload.IdleLooks looks: one idle look can fall in the moment between a
// compaction and the one pebble schedules after it) for every store in
// turn, until a pass finds every look idle, or quiesceWait after the first
// closing pass began (workload.ErrStillBusy). So a step takes at most
// quiesceWait per store and one more for the closing passes, plus polling.
func waitIdleAll(ctx context.Context, busy []func() bool) error {
	var still error
	for _, f := range busy {
		err := workload.WaitIdle(ctx, quiesceWait, f)
		if errors.Is(err, workload.ErrStillBusy) {
			still = err
		} else if err != nil {
			return err
		}
	}
	if still != nil {
		return still
	}
	end := time.Now().Add(quiesceWait)
	for {
		waited := false
		for _, f := range busy {
			left := time.Until(end)
			if left <= 0 {
				return workload.ErrStillBusy
			}
			saw := false
			look := func() bool {
				b := f()
				saw = saw || b
				return b
			}
			if err := workload.WaitIdle(ctx, left, look); err != nil {
				return err
			}
			waited = waited || saw
		}
		if !waited {
			return nil
		}
	}
}

// quiesceAll returns a quiesce step for a suite's engines and raw pebble
// databases: the memtables of both are flushed to sstables, then settleAll
// waits for their flushes and compactions, so that no side's reads are
// timed while its store compacts.
func quiesceAll(dbs []*kvbuf.DB, pdbs ...*pebble.DB) func(context.Context) error {
	settle := settleAll(dbs, pdbs...)
	return func(ctx context.Context) error {
		for _, db := range dbs {
			if err := db.FlushMemtables(ctx); err != nil {
				return err
			}
		}
		for _, pdb := range pdbs {
			if err := pdb.Flush(); err != nil {
				return err
			}
		}
		return settle(ctx)
	}
}

// settleLogMin is the least live write-ahead log data (what a store's
// memtables hold, not yet in an sstable) for which settleRounds flushes a
// store's memtables: 1/64 of pebble's default 4 MiB memtable, the
// engine's store's.
const settleLogMin = 64 << 10

// settleRounds returns the settle step (Workload.settle) of W6 and W8:
// every engine's pending changes made durable (DB.Flush); then the
// memtables of every engine's store and every raw pebble database whose
// write-ahead log holds at least settleLogMin bytes flushed to sstables;
// then settleAll. A memtable holding less (an engine's flush receipts; a
// database that logs nothing, having flushed its own memtable) is left
// for the next quiesce step, off the count: a real run flushes it once
// per memtable fill, its flush and the compaction that follows shared by
// every write that filled it, and forcing it every round would charge the
// round a whole flush and compaction (a compaction rewrites the store's
// tables it overlaps, whatever their size) for a few bytes.
// doc/workloads.md, "Disk writes per user byte".
func settleRounds(dbs []*kvbuf.DB, pdbs ...*pebble.DB) func(context.Context) error {
	settle := settleAll(dbs, pdbs...)
	return func(ctx context.Context) error {
		for _, db := range dbs {
			if err := db.Flush(ctx); err != nil {
				return err
			}
			if db.Metrics().StoreLogBytes < settleLogMin {
				continue
			}
			if err := db.FlushMemtables(ctx); err != nil {
				return err
			}
		}
		for _, pdb := range pdbs {
			if pdb.Metrics().WAL.Size < settleLogMin {
				continue
			}
			if err := pdb.Flush(); err != nil {
				return err
			}
		}
		return settle(ctx)
	}
}

// settleStores returns a settle step (Workload.settle) for engines and
// storage.Stores that no quiesce step covers: every engine's pending
// changes and store memtables, and every store's memtables, flushed to
// sstables, then their flushes and compactions waited out as settleAll
// waits (workload.ErrStillBusy past quiesceWait).
func settleStores(dbs []*kvbuf.DB, stores []*storage.Store) func(context.Context) error {
	busy := busyReports(dbs, nil)
	for _, st := range stores {
		busy = append(busy, func() bool { return st.BackgroundJobs() > 0 })
	}
	return func(ctx context.Context) error {
		for _, db := range dbs {
			if err := db.FlushMemtables(ctx); err != nil {
				return err
			}
		}
		for _, st := range stores {
			if err := st.Flush(); err != nil {
				return err
			}
		}
		return waitIdleAll(ctx, busy)
	}
}

// liveHeap returns the live heap in bytes after two garbage collections.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// perEntry is the heap growth from h0 to h1 divided by n entries.
func perEntry(h0, h1 uint64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return (float64(h1) - float64(h0)) / float64(n)
}

// notFound reports whether err is a lookup miss of kvbuf or pebble.
func notFound(err error) bool {
	return err == kvbuf.ErrNotFound || errors.Is(err, pebble.ErrNotFound) || errors.Is(err, kvbuf.ErrNotFound)
}

// pebbleGet reads stored key k from g, appending a found value to buf.
func pebbleGet(g pebble.Reader, buf, k []byte) ([]byte, bool, error) {
	v, cl, err := g.Get(k)
	if err != nil {
		if notFound(err) {
			return buf, false, nil
		}
		return buf, false, err
	}
	buf = append(buf[:0], v...)
	return buf, true, cl.Close()
}
