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

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/storage"
)

// W2 sizes at Scale 1 (doc/workloads.md).
const (
	w2Stored   = 1_048_576 // stored keys i*4, so the key space is 4×
	w2Pending  = 1_000_000 // pending puts/deletes, 90/10
	w2Lookups  = 200_000   // per get-* round
	w2ValueLen = 16
	w2ScanLen  = 10_000
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
		ch := w2Change{key: rng.Uint64N(space)}
		if rng.IntN(10) != 0 {
			ch.val = make([]byte, w2ValueLen)
			for j := range ch.val {
				ch.val[j] = byte(rng.Uint32())
			}
		}
		out[k] = ch
	}
	return out
}

// w2State is everything W2's implementations read.
type w2State struct {
	kv   *kvbuf.KV // engine A
	twin *kvbuf.KV // engine B: the same data, for the snapshot rows
	pdb  *pebble.DB
	ib   *pebble.Batch
	ks   storage.KeyspaceID

	rwmu    sync.RWMutex
	pending map[string][]byte // nil value: tombstone
}

// w2Keys is one get workload's keys in every form an implementation takes:
// user keys (kvbuf, the map), the engine store's keys (raw pebble), and a
// slice per key (GetMany).
type w2Keys struct {
	user, stored flatKeys
	views        [][]byte
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
	w2PebbleGet struct {
		s *w2State
		k *w2Keys
	}
	w2IndexedBatch struct {
		s *w2State
		k *w2Keys
	}
	w2MapPebble struct {
		s    *w2State
		k    *w2Keys
		copy bool
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

func (x w2PebbleGet) Loop(_, lo, hi int) (int64, error) {
	var n int64
	buf := make([]byte, 0, 64)
	for i := lo; i < hi; i++ {
		var ok bool
		var err error
		if buf, ok, err = pebbleGet(x.s.pdb, buf, x.k.stored.at(i)); err != nil {
			return n, err
		}
		if ok {
			n += 1 + int64(buf[len(buf)-1])
		}
	}
	return n, nil
}

func (x w2IndexedBatch) Loop(_, lo, hi int) (int64, error) {
	var n int64
	buf := make([]byte, 0, 64)
	for i := lo; i < hi; i++ {
		var ok bool
		var err error
		if buf, ok, err = pebbleGet(x.s.ib, buf, x.k.stored.at(i)); err != nil {
			return n, err
		}
		if ok {
			n += 1 + int64(buf[len(buf)-1])
		}
	}
	return n, nil
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
		var err error
		if buf, ok, err = pebbleGet(s.pdb, buf, x.k.stored.at(i)); err != nil {
			return n, err
		}
		if ok {
			n += 1 + int64(buf[len(buf)-1])
		}
	}
	return n, nil
}

// setupW2 builds W2: two kvbuf engines (A, and its twin B for the snapshot
// rows) with a keyspace, and a raw pebble database opened like the
// engine's store, all holding the same stored keys (flushed to sstables;
// raw pebble under the engine store's own key layout); the same pending
// changes in the engines, in a pebble indexed batch and in an
// RWMutex-guarded map (measuring the live heap each takes); and the lookup
// keys of each get workload.
func setupW2(ctx context.Context, s *Suite, c Config) error {
	nStored := c.scaled(w2Stored, 64)
	space := uint64(nStored) * 4
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed+2))
	st := &w2State{pending: map[string][]byte{}}

	dbA, err := openEngine(s, "engine")
	if err != nil {
		return err
	}
	dbB, err := openEngine(s, "engine-twin")
	if err != nil {
		return err
	}
	if st.kv, err = dbA.KV("w2"); err != nil {
		return err
	}
	if st.twin, err = dbB.KV("w2"); err != nil {
		return err
	}
	st.ks = engineKeyspace(st.kv)
	if st.pdb, err = openPebble(s, "pebble"); err != nil {
		return err
	}

	// Preload the stores with the same keys, then move them to sstables.
	var op uint64
	pb := st.pdb.NewBatch()
	var kb, sk []byte
	for i := range uint64(nStored) {
		kb = u64Key(kb[:0], i*4)
		v := w2StoredValue(i)
		op++
		for _, kv := range []*kvbuf.KV{st.kv, st.twin} {
			if err := kv.Put(ctx, kb, v, op); err != nil {
				return err
			}
		}
		sk = storedKey(sk[:0], st.ks, kb)
		if err := pb.Set(sk, v, nil); err != nil {
			return err
		}
	}
	if err := pb.Commit(pebble.Sync); err != nil {
		return err
	}
	if err := pb.Close(); err != nil {
		return err
	}
	for _, db := range []*kvbuf.DB{dbA, dbB} {
		if err := db.FlushMemtables(ctx); err != nil {
			return err
		}
	}
	if err := st.pdb.Flush(); err != nil {
		return err
	}

	// The same pending changes everywhere, measuring the live heap each
	// implementation's copy of them takes.
	changes := w2Changes(rng, c.scaled(w2Pending, 64), space)
	h0 := liveHeap()
	for _, ch := range changes {
		kb = u64Key(kb[:0], ch.key)
		op++
		if ch.val == nil {
			err = st.kv.Delete(ctx, kb, op)
		} else {
			err = st.kv.Put(ctx, kb, ch.val, op)
		}
		if err != nil {
			return err
		}
	}
	h1 := liveHeap()
	m := dbA.Metrics()
	kvbufHeap := perEntry(h0, h1, int(m.PendingKeys))
	kvbufAcct := float64(m.PendingBytes) / float64(max(m.PendingKeys, 1))
	for _, ch := range changes {
		kb = u64Key(kb[:0], ch.key)
		st.pending[string(kb)] = bytes.Clone(ch.val) // the map owns its copy, as kvbuf does
	}
	h2 := liveHeap()
	mapHeap := perEntry(h1, h2, len(st.pending))
	st.ib = st.pdb.NewIndexedBatch()
	s.onClose(st.ib.Close)
	for _, ch := range changes {
		sk = storedKey(sk[:0], st.ks, u64Key(kb[:0], ch.key))
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
	ibHeap := perEntry(h2, h3, len(st.pending))
	for _, ch := range changes {
		kb = u64Key(kb[:0], ch.key)
		op++
		if ch.val == nil {
			err = st.twin.Delete(ctx, kb, op)
		} else {
			err = st.twin.Put(ctx, kb, ch.val, op)
		}
		if err != nil {
			return err
		}
	}
	if mt := dbB.Metrics(); mt.PendingKeys != m.PendingKeys {
		return fmt.Errorf("twin engine holds %d pending keys, engine %d", mt.PendingKeys, m.PendingKeys)
	}

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
		return fmt.Errorf("%w: scale too small for W2 (%d pending hits, %d tombstones)", ErrBadConfig, len(hits), len(tombs))
	}
	// Map iteration order is random: sort for reproducible key lists.
	slices.Sort(hits)
	slices.Sort(tombs)
	nLookups := c.scaled(w2Lookups, 64)
	pick := func(draw func() uint64) *w2Keys {
		f := newFlatKeys(8, nLookups)
		for range nLookups {
			f.b = u64Key(f.b, draw())
		}
		return &w2Keys{user: f, stored: f.stored(st.ks), views: f.slices()}
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
	starts := newFlatKeys(8, c.Scans)
	for range c.Scans {
		starts.b = u64Key(starts.b, rng.Uint64N(space-space/10))
	}
	storedStarts := starts.stored(st.ks)
	end := keyspaceEnd(st.ks)

	gets := func(name string, k *w2Keys) *Workload {
		return &Workload{Name: name, Unit: "get", Ops: nLookups, Parallel: true, Impls: []Impl{
			{Name: ImplKvbuf, Loop: w2Kvbuf{st.kv, k}, BytesPerEntry: kvbufHeap, AccountedBytes: kvbufAcct},
			{Name: ImplKvbufGetMany, Loop: w2KvbufMany{st.kv, k}, BytesPerEntry: kvbufHeap, AccountedBytes: kvbufAcct},
			{Name: ImplPebbleGet, Floor: true, Loop: w2PebbleGet{st, k}},
			{Name: ImplPebbleIndexedBatch, Loop: w2IndexedBatch{st, k}, BytesPerEntry: ibHeap},
			{Name: ImplRWMutexMapPebble, Loop: w2MapPebble{st, k, true}, BytesPerEntry: mapHeap},
			{Name: ImplRWMutexMapPebbleNoCopy, Loop: w2MapPebble{st, k, false}, BytesPerEntry: mapHeap},
		}}
	}
	var snaps []*kvbuf.Snapshot
	s.onClose(func() error {
		for _, sn := range snaps {
			sn.Close()
		}
		return nil
	})
	snapRows := func(name string, n int) *Workload {
		return &Workload{Name: name, Unit: "get", Ops: nLookups, Impls: []Impl{
			{Name: ImplKvbuf, Loop: w2Kvbuf{st.twin, hitKeys}},
			{Name: ImplWithoutSnapshots, Loop: w2Kvbuf{st.kv, hitKeys}},
		}, prepare: func(context.Context) error {
			for len(snaps) < n {
				sn, err := dbB.NewSnapshot()
				if err != nil {
					return err
				}
				snaps = append(snaps, sn)
			}
			return nil
		}}
	}
	scanLen := w2ScanLen
	s.add(
		gets("W2/get-pending-hit", hitKeys),
		gets("W2/get-pending-tombstone", tombKeys),
		gets("W2/get-miss", missKeys),
		gets("W2/get-mixed", mixedKeys),
		&Workload{Name: "W2/scan-10k", Unit: "scan", Ops: c.Scans, Impls: []Impl{
			{Name: ImplKvbuf, Loop: w2ScanKvbuf{st.kv, starts, scanLen}, BytesPerEntry: kvbufHeap, AccountedBytes: kvbufAcct},
			{Name: ImplPebbleIndexedBatch, Loop: w2ScanBatch{st.ib, storedStarts, end, scanLen}, BytesPerEntry: ibHeap},
		}},
		snapRows("W2/get-pending-hit-1-snapshot", 1),
		snapRows("W2/get-pending-hit-16-snapshots", 16),
	)
	return nil
}

// The scan rows: each op is one iterator from a start key reading up to
// n entries and touching each value.
type (
	w2ScanKvbuf struct {
		kv     *kvbuf.KV
		starts flatKeys
		n      int
	}
	w2ScanBatch struct {
		ib     *pebble.Batch
		starts flatKeys
		end    []byte
		n      int
	}
)

func (x w2ScanKvbuf) Loop(_, lo, hi int) (int64, error) {
	var read, vb int64
	for i := lo; i < hi; i++ {
		it, err := x.kv.NewIter(&kvbuf.IterOptions{LowerBound: x.starts.at(i)})
		if err != nil {
			return read, err
		}
		k := 0
		for ok := it.First(); ok && k < x.n; ok = it.Next() {
			k++
			vb += int64(len(it.Value()))
		}
		read += int64(k)
		if err := it.Close(); err != nil {
			return read, err
		}
	}
	_ = vb
	return read, nil
}

func (x w2ScanBatch) Loop(_, lo, hi int) (int64, error) {
	var read, vb int64
	for i := lo; i < hi; i++ {
		it, err := x.ib.NewIter(&pebble.IterOptions{LowerBound: x.starts.at(i), UpperBound: x.end})
		if err != nil {
			return read, err
		}
		k := 0
		for ok := it.First(); ok && k < x.n; ok = it.Next() {
			k++
			vb += int64(len(it.Value()))
		}
		read += int64(k)
		if err := it.Close(); err != nil {
			return read, err
		}
	}
	_ = vb
	return read, nil
}
