package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/tidwall/btree"

	"github.com/kvbuf/kvbuf"
)

// W2 sizes at Scale 1 (doc/workloads.md).
const (
	w2Stored   = 1_048_576 // stored keys i*4, so the key space is 4×
	w2Pending  = 1_000_000 // pending puts/deletes, 90/10
	w2Lookups  = 200_000   // per get-* round
	w2ValueLen = 16
	w2ScanLen  = 10_000
	// applyBatch is how many changes one preload op applies (as one Batch).
	applyBatch = 1_000
)

// w2StoredValue is the stored value of stored key number i.
func w2StoredValue(i uint64) []byte {
	v := make([]byte, w2ValueLen)
	binary.BigEndian.PutUint64(v, i)
	binary.BigEndian.PutUint64(v[8:], ^i)
	return v
}

// w2Change is one pending change; a nil value is a delete.
type w2Change struct {
	key uint64
	val []byte
}

// w2Changes draws n pending changes over [0, space): 90% puts of random
// 16-byte values, 10% deletes.
func w2Changes(rng *rand.Rand, n int, space uint64) []w2Change {
	out := make([]w2Change, n)
	for k := range out {
		out[k] = w2Change{key: rng.Uint64N(space), val: w2Value(rng)}
	}
	return out
}

// w2Value draws a pending change's value: nil (a delete) one time in ten,
// else 16 random bytes.
func w2Value(rng *rand.Rand) []byte {
	if rng.IntN(10) == 0 {
		return nil
	}
	v := make([]byte, w2ValueLen)
	for j := range v {
		v[j] = byte(rng.Uint32())
	}
	return v
}

// w2Item is one entry of the ordered baseline's B-tree; a nil val is a
// tombstone.
type w2Item struct {
	key string
	val []byte
}

func w2Less(a, b w2Item) bool { return a.key < b.key }

// newW2Tree returns the ordered baseline's B-tree: a tidwall/btree generic
// B-tree without its own lock (the baselines hold an RWMutex around it).
func newW2Tree() *btree.BTreeG[w2Item] {
	return btree.NewBTreeGOptions(w2Less, btree.Options{NoLocks: true})
}

// w2State is everything W2's implementations read.
type w2State struct {
	op   uint64      // the engines' last op number
	dbs  []*kvbuf.DB // A, B, C
	kv   *kvbuf.KV   // engine A
	twin *kvbuf.KV   // engine B: the same data, for the snapshot rows
	def  *kvbuf.KV   // engine C: the same data, default Options
	pdb  *pebble.DB
	ib   *pebble.Batch

	rwmu    sync.RWMutex
	pending map[string][]byte // nil value: tombstone

	tmu  sync.RWMutex
	tree *btree.BTreeG[w2Item]

	// Live heap per pending entry of each structure, and the engine's own
	// figure (PendingBytes / PendingKeys).
	kvbufHeap, kvbufAcct, mapHeap, ibHeap, treeHeap float64

	// readBack is Config.ReadBack (the interleaved puts' read-back).
	readBack int
}

// engines are the keyspaces of the three engines, which get every change.
func (s *w2State) engines() []*kvbuf.KV { return []*kvbuf.KV{s.kv, s.twin, s.def} }

// w2Keys is one get workload's keys in every form an implementation takes:
// user keys (kvbuf, the map), the stored keys (raw pebble), and a slice per
// key (GetMany).
type w2Keys struct {
	user, stored flatKeys
	views        [][]byte
}

func newW2Keys(f flatKeys) *w2Keys { return &w2Keys{user: f, stored: f.stored(), views: f.slices()} }

// setupW2 builds W2: three kvbuf engines with a keyspace (A; its twin B for
// the snapshot rows; C opened with default Options) and a raw pebble
// database opened like the engine's store, all holding the same stored
// keys (flushed to sstables); the same pending changes in the engines, in
// a pebble indexed batch, in an RWMutex-guarded map and in an
// RWMutex-guarded B-tree (measuring the live heap each takes); the lookup
// keys of each get workload and the scan starts.
func setupW2(ctx context.Context, s *Suite, c Config) error {
	nStored := c.scaled(w2Stored, 64)
	space := uint64(nStored) * 4
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed+2))
	changes := w2Changes(rng, c.scaled(w2Pending, 64), space)
	st, err := openW2(s, len(changes))
	if err != nil {
		return err
	}
	st.readBack = c.ReadBack
	if err := st.preload(ctx, nStored); err != nil {
		return err
	}
	if err := st.pend(ctx, s, changes); err != nil {
		return err
	}
	gets, err := st.getWorkloads(rng, c, space)
	if err != nil {
		return err
	}
	// The stores compact what preload and pend flushed (pend flushes the
	// default-Options engine): no side's gets are timed while its store
	// compacts. Nothing is flushed here: A and B keep their changes
	// pending.
	for _, w := range gets {
		w.quiesce = settleAll(st.dbs, st.pdb)
	}
	s.add(gets...)
	s.add(st.scanWorkload(rng, c, space))
	s.add(st.snapshotWorkloads(s, gets[0])...)
	s.add(st.firstIterWorkload(rng, c, space), st.interleavedWorkload(rng, c, space))
	return nil
}

// openW2 opens W2's engines and raw pebble with empty pending structures;
// A and B keep pending changes pending (pendingOptions for n changes).
func openW2(s *Suite, n int) (*w2State, error) {
	st := &w2State{pending: map[string][]byte{}, tree: newW2Tree()}
	opts := pendingOptions(kvNeed(n))
	for _, e := range []struct {
		dir  string
		opts *kvbuf.Options
		kv   **kvbuf.KV
	}{{"engine", opts, &st.kv}, {"engine-twin", opts, &st.twin}, {"engine-default", nil, &st.def}} {
		db, kv, err := openKV(s, e.dir, "w2", e.opts)
		if err != nil {
			return nil, err
		}
		*e.kv = kv
		st.dbs = append(st.dbs, db)
	}
	var err error
	st.pdb, err = openPebble(s, "pebble", 0, baselineCache(opts))
	return st, err
}

// preload stores keys i*4 for i < n with w2StoredValue(i) in every engine
// (in batches of applyBatch, one op each) and in raw pebble, and moves them
// to sstables.
func (st *w2State) preload(ctx context.Context, n int) error {
	pb := st.pdb.NewBatch()
	batches := make([]*kvbuf.Batch, len(st.dbs))
	for e, db := range st.dbs {
		batches[e] = db.NewBatch()
	}
	var kb, sk []byte
	flush := func() error {
		st.op++
		for e, db := range st.dbs {
			if err := db.Apply(ctx, batches[e], st.op); err != nil {
				return err
			}
			batches[e].Reset()
		}
		return nil
	}
	for i := range uint64(n) {
		if err := cancelled(ctx, int(i)); err != nil {
			return err
		}
		kb = u64Key(kb[:0], i*4)
		v := w2StoredValue(i)
		for e, kv := range st.engines() {
			batches[e].Put(kv, kb, v)
		}
		if err := pb.Set(storedKey(sk[:0], kb), v, nil); err != nil {
			return err
		}
		if batches[0].Len() == applyBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if err := pb.Commit(pebble.Sync); err != nil {
		return err
	}
	if err := pb.Close(); err != nil {
		return err
	}
	// Every side's stored keys end up in pebble's last level, so that
	// reads search stores of the same shape. (Left to themselves, the
	// engines' stores compact there, because each flush also writes the
	// engine's metadata keys and their L0 tables overlap, while raw
	// pebble's sorted batches stay in non-overlapping L0 tables; pebble's
	// Get consults Bloom filters in L0 but not in the last level, so a
	// miss cost the two sides different work.)
	for _, db := range st.dbs {
		if err := db.FlushMemtables(ctx); err != nil {
			return err
		}
		if err := db.Compact(ctx); err != nil {
			return err
		}
	}
	if err := st.pdb.Flush(); err != nil {
		return err
	}
	return st.pdb.Compact(ctx, []byte{userKeyTag}, []byte{userKeyTag + 1}, true)
}

// pend makes changes pending in every structure, measuring the live heap
// each one's copy takes: engine A first, then the map, the indexed batch
// and the B-tree; then engines B and C (not measured).
func (st *w2State) pend(ctx context.Context, s *Suite, changes []w2Change) error {
	check := pendingGuard(st.dbs[0], st.dbs[1])
	var kb []byte
	h0 := liveHeap()
	if err := st.pendEngine(ctx, st.kv, changes); err != nil {
		return err
	}
	h1 := liveHeap()
	m := st.dbs[0].Metrics()
	st.kvbufHeap = perEntry(h0, h1, int(m.PendingKeys))
	st.kvbufAcct = float64(m.PendingBytes) / float64(max(m.PendingKeys, 1))
	for _, ch := range changes {
		kb = u64Key(kb[:0], ch.key)
		st.pending[string(kb)] = bytes.Clone(ch.val) // the map owns its copy, as kvbuf does
	}
	h2 := liveHeap()
	st.mapHeap = perEntry(h1, h2, len(st.pending))
	st.ib = st.pdb.NewIndexedBatch()
	s.onClose(st.ib.Close)
	var sk []byte
	for _, ch := range changes {
		sk = storedKey(sk[:0], u64Key(kb[:0], ch.key))
		var err error
		if ch.val == nil {
			err = st.ib.Delete(sk, nil)
		} else {
			err = st.ib.Set(sk, ch.val, nil)
		}
		if err != nil {
			return err
		}
	}
	h3 := liveHeap()
	st.ibHeap = perEntry(h2, h3, len(st.pending))
	for _, ch := range changes {
		st.tree.Set(w2Item{string(u64Key(kb[:0], ch.key)), bytes.Clone(ch.val)})
	}
	st.treeHeap = perEntry(h3, liveHeap(), st.tree.Len())
	for _, kv := range st.engines()[1:] {
		if err := st.pendEngine(ctx, kv, changes); err != nil {
			return err
		}
	}
	if err := check(); err != nil {
		return err
	}
	if mt := st.dbs[1].Metrics(); mt.PendingKeys != m.PendingKeys {
		return fmt.Errorf("twin engine holds %d pending keys, engine %d", mt.PendingKeys, m.PendingKeys)
	}
	return nil
}

// pendEngine writes changes to kv one call each, op numbers continuing.
func (st *w2State) pendEngine(ctx context.Context, kv *kvbuf.KV, changes []w2Change) error {
	var kb []byte
	op := st.op
	for k, ch := range changes {
		if err := cancelled(ctx, k); err != nil {
			return err
		}
		kb = u64Key(kb[:0], ch.key)
		op++
		var err error
		if ch.val == nil {
			err = kv.Delete(ctx, kb, op)
		} else {
			err = kv.Put(ctx, kb, ch.val, op)
		}
		if err != nil {
			return err
		}
	}
	if kv == st.def { // the last engine: every engine has had the same ops
		st.op = op
	}
	return nil
}

// getWorkloads are W2's four get workloads, each with its own keys:
// pending hits, pending tombstones, misses (no pending change; a quarter
// of them stored) and uniform keys.
func (st *w2State) getWorkloads(rng *rand.Rand, c Config, space uint64) ([]*Workload, error) {
	var hits, tombs []uint64
	for k, v := range st.pending {
		key := binary.BigEndian.Uint64([]byte(k))
		if v == nil {
			tombs = append(tombs, key)
		} else {
			hits = append(hits, key)
		}
	}
	if len(hits) == 0 || len(tombs) == 0 {
		return nil, fmt.Errorf("%w: scale too small for W2 (%d pending hits, %d tombstones)", ErrBadConfig, len(hits), len(tombs))
	}
	// Map iteration order is random: sort for reproducible key lists.
	slices.Sort(hits)
	slices.Sort(tombs)
	n := c.scaled(w2Lookups, 64)
	pick := func(draw func() uint64) *w2Keys {
		f := newFlatKeys(8, n)
		for range n {
			f.b = u64Key(f.b, draw())
		}
		return newW2Keys(f)
	}
	hitKeys := pick(func() uint64 { return hits[rng.IntN(len(hits))] })
	tombKeys := pick(func() uint64 { return tombs[rng.IntN(len(tombs))] })
	missKeys := pick(func() uint64 {
		for {
			k := rng.Uint64N(space)
			if _, ok := st.pending[string(u64Key(nil, k))]; !ok {
				return k
			}
		}
	})
	mixedKeys := pick(func() uint64 { return rng.Uint64N(space) })
	gets := func(name string, k *w2Keys, defaultRow bool) *Workload {
		im := []Impl{
			{Name: ImplKvbuf, Loop: w2Kvbuf{st.kv, k}, BytesPerEntry: st.kvbufHeap, AccountedBytes: st.kvbufAcct},
			{Name: ImplKvbufGetMany, Loop: w2KvbufMany{st.kv, k}, BytesPerEntry: st.kvbufHeap, AccountedBytes: st.kvbufAcct},
		}
		if defaultRow {
			im = append(im, Impl{Name: ImplKvbufDefault, Loop: w2Kvbuf{st.def, k}})
		}
		im = append(im,
			Impl{Name: ImplPebbleGet, Floor: true, Loop: w2PebbleGet{st.pdb, k}},
			Impl{Name: ImplPebbleBatch, Loop: w2PebbleGet{st.ib, k}, BytesPerEntry: st.ibHeap},
			Impl{Name: ImplMapPebble, Loop: w2MapPebble{st, k, true}, BytesPerEntry: st.mapHeap},
			Impl{Name: ImplMapPebbleNoCopy, Loop: w2MapPebble{st, k, false}, BytesPerEntry: st.mapHeap},
			Impl{Name: ImplMapPebbleBatched, Loop: w2MapPebbleBatched{st, k}, BytesPerEntry: st.mapHeap},
		)
		return &Workload{Name: name, Unit: "get", Ops: n, Parallel: true, Impls: im}
	}
	return []*Workload{
		gets("W2/get-pending-hit", hitKeys, true),
		gets("W2/get-pending-tombstone", tombKeys, false),
		gets("W2/get-miss", missKeys, false),
		gets("W2/get-mixed", mixedKeys, false),
	}, nil
}

// snapshotWorkloads are the pending-hit lookups on engine B with 1, then
// 16, snapshots open against the same lookups on engine A, which never had
// one. hit is W2/get-pending-hit, whose keys they reuse.
func (st *w2State) snapshotWorkloads(s *Suite, hit *Workload) []*Workload {
	keys := hit.Impls[0].Loop.(w2Kvbuf).k
	open := snapshotOpener(s, st.dbs[1])
	snapRows := func(name string, n int) *Workload {
		return &Workload{Name: name, Unit: "get", Ops: keys.user.len(), Impls: []Impl{
			{Name: ImplKvbuf, Loop: w2Kvbuf{st.twin, keys}},
			{Name: ImplWithoutSnapshots, Loop: w2Kvbuf{st.kv, keys}},
		}, prepare: open(n)}
	}
	return []*Workload{
		snapRows("W2/get-pending-hit-1-snapshot", 1),
		snapRows("W2/get-pending-hit-16-snapshots", 16),
	}
}

// The W2 get implementations. Every row copies each value it finds into a
// buffer it reuses (kvbuf.KV.GetAppend, append for the others) and adds
// 1 + the value's last byte to its check sum, except the no-copy row, which
// returns the map's value without copying it (valid only because values
// are never modified in place).
type (
	w2Kvbuf struct {
		kv *kvbuf.KV
		k  *w2Keys
	}
	w2KvbufMany struct {
		kv *kvbuf.KV
		k  *w2Keys
	}
	// w2PebbleGet reads the stored keys from raw pebble (a floor: no
	// pending changes) or from the indexed batch holding them.
	w2PebbleGet struct {
		r pebble.Reader
		k *w2Keys
	}
	w2MapPebble struct {
		s    *w2State
		k    *w2Keys
		copy bool
	}
	// w2MapPebbleBatched is the baseline of GetMany: one read lock per 64
	// keys, in the same key order, then raw pebble for the misses.
	w2MapPebbleBatched struct {
		s *w2State
		k *w2Keys
	}
)

func (x w2Kvbuf) Loop(_, lo, hi int) (int64, error) {
	var n int64
	buf := make([]byte, 0, 64)
	for i := lo; i < hi; i++ {
		v, err := x.kv.GetAppend(buf[:0], x.k.user.at(i))
		if err != nil {
			if notFound(err) {
				continue
			}
			return n, err
		}
		buf = v
		n += 1 + int64(v[len(v)-1])
	}
	return n, nil
}

func (x w2KvbufMany) Loop(_, lo, hi int) (int64, error) {
	var n int64
	var vals [manyBatch][]byte
	buf := make([]byte, 0, manyBatch*w2ValueLen)
	for j := lo; j < hi; j += manyBatch {
		e := min(j+manyBatch, hi)
		var err error
		if buf, err = x.kv.GetMany(x.k.views[j:e], vals[:], buf[:0]); err != nil {
			return n, err
		}
		for _, v := range vals[:e-j] {
			if v != nil {
				n += 1 + int64(v[len(v)-1])
			}
		}
	}
	return n, nil
}

func (x w2PebbleGet) Loop(_, lo, hi int) (int64, error) {
	var n int64
	buf := make([]byte, 0, 64)
	for i := lo; i < hi; i++ {
		var c int64
		var err error
		if buf, c, err = pebbleCheck(x.r, buf, x.k.stored.at(i)); err != nil {
			return n, err
		}
		n += c
	}
	return n, nil
}

// pebbleCheck reads stored key k from r into buf and returns the check sum
// of what it found: 1 + the value's last byte, or 0 for none.
func pebbleCheck(r pebble.Reader, buf, k []byte) ([]byte, int64, error) {
	buf, ok, err := pebbleGet(r, buf, k)
	if !ok || err != nil {
		return buf, 0, err
	}
	return buf, 1 + int64(buf[len(buf)-1]), nil
}

func (x w2MapPebble) Loop(_, lo, hi int) (int64, error) {
	var n int64
	s := x.s
	buf := make([]byte, 0, 64)
	for i := lo; i < hi; i++ {
		s.rwmu.RLock()
		v, ok := s.pending[string(x.k.user.at(i))]
		s.rwmu.RUnlock()
		if ok {
			if v == nil {
				continue // tombstone
			}
			if x.copy {
				buf = append(buf[:0], v...)
				v = buf
			}
			n += 1 + int64(v[len(v)-1])
			continue
		}
		var c int64
		var err error
		if buf, c, err = pebbleCheck(s.pdb, buf, x.k.stored.at(i)); err != nil {
			return n, err
		}
		n += c
	}
	return n, nil
}

func (x w2MapPebbleBatched) Loop(_, lo, hi int) (int64, error) {
	var n int64
	s := x.s
	var vals [manyBatch][]byte
	var found [manyBatch]bool
	buf := make([]byte, 0, 64)
	for j := lo; j < hi; j += manyBatch {
		e := min(j+manyBatch, hi)
		s.rwmu.RLock()
		for i := j; i < e; i++ {
			vals[i-j], found[i-j] = s.pending[string(x.k.user.at(i))]
		}
		s.rwmu.RUnlock()
		for i := j; i < e; i++ {
			if found[i-j] {
				if v := vals[i-j]; v != nil {
					buf = append(buf[:0], v...)
					n += 1 + int64(buf[len(buf)-1])
				}
				continue
			}
			var c int64
			var err error
			if buf, c, err = pebbleCheck(s.pdb, buf, x.k.stored.at(i)); err != nil {
				return n, err
			}
			n += c
		}
	}
	return n, nil
}
