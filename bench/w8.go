package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf"
)

// W8 sizes at Scale 1 (doc/workloads.md).
const (
	w8Batch     = 64     // puts per op
	w8Ops       = 10_000 // ops per round
	w8HotWrites = 10     // writes of each key in the hot-keys round
	w8DeleteKey = 1 << 20
)

// w8Puts is one round's puts: keys, and values derived from the round so
// that every round writes new values.
type w8Puts struct {
	keys   flatKeys
	stored flatKeys
	vals   []byte
	// finals are the indexes of the puts that leave each key's value: the
	// last put of every distinct key, what a read-back expects.
	finals []int
	// distinct is the number of distinct keys.
	distinct int
}

func newW8Puts(keys []uint64) *w8Puts {
	f := u64Keys(keys)
	p := &w8Puts{keys: f, stored: f.stored(), vals: make([]byte, len(keys)*w2ValueLen)}
	last := make(map[uint64]int, len(keys))
	for i, k := range keys {
		last[k] = i
	}
	for i, k := range keys {
		if last[k] == i {
			p.finals = append(p.finals, i)
		}
	}
	p.distinct = len(p.finals)
	return p
}

func (p *w8Puts) len() int { return p.keys.len() }

// fill sets the values of round r: the put's index and r.
func (p *w8Puts) fill(r uint64) {
	for i := range p.len() {
		binary.BigEndian.PutUint64(p.vals[i*16:], uint64(i))
		binary.BigEndian.PutUint64(p.vals[i*16+8:], r)
	}
}

func (p *w8Puts) val(i int) []byte { return p.vals[i*16 : i*16+16 : i*16+16] }

// readBack reads back a sample of the keys p's last fill wrote (their
// final values) with get.
func (p *w8Puts) readBack(row string, want int, r uint64, get kvGetter) (int64, error) {
	idx := readBackSample(len(p.finals), want, r)
	return readBackKV(row, idx, func(j int) []byte { return p.keys.at(p.finals[j]) },
		func(j int) []byte { return p.val(p.finals[j]) }, get)
}

// w8State is W8's engines and stores. The engine of the kvbuf rows keeps a
// round of puts pending (its pending limit is sized so that no flush
// starts during one); the raw pebble baselines get the memory it has
// (doc/workloads.md, "Fairness"): a memtable of its pending budget (or of
// the store's own size, the "…-store-memtable" rows) and its block cache.
type w8State struct {
	db, def  *kvbuf.DB
	kv, dkv  *kvbuf.KV
	budget   *pebble.DB // WAL, memtable = the engine's pending budget
	store    *pebble.DB // WAL, the store's memtable
	noWAL    *pebble.DB // no WAL, memtable = the engine's pending budget
	noWALSto *pebble.DB // no WAL, the store's memtable
	batch    *kvbuf.Batch
	readBack int
	op       atomic.Uint64 // the engine's op numbers, shared by its rows
	round    atomic.Uint64 // rounds of every row, so each round's values differ
}

// setupW8 builds W8 (batch writes) and the delete-range rows.
func setupW8(_ context.Context, s *Suite, c Config) error {
	st, err := newW8State(s, c)
	if err != nil {
		return err
	}
	nPuts := c.scaled(w8Ops, 4) * w8Batch
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed+8))
	unique := newW8Puts(distinct(rng, nPuts, w6Space))
	hotKeys := distinct(rng, nPuts/w8HotWrites, w6Space)
	hot := make([]uint64, 0, nPuts)
	for range w8HotWrites {
		rng.Shuffle(len(hotKeys), func(i, j int) { hotKeys[i], hotKeys[j] = hotKeys[j], hotKeys[i] })
		hot = append(hot, hotKeys...)
	}
	quiesce := quiesceAll([]*kvbuf.DB{st.db, st.def}, st.budget, st.store, st.noWAL, st.noWALSto)
	settle := settleRounds([]*kvbuf.DB{st.db, st.def}, st.budget, st.store, st.noWAL, st.noWALSto)
	const put = 8 + w2ValueLen // the user data of one put: its key and value
	s.add(
		&Workload{Name: "W8/batch-64-puts", Unit: "put", Writes: true, Label: LabelWriteOnly, UserBytesPerOp: put, quiesce: quiesce, settle: settle, Impls: st.writeOnly(unique)},
		&Workload{Name: "W8/end-to-end-unique", Unit: "put", Writes: true, UserBytesPerOp: put, quiesce: quiesce, settle: settle, Impls: st.endToEnd(unique)},
		&Workload{Name: "W8/end-to-end-hot-keys-x10", Unit: "put", Writes: true, UserBytesPerOp: put, quiesce: quiesce, settle: settle, Impls: st.endToEnd(newW8Puts(hot))},
		st.deleteRange(c, quiesce),
	)
	return nil
}

// newW8State opens W8's engines and raw pebble databases.
func newW8State(s *Suite, c Config) (*w8State, error) {
	nPuts := c.scaled(w8Ops, 4) * w8Batch
	opts := pendingOptions(kvNeed(nPuts))
	st := &w8State{readBack: c.ReadBack}
	var err error
	if st.db, st.kv, err = openKV(s, "engine", "w8", opts); err != nil {
		return nil, err
	}
	if st.def, st.dkv, err = openKV(s, "engine-default", "w8", nil); err != nil {
		return nil, err
	}
	cache := baselineCache(opts)
	for _, p := range []struct {
		db   **pebble.DB
		name string
		c    pebbleConfig
	}{
		{&st.budget, "pebble", pebbleConfig{memtable: budgetMemtable(opts), cache: cache}},
		{&st.store, "pebble-store-memtable", pebbleConfig{cache: cache}},
		{&st.noWAL, "pebble-nowal", pebbleConfig{memtable: budgetMemtable(opts), cache: cache, noWAL: true}},
		{&st.noWALSto, "pebble-nowal-store-memtable", pebbleConfig{cache: cache, noWAL: true}},
	} {
		if *p.db, err = openPebbleConfig(s, p.name, p.c); err != nil {
			return nil, err
		}
	}
	st.batch = st.db.NewBatch()
	return st, nil
}

// applyAll applies p's puts to kv in batches of w8Batch, one op each.
func (st *w8State) applyAll(ctx context.Context, db *kvbuf.DB, kv *kvbuf.KV, b *kvbuf.Batch, p *w8Puts) error {
	for j := 0; j < p.len(); j += w8Batch {
		b.Reset()
		for i := j; i < j+w8Batch; i++ {
			b.Put(kv, p.keys.at(i), p.val(i))
		}
		if err := db.Apply(ctx, b, st.op.Add(1)); err != nil {
			return err
		}
	}
	return nil
}

// pebbleBatches commits p's puts to pdb in batches of w8Batch without
// sync, reusing b.
func pebbleBatches(pdb *pebble.DB, b *pebble.Batch, p *w8Puts) error {
	for j := 0; j < p.len(); j += w8Batch {
		b.Reset()
		for i := j; i < j+w8Batch; i++ {
			if err := b.Set(p.stored.at(i), p.val(i), nil); err != nil {
				return err
			}
		}
		if err := pdb.Apply(b, pebble.NoSync); err != nil {
			return err
		}
	}
	return nil
}

// pebbleOneBatch commits p's puts to pdb as one batch, synced.
func pebbleOneBatch(pdb *pebble.DB, p *w8Puts) error {
	b := pdb.NewBatch()
	for i := range p.len() {
		if err := b.Set(p.stored.at(i), p.val(i), nil); err != nil {
			b.Close()
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		b.Close()
		return err
	}
	return b.Close()
}

// writeRound is a W8 row's round: fill the round's values, time write,
// then (not timed) read back a sample of what it wrote with get and run
// after (a flush that empties the engine for the next round).
func (st *w8State) writeRound(row string, p *w8Puts, write func(ctx context.Context) error, get kvGetter, after func(ctx context.Context) error) Rounder {
	n := p.len()
	return RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
		r := st.round.Add(1)
		p.fill(r)
		res := RoundResult{Ops: n, Checks: int64(n)}
		if err := Timed(&res, func() error { return write(ctx) }); err != nil {
			return res, err
		}
		var err error
		if res.ReadBack, err = p.readBack(row, st.readBack, r, get); err != nil {
			return res, err
		}
		if after != nil {
			err = after(ctx)
		}
		return res, err
	})
}

// flushAfter returns an untimed step that fails if the pending limit
// flushed db during the round (pinned, the check pendingGuard returned at
// the round's start) and then flushes db, so that the next round starts
// with nothing pending.
func flushAfter(db *kvbuf.DB, pinned *func() error) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := (*pinned)(); err != nil {
			return err
		}
		return db.Flush(ctx)
	}
}

// arenaMap is the careful engineer's locked write buffer: a map sized once
// and cleared (not reallocated) every round, whose keys and values live in
// one arena reset with it, so that a put costs one map insert and two
// appends (no allocation).
type arenaMap struct {
	mu    sync.Mutex
	m     map[string][]byte
	arena []byte
}

func newArenaMap(entries, bytes int) *arenaMap {
	return &arenaMap{m: make(map[string][]byte, entries), arena: make([]byte, 0, bytes)}
}

// reset empties the map and the arena, keeping their memory.
func (a *arenaMap) reset() {
	clear(a.m)
	a.arena = a.arena[:0]
}

// copyIn copies b into the arena and returns the copy. The arena is sized
// for a round, so it never moves while the map refers to it (if a round
// outgrew it, append would move it and the old copies stay valid).
func (a *arenaMap) copyIn(b []byte) []byte {
	start := len(a.arena)
	a.arena = append(a.arena, b...)
	return a.arena[start:len(a.arena):len(a.arena)]
}

// putLocked copies key and value into the arena and maps one to the other.
func (a *arenaMap) putLocked(key, val []byte) {
	k := a.copyIn(key)
	a.m[unsafe.String(unsafe.SliceData(k), len(k))] = a.copyIn(val)
}

// putBatches puts p's puts in batches of w8Batch, one lock each.
func (a *arenaMap) putBatches(p *w8Puts) {
	for j := 0; j < p.len(); j += w8Batch {
		a.mu.Lock()
		for i := j; i < j+w8Batch; i++ {
			a.putLocked(p.keys.at(i), p.val(i))
		}
		a.mu.Unlock()
	}
}

func (a *arenaMap) get(dst, key []byte) ([]byte, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.m[string(key)]
	return append(dst, v...), ok, nil
}

// writeOnly are the rows of W8/batch-64-puts, all labelled write only: the
// cost of the writes alone, nothing made durable. The engine's rounds end
// with a Flush that is not timed, after the read-back; a round fails if
// the pending limit flushed during it.
func (st *w8State) writeOnly(p *w8Puts) []Impl {
	n := p.len()
	var pinned func() error
	pin := func(db *kvbuf.DB, write func(ctx context.Context) error) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			pinned = pendingGuard(db)
			return write(ctx)
		}
	}
	am := newArenaMap(p.distinct, n*(8+w2ValueLen))
	var tmu sync.RWMutex
	tree := newW2Tree()
	var tarena []byte
	pb := st.budget.NewBatch()
	return []Impl{
		{Name: ImplKvbuf, Round: st.writeRound(ImplKvbuf, p, pin(st.db, func(ctx context.Context) error {
			return st.applyAll(ctx, st.db, st.kv, st.batch, p)
		}), kvbufGetter(st.kv), flushAfter(st.db, &pinned))},
		{Name: ImplKvbufSinglePuts, Round: st.writeRound(ImplKvbufSinglePuts, p, pin(st.db, func(ctx context.Context) error {
			var o uint64
			for j := 0; j < n; j += w8Batch {
				o = st.op.Add(1) // 64 single calls make up one op (the next one's first write ends it)
				for i := j; i < j+w8Batch; i++ {
					if err := st.kv.Put(ctx, p.keys.at(i), p.val(i), o); err != nil {
						return err
					}
				}
			}
			return st.db.EndOp(ctx, o)
		}), kvbufGetter(st.kv), flushAfter(st.db, &pinned))},
		{Name: ImplPebbleNoSync, Round: st.writeRound(ImplPebbleNoSync, p, func(context.Context) error {
			return pebbleBatches(st.budget, pb, p)
		}, pebbleGetter(st.budget), nil)},
		{Name: ImplMapArena, Round: st.writeRound(ImplMapArena, p, func(context.Context) error {
			am.reset() // cleared as a buffer is after its flush: its memory stays
			am.putBatches(p)
			return nil
		}, am.get, nil)},
		{Name: ImplBTreeArena, Round: st.writeRound(ImplBTreeArena, p, func(context.Context) error {
			tree.Clear()
			tarena = tarena[:0]
			for j := 0; j < n; j += w8Batch {
				tmu.Lock()
				for i := j; i < j+w8Batch; i++ {
					k0 := len(tarena)
					tarena = append(tarena, p.keys.at(i)...)
					v0 := len(tarena)
					tarena = append(tarena, p.val(i)...)
					k := tarena[k0:v0]
					tree.Set(w2Item{unsafe.String(unsafe.SliceData(k), len(k)), tarena[v0:len(tarena):len(tarena)]})
				}
				tmu.Unlock()
			}
			return nil
		}, func(dst, key []byte) ([]byte, bool, error) {
			tmu.RLock()
			defer tmu.RUnlock()
			it, ok := tree.Get(w2Item{key: string(key)})
			return append(dst, it.val...), ok, nil
		}, nil)},
	}
}

// endToEnd are the rows of W8's end-to-end workloads: the puts and what
// makes them durable, timed together; every row has made all of them
// durable when its clock stops. The pebble rows are the configurations of
// pebble_baselines.go; mutex+map+pebble-batch-sync is a careful user's own
// buffer: the puts coalesced in an arena map, then written as one synced
// batch to pebble configured like the engine's store.
func (st *w8State) endToEnd(p *w8Puts) []Impl {
	interval := baselineInterval()
	am := newArenaMap(p.distinct, p.len()*(8+w2ValueLen))
	batches := map[*pebble.DB]*pebble.Batch{}
	batchOf := func(pdb *pebble.DB) *pebble.Batch {
		if batches[pdb] == nil {
			batches[pdb] = pdb.NewBatch()
		}
		return batches[pdb]
	}
	row := func(name string, write func(ctx context.Context) error, get kvGetter) Impl {
		return Impl{Name: name, Round: st.writeRound(name, p, write, get, nil)}
	}
	oneBatch := func(name string, pdb *pebble.DB) Impl {
		return row(name, func(context.Context) error { return pebbleOneBatch(pdb, p) }, pebbleGetter(pdb))
	}
	periodic := func(name string, pdb *pebble.DB, durable func() error) Impl {
		b := batchOf(pdb)
		return row(name, func(context.Context) error {
			return withDurableEvery(interval, durable, func() error { return pebbleBatches(pdb, b, p) })
		}, pebbleGetter(pdb))
	}
	dbatch := st.def.NewBatch()
	return []Impl{
		row(ImplKvbuf, func(ctx context.Context) error {
			if err := st.applyAll(ctx, st.db, st.kv, st.batch, p); err != nil {
				return err
			}
			return st.db.Flush(ctx)
		}, kvbufGetter(st.kv)),
		row(ImplKvbufDefault, func(ctx context.Context) error {
			if err := st.applyAll(ctx, st.def, st.dkv, dbatch, p); err != nil {
				return err
			}
			return st.def.Flush(ctx) // timed until nothing is pending
		}, kvbufGetter(st.dkv)),
		oneBatch(ImplPebbleBatchSync, st.budget),
		oneBatch(ImplPebbleBatchSyncStoreMT, st.store),
		periodic(ImplPebbleLogSync, st.budget, logSync(st.budget)),
		periodic(ImplPebbleLogSyncStoreMT, st.store, logSync(st.store)),
		periodic(ImplPebbleNoWALFlush, st.noWAL, flushMemtable(st.noWAL)),
		periodic(ImplPebbleNoWALFlushStoreMT, st.noWALSto, flushMemtable(st.noWALSto)),
		row(ImplMapPebbleBatchSync, func(context.Context) error {
			am.reset()
			am.putBatches(p)
			b := st.store.NewBatch()
			var sk []byte
			am.mu.Lock() // the flush swaps nothing out here: the round is over
			for k, v := range am.m {
				sk = storedKey(sk[:0], unsafe.Slice(unsafe.StringData(k), len(k)))
				if err := b.Set(sk, v, nil); err != nil {
					am.mu.Unlock()
					b.Close()
					return err
				}
			}
			am.mu.Unlock()
			if err := b.Commit(pebble.Sync); err != nil {
				b.Close()
				return err
			}
			return b.Close()
		}, pebbleGetter(st.store)),
	}
}

// deleteRange is W8/delete-1m: the deletion of the keys i×4, i <
// 1,048,576, made durable. kvbuf: one KV.DeleteRange and the Flush;
// pebble-deleterange+sync: one DB.DeleteRange committed with sync (O(1)
// too: a range tombstone); delete-loop: the engine's own KV.Delete per key
// and the Flush. Before each round (not timed) the keys the round reads
// back and one key past the range are written and made durable on the
// row's side; after it (not timed) the deleted ones must be gone and the
// one past the range still there.
func (st *w8State) deleteRange(c Config, quiesce func(context.Context) error) *Workload {
	nDel := c.scaled(w8DeleteKey, 64)
	delKeys := newFlatKeys(8, nDel)
	for i := range nDel {
		delKeys.b = u64Key(delKeys.b, uint64(i)*4)
	}
	delLo, delHi := u64Key(nil, 0), u64Key(nil, uint64(nDel)*4)
	sLo, sHi := storedKey(nil, delLo), storedKey(nil, delHi)
	past := delHi // the first key after the range: must survive
	pastVal := []byte("w8-delete-1m-survivor")
	// keys are the round's read-back keys (indexes into delKeys) and the
	// key past the range, last.
	keyAt := func(idx []int) func(j int) []byte {
		return func(j int) []byte {
			if j == len(idx) {
				return past
			}
			return delKeys.at(idx[j])
		}
	}
	want := func(idx []int) func(j int) []byte {
		return func(j int) []byte {
			if j == len(idx) {
				return pastVal
			}
			return nil
		}
	}
	all := func(idx []int) []int {
		out := make([]int, len(idx)+1)
		for j := range out {
			out[j] = j
		}
		return out
	}
	row := func(name string, prefill func(ctx context.Context, idx []int) error, del func(ctx context.Context) error, get kvGetter) Impl {
		return Impl{Name: name, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			r := st.round.Add(1)
			idx := readBackSample(nDel, st.readBack, r)
			if err := prefill(ctx, idx); err != nil {
				return RoundResult{}, fmt.Errorf("prefill: %w", err)
			}
			res := RoundResult{Ops: 1, Checks: int64(nDel)}
			if err := Timed(&res, func() error { return del(ctx) }); err != nil {
				return res, err
			}
			var err error
			res.ReadBack, err = readBackKV(name, all(idx), keyAt(idx), want(idx), get)
			return res, err
		})}
	}
	kvbufPrefill := func(ctx context.Context, idx []int) error {
		b := st.db.NewBatch()
		for _, i := range idx {
			b.Put(st.kv, delKeys.at(i), delKeys.at(i))
		}
		b.Put(st.kv, past, pastVal)
		if err := st.db.Apply(ctx, b, st.op.Add(1)); err != nil {
			return err
		}
		return st.db.Flush(ctx)
	}
	pebblePrefill := func(_ context.Context, idx []int) error {
		b := st.store.NewBatch()
		defer b.Close()
		for _, i := range idx {
			k := storedKey(nil, delKeys.at(i))
			if err := b.Set(k, delKeys.at(i), nil); err != nil {
				return err
			}
		}
		if err := b.Set(storedKey(nil, past), pastVal, nil); err != nil {
			return err
		}
		return b.Commit(pebble.Sync)
	}
	return &Workload{Name: "W8/delete-1m", Unit: "1M deletes", Writes: true, quiesce: quiesce, Impls: []Impl{
		row(ImplKvbuf, kvbufPrefill, func(ctx context.Context) error {
			if err := st.kv.DeleteRange(ctx, delLo, delHi, st.op.Add(1)); err != nil {
				return err
			}
			return st.db.Flush(ctx)
		}, kvbufGetter(st.kv)),
		row(ImplPebbleDeleteRangeSync, pebblePrefill, func(context.Context) error {
			return st.store.DeleteRange(sLo, sHi, pebble.Sync)
		}, pebbleGetter(st.store)),
		row(ImplDeleteLoop, kvbufPrefill, func(ctx context.Context) error {
			o := st.op.Add(1)
			for i := range nDel {
				if err := st.kv.Delete(ctx, delKeys.at(i), o); err != nil {
					return err
				}
			}
			if err := st.db.EndOp(ctx, o); err != nil {
				return err
			}
			return st.db.Flush(ctx)
		}, kvbufGetter(st.kv)),
	}}
}
