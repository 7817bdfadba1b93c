package buffer

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kvbuf/kvbuf/internal/invariants"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// Account is a running total of the bytes held by pending changes, shared by
// the overlays of one engine so that admission reads one number. The zero
// value is ready to use.
type Account struct{ n atomic.Int64 }

// Bytes returns the total.
func (a *Account) Bytes() int64 { return a.n.Load() }

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
// Writes (Put, Delete, DeleteRange) must not run concurrently with Freeze or
// Snapshot: the engine admits writes under the shared side of its write
// barrier and calls those two with the barrier held exclusively. Every other
// combination is safe for concurrent use.
//
// # Read path
//
// The overlay publishes one immutable view (the active table and the sealed
// tables, newest first) through one atomic pointer. A read loads the view,
// probes its tables newest first, re-loads the view and retries if it changed
// (a table of the old view may have been recycled under the probe), then
// falls through to the store. A read takes no lock and writes no shared
// memory.
type KV struct {
	view atomic.Pointer[kvView]
	st   kvReader
	ks   storage.KeyspaceID
	acct *Account
	opt  resolved

	dropped atomic.Bool // set by Drop, under the active table's locks

	// vmu serialises every change of the view (Freeze, Release, a range
	// delete's seal, Snapshot) and table pinning.
	vmu  sync.Mutex
	pool tablePool
	// lastCap is the capacity of recently released tables, the size asked of
	// the pool for the next active table. Written by Release, read by
	// whoever makes an active table (Freeze, a range delete's seal).
	lastCap atomic.Int64
}

// kvView is immutable once published.
type kvView struct {
	active *table
	sealed []*table // newest first; frozen generations are at the end
}

// NewKV returns an empty overlay of keyspace ks of st. acct, if not nil,
// receives the overlay's pending bytes.
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
	kv := &KV{st: st, ks: ks, acct: acct, opt: r}
	kv.pool.limit = r.poolBytes
	kv.view.Store(&kvView{active: newTable(r.shards)})
	return kv
}

// Keyspace returns the keyspace id the overlay writes to.
func (kv *KV) Keyspace() storage.KeyspaceID { return kv.ks }

func (kv *KV) checkKey(key []byte) error {
	switch {
	case len(key) == 0:
		return ErrEmptyKey
	case len(key) > kv.opt.maxKey:
		return kverr.Errorf("key of %d bytes (max %d): %w", len(key), kv.opt.maxKey, ErrKeyTooLarge)
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
		return kverr.Errorf("value of %d bytes (max %d): %w", len(value), kv.opt.maxVal, ErrValueTooLarge)
	}
	return nil
}

// CheckKey reports the error Delete or Get would return for key.
func (kv *KV) CheckKey(key []byte) error { return kv.checkKey(key) }

// CheckRange reports the error DeleteRange or NewIter would return for the
// bounds (nil = open).
func CheckRange(lower, upper []byte) error {
	if lower != nil && upper != nil && string(lower) > string(upper) {
		return kverr.Errorf("[%q, %q): %w", trunc(lower), trunc(upper), ErrBadRange)
	}
	return nil
}

func trunc(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// Put records key = value (both copied). Errors: ErrEmptyKey,
// ErrKeyTooLarge, ErrValueTooLarge, ErrDropped (nothing recorded).
func (kv *KV) Put(key, value []byte) error {
	if err := kv.CheckPut(key, value); err != nil {
		return err
	}
	return kv.write(key, value, false)
}

// Delete records a tombstone for key: reads report storage.ErrNotFound and
// scans skip it until a later Put; the flush deletes the stored key.
func (kv *KV) Delete(key []byte) error {
	if err := kv.checkKey(key); err != nil {
		return err
	}
	return kv.write(key, nil, true)
}

// write stores the change in the active table, retrying on the table that
// replaced it if a range delete sealed it meanwhile.
func (kv *KV) write(key, value []byte, del bool) error {
	h := hashKey(unsafe.String(unsafe.SliceData(key), len(key)))
	for spins := 0; ; spins++ {
		ok, added := kv.view.Load().active.set(key, h, value, del)
		if ok {
			kv.acct.add(added)
			return nil
		}
		if kv.dropped.Load() {
			return ErrDropped
		}
		// The sealer publishes the new view before it unlocks, so this
		// is rare; a recycled table is unsealed right after publication.
		if invariants.Enabled {
			invariants.Check(spins < 1<<20, "buffer: write spun %d times on a sealed table", spins)
		}
		if spins > 16 {
			runtime.Gosched()
		}
	}
}

// DeleteRange hides every key k with lower <= k < upper (nil = open on that
// side), pending or stored, until later writes, in O(1): one range tombstone.
// If the active table holds a key in the range, it is sealed and a new active
// table starts with the tombstone, so that the tombstone is older than every
// point of its table.
func (kv *KV) DeleteRange(lower, upper []byte) error {
	if err := CheckRange(lower, upper); err != nil {
		return err
	}
	lo, hi, open := string(lower), string(upper), upper == nil
	if !open && lo == hi {
		return nil
	}
	return kv.withActive(func(a *table, ss *shardSet) *table {
		if !a.hasPointIn(ss, lo, hi, open) {
			a.rdel.Store(a.rdel.Load().with(lo, hi, open))
			return nil
		}
		next := kv.newActive()
		next.rdel.Store((*spans)(nil).with(lo, hi, open))
		return next
	})
}

// withActive runs fn with the active table a locked (no write in progress
// or starting: t.mu and every shard mutex held). If fn returns a table, a is
// sealed and the returned table published as the new active one before the
// locks are released, so that writers blocked on a retry on it. A table
// sealed meanwhile is retried on its successor; a dropped overlay returns
// ErrDropped without calling fn.
func (kv *KV) withActive(fn func(a *table, ss *shardSet) (next *table)) error {
	for {
		a := kv.view.Load().active
		ss := a.lockAll()
		if a.sealed {
			a.unlockAll(ss)
			if kv.dropped.Load() {
				return ErrDropped
			}
			continue // sealed meanwhile: retry on its successor
		}
		next := fn(a, ss)
		if next != nil {
			a.sealLocked(ss)
			kv.vmu.Lock()
			cur := kv.view.Load()
			invariants.Check(cur.active == a, "buffer: active table changed under its shard locks")
			kv.view.Store(&kvView{active: next, sealed: prepend(a, cur.sealed)})
			kv.vmu.Unlock()
		}
		a.unlockAll(ss)
		if next != nil && !kv.dropped.Load() {
			next.unseal()
		}
		return nil
	}
}

// Drop deletes the whole keyspace and refuses every later write with
// ErrDropped: it seals the active table and publishes a new one that holds a
// range tombstone over every key and never accepts a write. The next Freeze
// flushes it (the store's keys are deleted by one range deletion). A write
// racing Drop either lands before the tombstone (and is deleted by it) or
// fails. Reads after Drop see an empty keyspace.
func (kv *KV) Drop() {
	_ = kv.withActive(func(*table, *shardSet) *table {
		kv.dropped.Store(true)
		next := newTable(1)
		next.sealed = true // for good: writers see dropped and fail
		next.rdel.Store((*spans)(nil).with("", "", true))
		return next
	})
}

// Dropped reports whether Drop was called.
func (kv *KV) Dropped() bool { return kv.dropped.Load() }

func prepend(t *table, ts []*table) []*table {
	out := make([]*table, 0, len(ts)+1)
	return append(append(out, t), ts...)
}

// newActive returns an empty, sealed table for the next active one: recycled
// when possible. The caller unseals it once it is published.
func (kv *KV) newActive() *table {
	if t := kv.pool.get(kv.lastCap.Load()); t != nil {
		return t
	}
	t := newTable(kv.opt.shards)
	t.sealed = true
	return t
}

// find probes the view's tables for k, newest first. It returns the value
// record of the newest change, or nil with hidden set if a range tombstone
// covers k, or nil, false if no table knows k.
func (v *kvView) find(k string, h uint64) (r *byte, hidden bool) {
	if r, hidden = findIn(v.active, k, h); r != nil || hidden {
		return r, hidden
	}
	for _, t := range v.sealed {
		if r, hidden = findIn(t, k, h); r != nil || hidden {
			return r, hidden
		}
	}
	return nil, false
}

// findIn is find for one table. A node whose value is not stored yet (a Put
// in progress) does not count.
func findIn(t *table, k string, h uint64) (r *byte, hidden bool) {
	if n := t.lookup(k, h); n != nil {
		if r = n.val.Load(); r != nil {
			return r, false
		}
	}
	return nil, t.covers(k)
}

// lookup returns k's newest pending record (nil if none) and whether a range
// tombstone hides it, re-validated against recycling.
func (kv *KV) lookup(key []byte) (r *byte, hidden bool) {
	k := unsafe.String(unsafe.SliceData(key), len(key))
	h := hashKey(k)
	for spins := 0; ; spins++ {
		v := kv.view.Load()
		r, hidden = v.find(k, h)
		// A table of v may have been released and cleared while we
		// probed it: only if the view is unchanged did the probe precede
		// every clear (a release publishes the new view first).
		if kv.view.Load() == v {
			return r, hidden
		}
		if invariants.Enabled {
			invariants.Check(spins < 1<<20, "buffer: lookup retried %d times", spins)
		}
	}
}

// Get returns a copy of key's value: the newest pending change, else the
// stored value. Errors: storage.ErrNotFound (absent, deleted or range
// deleted), ErrEmptyKey, ErrKeyTooLarge, the store's errors.
func (kv *KV) Get(key []byte) ([]byte, error) {
	if err := kv.checkKey(key); err != nil {
		return nil, err
	}
	r, hidden := kv.lookup(key)
	switch {
	case r != nil:
		v, del := rec(r)
		if del {
			return nil, storage.ErrNotFound
		}
		return append(make([]byte, 0, len(v)), v...), nil
	case hidden:
		return nil, storage.ErrNotFound
	case kv.st == nil:
		return nil, storage.ErrClosed
	}
	return kv.st.Get(kv.ks, key)
}

// GetAppend is Get appending the value to dst: with enough capacity in dst it
// does not allocate. On error it returns dst unchanged.
func (kv *KV) GetAppend(dst, key []byte) ([]byte, error) {
	if err := kv.checkKey(key); err != nil {
		return dst, err
	}
	r, hidden := kv.lookup(key)
	switch {
	case r != nil:
		v, del := rec(r)
		if del {
			return dst, storage.ErrNotFound
		}
		return append(dst, v...), nil
	case hidden:
		return dst, storage.ErrNotFound
	case kv.st == nil:
		return dst, storage.ErrClosed
	}
	return kv.st.GetAppend(dst, kv.ks, key)
}

// manyBatch is the number of keys GetMany resolves per pass: their hashes,
// slots and nodes are loaded in separate loops so that the cache misses of
// independent keys overlap.
const manyBatch = 32

// GetMany looks up every key of keys. The value of each key found is
// appended to buf and vals[i] set to it (a subslice of buf at the time it was
// appended, capped so that appending to it cannot overwrite a neighbour);
// vals[i] is nil for a key that is absent or deleted. It returns the extended
// buffer. With enough capacity in buf it allocates nothing. len(vals) must be
// at least len(keys).
//
// It returns the same values as Get called on each key in turn, at some
// instant between the call and its return. Errors: ErrEmptyKey,
// ErrKeyTooLarge (checked for every key before any lookup), the store's
// errors (vals of keys not yet read are left nil).
func (kv *KV) GetMany(keys [][]byte, vals [][]byte, buf []byte) ([]byte, error) {
	return getMany(keys, vals, buf, kv.checkKey, func() *kvView { return kv.view.Load() }, kv.st, kv.ks)
}

// getMany is GetMany over views loaded by load (the live view, or a
// snapshot's fixed one) and the reader st.
func getMany(keys [][]byte, vals [][]byte, buf []byte, check func([]byte) error, load func() *kvView, st kvReader, ks storage.KeyspaceID) ([]byte, error) {
	if len(vals) < len(keys) {
		return buf, kverr.Errorf("GetMany: %d keys but room for %d values: %w", len(keys), len(vals), ErrBadRange)
	}
	for _, k := range keys {
		if err := check(k); err != nil {
			return buf, err
		}
	}
	var (
		hs   [manyBatch]uint64
		rs   [manyBatch]*byte
		hid  [manyBatch]bool
		cand [manyBatch]*node
	)
	for base := 0; base < len(keys); base += manyBatch {
		part := keys[base:min(base+manyBatch, len(keys))]
		for i, k := range part {
			hs[i] = hashKey(unsafe.String(unsafe.SliceData(k), len(k)))
		}
		for {
			v := load()
			for i := range part {
				rs[i], hid[i] = nil, false
			}
			resolveMany(v.active, part, &hs, &rs, &hid, &cand)
			for _, t := range v.sealed {
				resolveMany(t, part, &hs, &rs, &hid, &cand)
			}
			if load() == v {
				break
			}
		}
		for i, k := range part {
			j := base + i
			vals[j] = nil
			switch {
			case rs[i] != nil:
				val, del := rec(rs[i])
				if !del {
					start := len(buf)
					buf = append(buf, val...)
					vals[j] = present(buf[start:len(buf):len(buf)])
				}
			case hid[i]:
			default:
				if st == nil {
					return buf, storage.ErrClosed
				}
				start := len(buf)
				var err error
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

// resolveMany probes t for the keys not yet resolved (rs[i] == nil and
// !hid[i]). It loads every candidate slot first and every candidate node
// second, so that independent cache misses overlap.
func resolveMany(t *table, keys [][]byte, hs *[manyBatch]uint64, rs *[manyBatch]*byte, hid *[manyBatch]bool, cand *[manyBatch]*node) {
	ss := t.shards.Load()
	if ss != nil {
		for i := range keys {
			cand[i] = nil
			if rs[i] != nil || hid[i] {
				continue
			}
			if arr := ss.s[hs[i]>>t.shift].slots.Load(); arr != nil && arr.mayHold(hs[i]) {
				s := &arr.s[hs[i]&arr.mask]
				if n := s.n.Load(); n != nil && s.hash.Load() == hs[i] {
					cand[i] = n
				}
			}
		}
		for i, k := range keys {
			if rs[i] != nil || hid[i] {
				continue
			}
			ks := unsafe.String(unsafe.SliceData(k), len(k))
			n := cand[i]
			if n == nil || n.key() != ks {
				n = t.lookup(ks, hs[i]) // collision or a longer probe: the slow way
			}
			if n != nil {
				rs[i] = n.val.Load()
			}
		}
	}
	if sp := t.rdel.Load(); sp != nil {
		for i, k := range keys {
			if rs[i] == nil && !hid[i] && sp.covers(unsafe.String(unsafe.SliceData(k), len(k))) {
				hid[i] = true
			}
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
// together with every table sealed since the last Freeze (by range deletes
// and snapshots), and returns them; nil if there is nothing to flush. The
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
		next := kv.newActive()
		kv.view.Store(&kvView{active: next, sealed: prepend(a, v.sealed)})
		if !kv.dropped.Load() {
			next.unseal()
		}
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
	tables := g.tables
	for i := len(tables) - 1; i > 0; i-- {
		if sp := tables[i].rdel.Load(); sp != nil && len(sp.s) == 1 && sp.s[0].lo == "" && sp.s[0].open {
			tables = tables[i:] // a dropped keyspace: older tables are deleted anyway
			break
		}
	}
	for _, t := range tables {
		for _, s := range t.rdel.Load().list() {
			var hi []byte
			if !s.open {
				hi = []byte(s.hi)
			}
			b.DeleteRange(ks, []byte(s.lo), hi)
		}
		var m merger
		m.addTable(t, 0)
		for m.first(); m.valid(); m.next() {
			if n++; n&0xffff == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			nd := m.top()
			r := nd.val.Load()
			if r == nil {
				continue // cannot happen in a sealed table: writers are done
			}
			k := unsafe.Slice(unsafe.StringData(nd.key()), nd.klen)
			v, del := rec(r)
			if del {
				b.Delete(ks, k)
			} else {
				b.Put(ks, k, v)
			}
		}
	}
	return nil
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
	kv.vmu.Lock()
	v := kv.view.Load()
	cut := len(v.sealed)
	for cut > 0 && v.sealed[cut-1].gen == g {
		cut--
	}
	if cut == len(v.sealed) {
		kv.vmu.Unlock()
		return
	}
	for _, t := range v.sealed[:cut] {
		invariants.Check(t.gen == 0 || t.gen > g, "buffer: release of generation %d before %d", g, t.gen)
	}
	gone := v.sealed[cut:]
	// Publish first, clear after: a reader that still sees v after its
	// probe finished the probe before any clear began.
	kv.view.Store(&kvView{active: v.active, sealed: v.sealed[:cut:cut]})
	var freed int64
	for _, t := range gone {
		freed += t.bytes()
		kv.lastCap.Store(max(kv.lastCap.Load()/2, t.capacityBytes()))
	}
	kv.vmu.Unlock()
	kv.acct.add(-freed)
	for _, t := range gone {
		kv.pool.put(t)
	}
}

// PendingBytes returns the memory held by the overlay's pending changes.
func (kv *KV) PendingBytes() int64 {
	v := kv.view.Load()
	n := v.active.bytes()
	for _, t := range v.sealed {
		n += t.bytes()
	}
	return n
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
	for _, t := range ts {
		t.pins.Add(1)
	}
	return ts
}

func unpin(ts []*table) {
	for _, t := range ts {
		if t.pins.Add(-1) < 0 {
			invariants.Check(false, "buffer: table unpinned more often than pinned")
		}
	}
}

func isNotFound(err error) bool { return errors.Is(err, storage.ErrNotFound) }

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
