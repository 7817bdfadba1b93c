package buffer

import (
	"context"
	"encoding/binary"
	"errors"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kvbuf/kvbuf/internal/invariants"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/internal/yield"
	"github.com/kvbuf/kvbuf/storage"
)

// Account is what the overlays of one engine share: the running total of
// the bytes held by their pending changes, which admission reads as one
// number, and the sequencer that numbers their KV changes and publishes
// them (see Seq). The zero value is ready to use.
type Account struct {
	n   atomic.Int64
	seq Seq
}

// Bytes returns the total.
func (a *Account) Bytes() int64 { return a.n.Load() }

// Counter returns the counter that holds the total, for callers that load
// it in place of Bytes (the engine's admission, flush.PendingCounter); only
// the overlays add to it.
func (a *Account) Counter() *atomic.Int64 { return &a.n }

// Seq returns the sequencer of the overlays sharing the account.
func (a *Account) Seq() *Seq { return &a.seq }

func (a *Account) add(n int64) {
	if a != nil && n != 0 {
		a.n.Add(n)
	}
}

// kvReader is what a KV reads from: the store, or a store snapshot.
type kvReader interface {
	Get(ks storage.KeyspaceID, key []byte) ([]byte, error)
	GetAppend(dst []byte, ks storage.KeyspaceID, key []byte) ([]byte, error)
	NewIter(ks storage.KeyspaceID, lower, upper []byte) (*storage.Iter, error)
}

// KV is the pending-changes overlay of one keyspace of a storage.Store: Put,
// Delete and DeleteRange land in memory and are visible to reads at once;
// the flush protocol (Freeze, KVGen.AddTo, Release) moves them to the store.
//
// Writes (Put, Delete, DeleteRange and their At forms) must not run
// concurrently with Freeze or Snapshot: the engine admits writes under the
// shared side of its write barrier and calls those two with the barrier
// held exclusively. Every other combination is safe for concurrent use.
//
// # Sequence numbers and batches
//
// Every change carries a sequence number from the Seq of the overlay's
// Account (shared by the overlays of one engine). A single Put, Delete or
// DeleteRange reserves one and publishes it before it returns; a batch
// reserves a range (Seq.Reserve), applies its changes with ApplyAt and
// publishes the range at once (SeqRange.Publish).
// Reads ignore changes numbered above the visible sequence number, so a
// reader sees all of a batch or none of it, and a change never replaces one
// with a higher number, so concurrent batches over the same keys end as
// their serial order by sequence number leaves them.
//
// # Read path
//
// The overlay publishes one immutable view (the active table and the sealed
// tables, newest first) through one atomic pointer. A point read probes the
// view's tables newest first at one visible sequence number, re-loads the
// view and retries if it changed (a table of the old view may have been
// recycled under the probe), then falls through to the store; it takes no
// lock and writes no shared memory. Which it loads first, the visible
// number or the view, depends on the read (publication order 7 in
// protocol.go): Get, GetAppend and Has load the visible number, then the
// view; GetMany loads the view, then the visible number; NewIter and
// Snapshot pin the view's tables (under the lock Freeze and Release take),
// then load the visible number.
type KV struct {
	view atomic.Pointer[kvView]
	st   kvReader
	ks   storage.KeyspaceID
	acct *Account
	seq  *Seq
	seed uint64 // hash seed of every table of the overlay
	opt  resolved

	// orderOf is a test hook: when set, iterators take each table's key
	// order from it instead of table.orderFor (resortOrder in
	// kv_order_resort_test.go, the design orderFor's runs were measured
	// against). Nil outside tests.
	orderOf func(*table) (*order, []sortEnt)

	dropped atomic.Bool // set by Drop, under the active table's locks

	// vmu serialises every change of the view (Freeze, Release, Drop,
	// Snapshot) and table pinning.
	vmu  sync.Mutex
	pool tablePool
	// lastCap is the capacity of recently released tables, the size asked of
	// the pool for the next active table. Written by Release, read by
	// whoever makes an active table (Freeze, Snapshot).
	lastCap atomic.Int64
	// lastKeys is the number of keys of the last active table frozen: a
	// fresh active table (none in the pool) starts with slot arrays for as
	// many (under vmu; see newActive).
	lastKeys int64
}

// kvView is immutable once published.
type kvView struct {
	active *table
	sealed []*table // newest first; frozen generations are at the end
	// retained are tables of flushed generations kept readable (the read
	// tier, kv_tier.go), newest first: probed after every pending table
	// and before the store.
	retained []*table
}

// NewKV returns an empty overlay of keyspace ks of st. acct, if not nil,
// receives the overlay's pending bytes and numbers its changes; overlays
// whose changes may be batched together must share it. With a nil acct the
// overlay numbers its changes alone.
func NewKV(st *storage.Store, ks storage.KeyspaceID, acct *Account, opts *Options) (*KV, error) {
	r, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	var rd kvReader
	if st != nil {
		rd = st
	}
	return newKV(rd, ks, acct, r), nil
}

func newKV(st kvReader, ks storage.KeyspaceID, acct *Account, r resolved) *KV {
	kv := &KV{st: st, ks: ks, acct: acct, opt: r, seed: rand.Uint64()}
	if acct != nil {
		kv.seq = &acct.seq
	} else {
		kv.seq = new(Seq)
	}
	kv.pool.limit = r.poolBytes
	t := newTable(r.shards, kv.seed)
	t.base.Store(kv.seq.Last() + 1)
	kv.view.Store(&kvView{active: t})
	return kv
}

func (kv *KV) checkKey(key []byte) error {
	switch {
	case len(key) == 0:
		return kverr.ErrEmptyKey
	case len(key) > kv.opt.maxKey:
		return kverr.Errorf("key of %d bytes (max %d): %w", len(key), kv.opt.maxKey, kverr.ErrKeyTooLarge)
	}
	return nil
}

// CheckPut reports the error Put would return for key and value, without
// writing (batches validate every change before applying any).
func (kv *KV) CheckPut(key, value []byte) error {
	if err := kv.checkKey(key); err != nil {
		return err
	}
	if len(value) > kv.opt.maxVal {
		return kverr.Errorf("value of %d bytes (max %d): %w", len(value), kv.opt.maxVal, kverr.ErrValueTooLarge)
	}
	return nil
}

// CheckKey reports the error Delete or Get would return for key.
func (kv *KV) CheckKey(key []byte) error { return kv.checkKey(key) }

// CheckRange reports the error DeleteRange or NewIter would return for the
// bounds (nil = open).
func CheckRange(lower, upper []byte) error {
	if lower != nil && upper != nil && string(lower) > string(upper) {
		return kverr.Errorf("[%q, %q): %w", trunc(lower), trunc(upper), kverr.ErrBadRange)
	}
	return nil
}

func trunc(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// Put records key = value (both copied) as one change: it is visible to
// every read once Put returns. key and value must pass CheckPut: the
// engine checks them once, before admission, so that a bad key never
// begins an op, and Put does not check them again (the invariants build
// does, and panics). Errors: ErrDropped (nothing recorded).
func (kv *KV) Put(key, value []byte) error {
	if invariants.Enabled {
		err := kv.CheckPut(key, value)
		invariants.Check(err == nil, "buffer: Put of an unchecked key or value: %v", err)
	}
	r := kv.seq.Reserve(1)
	defer r.Publish()
	return kv.write(r.Next(), key, value, false)
}

// Delete records a tombstone for key: reads report kverr.ErrNotFound and
// scans skip it until a later Put; the flush deletes the stored key. key
// must pass CheckKey, as for Put (the engine checks it once; the
// invariants build checks it again, and panics).
func (kv *KV) Delete(key []byte) error {
	if invariants.Enabled {
		err := kv.checkKey(key)
		invariants.Check(err == nil, "buffer: Delete of an unchecked key: %v", err)
	}
	r := kv.seq.Reserve(1)
	defer r.Publish()
	return kv.write(r.Next(), key, nil, true)
}

// ChangeKind is the kind of a Change.
type ChangeKind uint8

// The kinds of Change.
const (
	ChangePut         ChangeKind = iota // Key = Value
	ChangeDelete                        // a tombstone for Key
	ChangeDeleteRange                   // a range tombstone over [Key, Value) (nil: open)
)

// Change is one change of a batch, for KV.ApplyAt.
type Change struct {
	Kind ChangeKind
	// Key is the key, or a range delete's lower bound (nil: open).
	Key []byte
	// Value is the value, or a range delete's upper bound (nil: open).
	Value []byte
}

// applyChunk is the number of changes ApplyAt prepares at once.
const applyChunk = 64

// ApplyAt applies cs as the changes numbered first, first+1, ... of a batch
// (the numbers come from a SeqRange of the overlay's Seq, not yet published; see
// SeqRange.Take): as Put, Delete and DeleteRange would with those numbers,
// but grouped by shard, each shard locked once for all of its changes (a mutex is a
// memory fence), and every key's lines loaded before any is stored, so
// that the cache misses of a shard's new keys overlap instead of each
// waiting for the last (an atomic store waits for every earlier store).
// The order of the changes does not
// matter: each carries its number. Every change must pass its check
// (CheckPut, CheckKey or CheckRange by its kind): the engine checks each
// once, when the batch is built, and ApplyAt does not check again (the
// invariants build does, and panics, as for Put). Errors: ErrDropped (the
// changes not yet applied are dropped, as if the batch had come before
// Drop).
func (kv *KV) ApplyAt(first uint64, cs []Change) error {
	if invariants.Enabled {
		for i := range cs {
			err := kv.checkChange(&cs[i])
			invariants.Check(err == nil, "buffer: ApplyAt of an unchecked change %d: %v", i, err)
		}
	}
	var (
		pks   [applyChunk]probeKey
		order [applyChunk]uint8
		count [maxShards + 1]uint8
	)
	for base := 0; base < len(cs); base += applyChunk {
		part := cs[base:min(base+applyChunk, len(cs))]
		// Count sort of the chunk's point changes by shard.
		clear(count[:])
		smask := uint64(kv.opt.shards - 1)
		for i := range part {
			if part[i].Kind == ChangeDeleteRange {
				if err := kv.deleteRange(first+uint64(base+i), part[i].Key, part[i].Value); err != nil {
					return err
				}
				continue
			}
			k := part[i].Key
			pks[i] = makeProbeKey(unsafe.String(unsafe.SliceData(k), len(k)), kv.seed)
			count[pks[i].h>>shardShift&smask+1]++
		}
		for s := 1; s <= kv.opt.shards; s++ {
			count[s] += count[s-1]
		}
		var n uint8
		for i := range part {
			if part[i].Kind != ChangeDeleteRange {
				s := pks[i].h >> shardShift & smask
				order[count[s]] = uint8(i)
				count[s]++
				n++
			}
		}
		for j := 0; j < int(n); {
			// order[j:e] is one shard's changes.
			s := pks[order[j]].h >> shardShift & smask
			e := j + 1
			for e < int(n) && pks[order[e]].h>>shardShift&smask == s {
				e++
			}
			if err := kv.writeShard(first+uint64(base), part, pks[:], order[j:e]); err != nil {
				return err
			}
			j = e
		}
	}
	return nil
}

// checkChange reports the error of c's check by its kind (CheckPut,
// CheckKey or CheckRange; an unknown kind is ErrBadRange).
func (kv *KV) checkChange(c *Change) error {
	switch c.Kind {
	case ChangePut:
		return kv.CheckPut(c.Key, c.Value)
	case ChangeDelete:
		return kv.checkKey(c.Key)
	case ChangeDeleteRange:
		return CheckRange(c.Key, c.Value)
	}
	return kverr.Errorf("change kind %d: %w", c.Kind, kverr.ErrBadRange)
}

// writeShard stores the changes part[i] (probe keys pks[i]) for i in idx,
// all of one shard, numbered first+i, under one lock of the shard.
func (kv *KV) writeShard(first uint64, part []Change, pks []probeKey, idx []uint8) error {
	for spins := 0; ; spins++ {
		t := kv.view.Load().active
		sh := t.shardFor(pks[idx[0]].h)
		if sh != nil {
			sh.mu.Lock()
			if !sh.sealed {
				before := sh.bytes.Load()
				if a := sh.arr.Load(); a != nil && len(idx) > 1 {
					// Every key's lines first: their misses overlap
					// here, not one by one in the atomic stores.
					for _, i := range idx {
						a.touch(pks[i].h)
					}
				}
				for _, i := range idx {
					sh.setLocked(t, &pks[i], part[i].Value, part[i].Kind == ChangeDelete, first+uint64(i), kv.seq)
				}
				added := sh.bytes.Load() - before
				sh.mu.Unlock()
				kv.acct.add(added)
				return nil
			}
			sh.mu.Unlock()
		}
		if err := kv.sealedRetry(spins); err != nil {
			return err
		}
	}
}

// sealedRetry is what a writer that found the active table sealed does
// before it loads the view again: ErrDropped if the keyspace is dropped
// (no new table will come), else yield now and then (a freeze is
// publishing the next table).
func (kv *KV) sealedRetry(spins int) error {
	if kv.dropped.Load() {
		return kverr.ErrDropped
	}
	if invariants.Enabled {
		invariants.Check(spins < 1<<20, "buffer: a write spun %d times on a sealed table", spins)
	}
	if spins > 16 {
		runtime.Gosched()
	}
	return nil
}

// write stores change seq in the active table, retrying on the table that
// replaced it if Drop sealed it meanwhile.
func (kv *KV) write(seq uint64, key, value []byte, del bool) error {
	k := unsafe.String(unsafe.SliceData(key), len(key))
	pk := makeProbeKey(k, kv.seed)
	for spins := 0; ; spins++ {
		ok, added := kv.view.Load().active.set(&pk, value, del, seq, kv.seq)
		if ok {
			kv.acct.add(added)
			return nil
		}
		// A sealed active table: a recycled one not yet unsealed, or
		// one Drop sealed (it publishes its table before unlocking).
		if err := kv.sealedRetry(spins); err != nil {
			return err
		}
	}
}

// DeleteRange hides every key k with lower <= k < upper (nil = open on that
// side), pending or stored, until later writes, in O(1): one range
// tombstone, numbered like any change, in the active table.
func (kv *KV) DeleteRange(lower, upper []byte) error {
	if err := CheckRange(lower, upper); err != nil {
		return err
	}
	r := kv.seq.Reserve(1)
	defer r.Publish()
	return kv.deleteRange(r.Next(), lower, upper)
}

func (kv *KV) deleteRange(seq uint64, lower, upper []byte) error {
	lo, hi, open := string(lower), string(upper), upper == nil
	if !open && lo == hi {
		return nil
	}
	for spins := 0; ; spins++ {
		t := kv.view.Load().active
		t.mu.Lock()
		if !t.sealed {
			if invariants.Enabled {
				invariants.Check(seq >= t.base.Load(), "buffer: range delete %d in a table based at %d", seq, t.base.Load())
			}
			t.rdel.Store(t.rdel.Load().with(lo, hi, open, seq))
			n := spanBytes(lo, hi)
			t.rbytes.Add(n) // under t.mu: a freeze seals after it
			t.mu.Unlock()
			kv.acct.add(n)
			return nil
		}
		t.mu.Unlock()
		if err := kv.sealedRetry(spins); err != nil {
			return err
		}
	}
}

// Drop deletes the whole keyspace and refuses every later write with
// ErrDropped: it seals the active table and publishes a new one that holds a
// range tombstone over every key and never accepts a write. The next Freeze
// flushes it (the store's keys are deleted by one range deletion). A write
// racing Drop either lands before the tombstone (and is deleted by it) or
// fails. Reads after Drop see an empty keyspace.
func (kv *KV) Drop() {
	for spins := 0; ; spins++ {
		a := kv.view.Load().active
		ss := a.lockAll()
		if a.sealed {
			a.unlockAll(ss)
			if kv.dropped.Load() {
				return
			}
			if spins > 16 {
				runtime.Gosched()
			}
			continue // a recycled table not yet unsealed
		}
		// The number is taken with every lock of the active table held:
		// a write numbered below it that lands later fails, one that
		// landed is older; a write numbered above cannot land in a.
		r := kv.seq.Reserve(1)
		seq := r.Next()
		kv.dropped.Store(true)
		next := newTable(1, kv.seed)
		next.sealed = true // for good: writers see dropped and fail
		next.base.Store(seq)
		next.rdel.Store((*spans)(nil).with("", "", true, seq))
		a.sealLocked(ss)
		kv.vmu.Lock()
		cur := kv.view.Load()
		invariants.Check(cur.active == a, "buffer: active table changed under its shard locks")
		// Publication order 9: a new view, under vmu.
		kv.view.Store(&kvView{active: next, sealed: prepend(a, cur.sealed), retained: cur.retained})
		kv.vmu.Unlock()
		a.unlockAll(ss)
		r.Publish()
		return
	}
}

// Dropped reports whether Drop was called.
func (kv *KV) Dropped() bool { return kv.dropped.Load() }

func prepend(t *table, ts []*table) []*table {
	out := make([]*table, 0, len(ts)+1)
	return append(append(out, t), ts...)
}

// newActive returns an empty, sealed table for the next active one: recycled
// when possible. The caller sets its base and unseals it once it is
// published.
//
// A fresh table's slot arrays are sized for the last frozen table's keys,
// so that a generation as large as the last one never grows: with half as
// many (the sizing before), a 1M-key generation grew each array twice
// (x1.5 a step), moving 1.25 keys per key put: 14% of the put path's CPU
// in W6, 9% of the engine's with the Flush (BenchmarkFlushW6Put,
// scripts/w6-ab.sh; doc/design.md, "The put path and the flush's CPU"). The arrays are made, and counted in the pending
// memory, only when a shard takes its first key, and they are at most
// 1/32 larger than the last table's, which the pending budget held a
// moment ago. The 1/32 more is for the shards that take more than their share: with keys
// spread by hash, a shard of 16k keys or more is within 3% of the mean at
// three standard deviations.
func (kv *KV) newActive() *table {
	if t := kv.pool.get(kv.lastCap.Load()); t != nil {
		return t
	}
	t := newTable(kv.opt.shards, kv.seed)
	n := kv.lastKeys / int64(kv.opt.shards)
	t.groups = groupsFor(int(n + n/32))
	t.sealed = true
	return t
}

// getAppend probes the view's tables for k (hash h, slot word kw), newest
// first, at visible sequence number vis, appending a found value to dst.
func (v *kvView) getAppend(dst []byte, k string, h, kw, vis uint64) ([]byte, uint8) {
	dst, kind := v.active.getAppend(dst, k, h, kw, vis)
	for i := 0; kind == probeAbsent && i < len(v.sealed); i++ {
		dst, kind = v.sealed[i].getAppend(dst, k, h, kw, vis)
	}
	for i := 0; kind == probeAbsent && i < len(v.retained); i++ {
		dst, kind = v.retained[i].tierGetAppend(dst, k, h, kw, vis) // tier rules T4, T5
	}
	return dst, kind
}

// Get returns a copy of key's value: the newest pending change, else the
// stored value. Errors: kverr.ErrNotFound (absent, deleted or range
// deleted), ErrEmptyKey, ErrKeyTooLarge, the store's errors.
func (kv *KV) Get(key []byte) ([]byte, error) { return ownCopy(kv.GetAppend(nil, key)) }

// ownCopy is Get's result from GetAppend(nil, key): a value found empty is
// an empty, non-nil slice.
func ownCopy(v []byte, err error) ([]byte, error) {
	if err == nil && v == nil {
		v = []byte{}
	}
	return v, err
}

// GetAppend is Get appending the value to dst: with enough capacity in dst it
// does not allocate. On error it returns dst unchanged.
func (kv *KV) GetAppend(dst, key []byte) ([]byte, error) {
	if len(key) == 0 || len(key) > kv.opt.maxKey {
		return dst, kv.checkKey(key)
	}
	k := unsafe.String(unsafe.SliceData(key), len(key))
	var h, kw uint64
	if len(key) == 8 {
		kw = binary.LittleEndian.Uint64(key) // keyHash, written out
		h = mixWords(kw, kw, 8, kv.seed)
	} else {
		h, kw = keyHashSlow(k, kv.seed)
	}
	for spins := 0; ; spins++ {
		// The visible number, then the view (publication order 7a):
		// every change numbered at or below vis was stored before vis
		// was published, so it is in the tables of any view loaded
		// after, or in the store if its table was released since.
		vis := kv.seq.visible.Load()
		yield.Point() // stress builds: between the loads of order 7a
		v := kv.view.Load()
		yield.Point() // a release may recycle v's tables from here on
		out, kind := v.active.getAppend(dst, k, h, kw, vis)
		for i := 0; kind == probeAbsent && i < len(v.sealed); i++ {
			out, kind = v.sealed[i].getAppend(dst, k, h, kw, vis)
		}
		// Tier rule T4: the read tier after every pending table, before
		// the store, under the same re-validation.
		for i := 0; kind == probeAbsent && i < len(v.retained); i++ {
			out, kind = v.retained[i].tierGetAppend(dst, k, h, kw, vis) // tier rule T5
		}
		yield.Point()
		if kv.view.Load() != v || kind == probeRetry {
			// A released table (the view changed), or a record
			// rewritten under the read (see shard.reuse).
			if invariants.Enabled {
				invariants.Check(spins < 1<<20, "buffer: lookup retried %d times", spins)
			}
			if spins > 16 {
				runtime.Gosched()
			}
			continue
		}
		switch kind {
		case probeValue:
			return out, nil
		case probeDeleted:
			return dst, kverr.ErrNotFound
		}
		if kv.st == nil {
			return dst, kverr.ErrClosed
		}
		yield.Point() // the view re-validated, the store not yet read
		return kv.st.GetAppend(dst, kv.ks, key)
	}
}

// manyBatch is the number of keys GetMany resolves per pass: their control
// words, slots and version records are loaded in separate loops so that the
// cache misses of independent keys overlap.
const manyBatch = 32

// manyAttempts is the number of optimistic passes GetMany makes before it
// holds off flushes to finish.
const manyAttempts = 3

// GetMany looks up every key of keys. The value of each key found is
// appended to buf and vals[i] set to it (a subslice of buf at the time it was
// appended, capped so that appending to it cannot overwrite a neighbour);
// vals[i] is nil for a key that is absent or deleted. It returns the extended
// buffer. With enough capacity in buf it allocates nothing. len(vals) must be
// at least len(keys).
//
// It returns the values of one instant between the call and its return: it
// reads the pending changes at one visible sequence number and retries if a
// flush moved changes to the store while it read (after a few retries it
// holds flushes off instead), so it never returns part of a batch. Errors:
// ErrEmptyKey, ErrKeyTooLarge (checked for every key before any lookup), the
// store's errors (vals of keys not yet read are left nil).
func (kv *KV) GetMany(keys [][]byte, vals [][]byte, buf []byte) ([]byte, error) {
	if err := kv.checkMany(keys, vals); err != nil {
		return buf, err
	}
	start := len(buf)
	for attempt := 0; ; attempt++ {
		hold := attempt >= manyAttempts
		if hold {
			// Freeze and Release take vmu: the view, and the store
			// beneath it, stay as they are until we are done.
			kv.vmu.Lock()
		}
		// The view first, then the visible number (publication order
		// 7b). Every table sealed in
		// v was frozen before v was published, with no write in flight
		// and every change published: its numbers are all at or below
		// vis, and so is everything a flush may write into the store
		// while we read. (In the other order a freeze between the two
		// loads sealed changes numbered above vis into a table of v;
		// its flush could then commit them to the store under a key
		// whose pending versions we skip as too new, and the store
		// answered with part of a later batch: TestBatchesSerialOrder
		// caught it.)
		v := kv.view.Load()
		yield.Point() // stress builds: between the loads of order 7b
		vis := kv.seq.Visible()
		var err error
		buf, err = getMany(keys, vals, buf[:start], kv.seed, v, vis, kv.st, kv.ks)
		if hold {
			kv.vmu.Unlock()
			if err == errReadAgain {
				continue // a record rewritten under the read: no flush is to blame
			}
			return buf, err
		}
		if err == errReadAgain {
			continue
		}
		yield.Point()
		// Unchanged view: no table was released (so none recycled under
		// the probes) and none frozen (so the active table of v holds
		// every change numbered above vis, and the store none: a frozen
		// table is sealed, and sealing publishes a new view).
		if kv.view.Load() == v {
			return buf, err
		}
	}
}

// checkMany checks GetMany's arguments.
func (kv *KV) checkMany(keys, vals [][]byte) error {
	if len(vals) < len(keys) {
		return kverr.Errorf("GetMany: %d keys but room for %d values: %w", len(keys), len(vals), kverr.ErrBadRange)
	}
	for _, k := range keys {
		if len(k) == 0 || len(k) > kv.opt.maxKey {
			return kv.checkKey(k)
		}
	}
	return nil
}

// errReadAgain is getMany's answer when a key's record was rewritten while
// it read it (see shard.reuse): GetMany reads every key again.
var errReadAgain = errors.New("buffer: read again")

// getMany is GetMany over view v at visible number vis and the reader st.
func getMany(keys [][]byte, vals [][]byte, buf []byte, seed uint64, v *kvView, vis uint64, st kvReader, ks storage.KeyspaceID) ([]byte, error) {
	var m manyState
	for base := 0; base < len(keys); base += manyBatch {
		part := keys[base:min(base+manyBatch, len(keys))]
		m.n = len(part)
		for i, k := range part {
			if len(k) == 8 {
				w := binary.LittleEndian.Uint64(k) // keyHash, written out
				m.hs[i], m.kws[i] = mixWords(w, w, 8, seed), w
			} else {
				m.hs[i], m.kws[i] = keyHashSlow(unsafe.String(unsafe.SliceData(k), len(k)), seed)
			}
			m.res[i] = manyRes{}
		}
		m.resolve(v.active, nil, part, vis)
		for _, t := range v.sealed {
			m.resolve(t, nil, part, vis)
		}
		for _, t := range v.retained {
			m.resolve(t, t.filter.Load(), part, vis) // tier rules T4, T5
		}
		for i, k := range part {
			j := base + i
			r := &m.res[i]
			switch r.kind {
			case probeValue:
				start := len(buf)
				switch {
				case r.inline && r.off == 8 && cap(buf)-start >= 16:
					// The common case: store the slot's two value
					// words into buf's spare capacity.
					d := buf[start : start+16]
					binary.LittleEndian.PutUint64(d, r.w[1])
					binary.LittleEndian.PutUint64(d[8:], r.w[2])
					buf = buf[:start+r.n]
				case r.inline:
					var b [inlineBytes]byte
					binary.LittleEndian.PutUint64(b[0:], r.w[0])
					binary.LittleEndian.PutUint64(b[8:], r.w[1])
					binary.LittleEndian.PutUint64(b[16:], r.w[2])
					buf = append(buf, b[r.off:r.off+r.n]...)
				default:
					var ok bool
					if buf, ok = appendRecValue(buf, r.rec, r.h); !ok || !recValid(r.rec, r.seq) {
						return buf, errReadAgain
					}
				}
				vals[j] = present(buf[start:len(buf):len(buf)])
			case probeDeleted:
				vals[j] = nil
			case probeRetry:
				return buf, errReadAgain
			default:
				vals[j] = nil
				if st == nil {
					return buf, kverr.ErrClosed
				}
				start := len(buf)
				var err error
				yield.Point() // the pending tables probed, the store not yet read
				buf, err = st.GetAppend(buf, ks, k)
				switch {
				case err == nil:
					vals[j] = present(buf[start:len(buf):len(buf)])
				case !isNotFound(err):
					return buf, err
				}
			}
		}
	}
	return buf, nil
}

// present returns v, or a non-nil empty slice for an empty value (a nil buf
// would make it nil, which means absent).
func present(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}

// manyState is GetMany's state for one pass of up to manyBatch keys.
type manyState struct {
	n   int
	hs  [manyBatch]uint64 // hashes
	kws [manyBatch]uint64 // slot words of keys of up to 8 bytes
	res [manyBatch]manyRes
	// per pass over one table:
	ctrl [manyBatch]uint64
	slot [manyBatch]unsafe.Pointer // the slot of the first tag match
	mode [manyBatch]uint8
}

// manyRes is what GetMany found for one key so far.
type manyRes struct {
	kind   uint8
	inline bool      // the value is bytes [off, off+n) of the slot words w
	off, n int       //
	w      [3]uint64 //
	// rec, h and seq are the value's record, its word 0 and number, when
	// not inline: copied with appendRecValue, checked with recValid.
	rec []uint64
	h   uint64
	seq uint64
}

// Per-key outcomes of resolve's first two loops.
const (
	manySkip   = iota // resolved already, or the table cannot hold it
	manyAbsent        // not among the table's points
	manySlow          // left to the general path
	manyCand          // m.slot holds a candidate
)

// resolve probes t for the keys not yet resolved. It loads the first
// control word of every key (and its preferred slot) first, the slot of
// every first tag match second, and resolves each key third, so that the
// cache misses of independent keys overlap. The common case (a key of up
// to 8 bytes with its value in its slot) is decided in those loops; the
// rest takes the point read's general path.
func (m *manyState) resolve(t *table, f *tierFilter, keys [][]byte, vis uint64) {
	base := t.base.Load()
	if vis < base {
		return
	}
	ss := t.shards.Load()
	slow := 0 // keys left to the general path
	for i := 0; i < m.n; i++ {
		m.mode[i] = manySkip
		if m.res[i].kind != probeAbsent {
			continue
		}
		m.mode[i] = manyAbsent
		if ss == nil {
			continue
		}
		h := m.hs[i]
		if f != nil && !f.mayContain(h) {
			continue // tier rule T5: absent, range tombstones checked below
		}
		a := ss.s[h>>shardShift&t.smask].arr.Load()
		if a == nil {
			continue
		}
		if len(keys[i]) > 8 {
			m.mode[i] = manySlow
			slow++
			continue
		}
		g := a.home(h)
		// The preferred slot's load only brings its line in.
		spec := atomic.LoadUint64((*uint64)(unsafe.Add(a.sp, (g*groupSlots+uint64(prefSlot(h)))*slotWordsN*8)))
		c := atomic.LoadUint64((*uint64)(unsafe.Add(a.cp, g*8))) | spec&0
		switch mt := matchTag(c, tag(h)); {
		case mt != 0:
			m.mode[i] = manyCand
			m.slot[i] = unsafe.Add(a.sp, (g*groupSlots+uint64(bits.TrailingZeros64(mt)>>3))*slotWordsN*8)
		case matchEmpty(c) == 0:
			m.mode[i] = manySlow
			slow++
		}
	}
	for i := 0; i < m.n; i++ {
		if m.mode[i] != manyCand {
			continue
		}
		p := m.slot[i]
		w0 := atomic.LoadUint64((*uint64)(p))
		if w0>>modeShift != modeInline || int(w0>>klenShift&lenMask) != len(keys[i]) ||
			atomic.LoadUint64((*uint64)(unsafe.Add(p, 8))) != m.kws[i] {
			m.mode[i] = manySlow
			slow++
			continue
		}
		r := &m.res[i]
		if seq := base + w0&relSeqMask; seq <= vis {
			r.kind = probeDeleted
			if n := int(w0 >> vlenShift & lenMask); w0&inlDel == 0 && n <= 16 {
				r.kind, r.inline, r.off, r.n = probeValue, true, 8, n
				r.w[1] = atomic.LoadUint64((*uint64)(unsafe.Add(p, 16)))
				r.w[2] = atomic.LoadUint64((*uint64)(unsafe.Add(p, 24)))
			}
			m.ctrl[i] = seq // the number a range tombstone must exceed
		} else {
			m.mode[i] = manyAbsent
		}
	}
	sp := t.rdel.Load()
	if sp == nil && slow == 0 {
		return
	}
	for i := 0; i < m.n; i++ {
		k := unsafe.String(unsafe.SliceData(keys[i]), len(keys[i]))
		var above uint64
		switch m.mode[i] {
		case manySkip:
			continue
		case manySlow:
			pk := probeKeyOf(k, m.hs[i])
			pr := t.get(&pk, vis)
			r := &m.res[i]
			r.kind = pr.kind
			if pr.kind == probeValue {
				if pr.v.inline {
					r.inline, r.off, r.n = true, pr.v.off, pr.v.n
					r.w = [3]uint64{pr.sw.w1, pr.sw.w2, pr.sw.w3}
				} else {
					r.rec, r.h, r.seq = pr.v.rec, pr.v.h, pr.v.seq
				}
			}
			continue
		case manyCand:
			above = m.ctrl[i]
		}
		if sp != nil && sp.hides(k, above, vis) {
			m.res[i] = manyRes{kind: probeDeleted}
		}
	}
}

// KVGen is one keyspace's part of a frozen flush generation: its tables,
// oldest first.
type KVGen struct {
	kv     *KV
	g      uint64
	tables []*table
}

// Freeze seals the active table (if it holds any change) into generation g,
// together with every table sealed since the last Freeze (by snapshots and
// Drop), and returns them; nil if there is nothing to flush. The
// caller must exclude writers (see KV). g must grow with each call, except
// that a Freeze that did not return may be retried with the same g.
func (kv *KV) Freeze(g uint64) *KVGen {
	kv.vmu.Lock()
	defer kv.vmu.Unlock()
	v := kv.view.Load()
	var frozen []*table
	for i := len(v.sealed) - 1; i >= 0; i-- {
		// gen == g: a Freeze of g that did not return (a panic) is
		// retried with the same g, and must not lose what it tagged.
		if t := v.sealed[i]; t.gen == 0 || t.gen == g {
			t.gen = g
			frozen = append(frozen, t)
		} else {
			invariants.Check(t.gen < g, "buffer: generation %d frozen after %d", g, t.gen)
		}
	}
	if a := v.active; !a.empty() {
		a.seal()
		a.gen = g
		frozen = append(frozen, a)
		kv.lastKeys = a.keyCount()
		kv.replaceActive(v)
	}
	if len(frozen) == 0 {
		return nil
	}
	return &KVGen{kv: kv, g: g, tables: frozen}
}

// AddTo adds the generation's changes to b: for each table, oldest first,
// its range tombstones, then its points in key order. It may be called again
// after a failed commit (the tables are unchanged until Release).
func (g *KVGen) AddTo(ctx context.Context, b *storage.Batch) error {
	ks := g.kv.ks
	n := 0
	for _, t := range g.flushTables() {
		sp := t.rdel.Load()
		for _, s := range sp.list() {
			var hi []byte
			if !s.open {
				hi = []byte(s.hi)
			}
			b.DeleteRange(ks, []byte(s.lo), hi)
		}
		x, ents := t.sortedKeys()
		for _, e := range ents {
			if n++; n&0xffff == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			sw, sh := x.words(e.ref)
			v, st := t.versionAt(sh, &sw, ^uint64(0))
			invariants.Check(st == verFound, "buffer: a sealed table's key has no version (%d)", st)
			if st != verFound {
				continue
			}
			k := x.key(e.ref)
			if sp != nil && sp.hides(k, v.seq, ^uint64(0)) {
				continue // a newer range tombstone of the table deletes it
			}
			kb := unsafe.Slice(unsafe.StringData(k), len(k))
			switch {
			case v.del:
				b.Delete(ks, kb)
			case v.inline:
				var ib [inlineBytes]byte
				b.Put(ks, kb, inlineValue(&ib, &sw, &v))
			default:
				b.Put(ks, kb, v.ext)
			}
		}
	}
	return nil
}

// replaceActive seals v's active table in a new view under a new active
// table (writers excluded, vmu held).
func (kv *KV) replaceActive(v *kvView) *kvView {
	next := kv.newActive()
	// No write is in flight: every change numbered so far is in the
	// tables of v, and every later one goes to next.
	next.base.Store(kv.seq.Last() + 1)
	// Publication order 9: a new view, under vmu.
	nv := &kvView{active: next, sealed: prepend(v.active, v.sealed), retained: v.retained}
	kv.view.Store(nv)
	if !kv.dropped.Load() {
		next.unseal()
	}
	return nv
}

// Keyspace returns the keyspace the generation belongs to.
func (g *KVGen) Keyspace() storage.KeyspaceID { return g.kv.ks }

// Release is KV.Release of the generation: call it once the generation is
// durable.
func (g *KVGen) Release() { g.kv.Release(g.g) }

// Idle reports whether the overlay holds no change at all: nothing pending,
// nothing frozen and not yet released.
func (kv *KV) Idle() bool {
	v := kv.view.Load()
	return len(v.sealed) == 0 && v.active.empty()
}

// Release drops generation g's tables after its changes are durable in the
// store, and recycles those no iterator or snapshot pins. Generations must be
// released in order.
func (kv *KV) Release(g uint64) {
	gone, _ := kv.cutGen(g, false)
	// Publish first (cutGen), clear after (publication order 6): a reader
	// that still sees the old view after its probe finished the probe
	// before any clear began.
	yield.Point() // stress builds: readers of the old view run on
	for _, t := range gone {
		kv.pool.put(t)
	}
}

// cutGen takes generation g's tables out of the sealed list, Release's and
// Retain's common step: it publishes the view without them (publication
// order 9; with retain, with them in front of the read tier's older
// generations, tier rule T1), debits the account for their bytes and
// returns them with those bytes. It returns no table if g has none there.
// The caller may recycle what it returns only after (publication order 6):
// cutGen has published the view that no longer holds them.
func (kv *KV) cutGen(g uint64, retain bool) (gone []*table, n int64) {
	kv.vmu.Lock()
	v := kv.view.Load()
	cut, ok := sealedCut(v.sealed, g)
	if !ok {
		kv.vmu.Unlock()
		return nil, 0
	}
	for _, t := range v.sealed[:cut] {
		invariants.Check(t.gen == 0 || t.gen > g, "buffer: release or retain of generation %d before %d", g, t.gen)
	}
	gone = v.sealed[cut:]
	nv := &kvView{active: v.active, sealed: v.sealed[:cut:cut], retained: v.retained}
	if retain {
		for _, t := range v.retained {
			invariants.Check(t.gen < g, "buffer: retain of generation %d after %d", g, t.gen)
		}
		nv.retained = make([]*table, 0, len(gone)+len(v.retained))
		nv.retained = append(append(nv.retained, gone...), v.retained...)
	}
	kv.view.Store(nv) // publication order 9
	for _, t := range gone {
		n += t.bytes()
		kv.lastCap.Store(max(kv.lastCap.Load()/2, t.capacityBytes()))
	}
	kv.vmu.Unlock()
	kv.acct.add(-n)
	return gone, n
}

// pinView pins the tables of the current view (all of them, or only the
// sealed ones) so that they are not recycled while read.
func (kv *KV) pinView(withActive bool) []*table {
	kv.vmu.Lock()
	defer kv.vmu.Unlock()
	v := kv.view.Load()
	ts := make([]*table, 0, len(v.sealed)+1)
	if withActive {
		ts = append(ts, v.active)
	}
	ts = append(ts, v.sealed...)
	pinTables(ts) // publication order 10: under vmu
	return ts
}

func isNotFound(err error) bool { return errors.Is(err, kverr.ErrNotFound) }

// PendingKeys returns the number of keys held by the overlay's tables that
// are not yet released (a key pending in two generations counts twice).
func (kv *KV) PendingKeys() int64 {
	v := kv.view.Load()
	n := v.active.keyCount()
	for _, t := range v.sealed {
		n += t.keyCount()
	}
	return n
}

// pendingPresence answers whether key is present from the pending tables
// alone, without copying its value: known is false when only the store
// can answer (no pending change of key, no range tombstone over it).
func (kv *KV) pendingPresence(key []byte) (has, known bool) {
	k := unsafe.String(unsafe.SliceData(key), len(key))
	pk := makeProbeKey(k, kv.seed)
	for {
		vis := kv.seq.visible.Load() // then the view: see GetAppend
		v := kv.view.Load()
		kind := v.presence(&pk, vis)
		if kv.view.Load() == v && kind != probeRetry {
			return kind == probeValue, kind != probeAbsent
		}
	}
}

// presence is what the view's tables know of pk at visible number vis
// (probeAbsent, probeValue or probeDeleted), without reading a value.
func (v *kvView) presence(pk *probeKey, vis uint64) uint8 {
	if r := v.active.get(pk, vis); r.kind != probeAbsent {
		return r.kind
	}
	for _, t := range v.sealed {
		if r := t.get(pk, vis); r.kind != probeAbsent {
			return r.kind
		}
	}
	for _, t := range v.retained {
		if kind := t.tierPresence(pk, vis); kind != probeAbsent {
			return kind // tier rules T4, T5
		}
	}
	return probeAbsent
}
