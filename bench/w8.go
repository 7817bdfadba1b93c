package bench

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/tidwall/btree"

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
}

func newW8Puts(keys []uint64) *w8Puts {
	f := u64Keys(keys)
	return &w8Puts{keys: f, stored: f.stored(), vals: make([]byte, len(keys)*w2ValueLen)}
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

// w8State is W8's engines and stores. The engine and raw pebble have the
// same memory budget: the engine's pending limit is sized so that a round
// of puts stays pending (a flush starts at half the limit), and raw
// pebble's memtable is as large as that limit, so that neither side's
// timed write-only round includes a flush of what it wrote.
type w8State struct {
	db, def *kvbuf.DB
	kv, dkv *kvbuf.KV
	pdb     *pebble.DB
	batch   *kvbuf.Batch
	pb      *pebble.Batch
	op      atomic.Uint64 // the engine's op numbers, shared by its rows
	round   atomic.Uint64 // rounds of every row, so each round's values differ
}

// setupW8 builds W8 (batch writes) and the delete-range feature rows.
func setupW8(_ context.Context, s *Suite, c Config) error {
	nOps := c.scaled(w8Ops, 4)
	nPuts := nOps * w8Batch
	opts := pendingOptions(kvNeed(nPuts))
	st := &w8State{}
	var err error
	if st.db, st.kv, err = openKV(s, "engine", "w8", opts); err != nil {
		return err
	}
	if st.def, st.dkv, err = openKV(s, "engine-default", "w8", nil); err != nil {
		return err
	}
	if st.pdb, err = openPebble(s, "pebble", uint64(opts.MaxPendingBytes)); err != nil {
		return err
	}
	st.batch = st.db.NewBatch()
	st.pb = st.pdb.NewBatch()
	s.onClose(st.pb.Close)
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed+8))
	unique := newW8Puts(distinct(rng, nPuts, w6Space))
	hotKeys := distinct(rng, nPuts/w8HotWrites, w6Space)
	hot := make([]uint64, 0, nPuts)
	for range w8HotWrites {
		rng.Shuffle(len(hotKeys), func(i, j int) { hotKeys[i], hotKeys[j] = hotKeys[j], hotKeys[i] })
		hot = append(hot, hotKeys...)
	}
	quiesce := quiesceAll([]*kvbuf.DB{st.db, st.def}, st.pdb)
	s.add(
		&Workload{Name: "W8/batch-64-puts", Unit: "put", quiesce: quiesce, Impls: st.writeOnly(unique)},
		&Workload{Name: "W8/end-to-end-unique", Unit: "put", quiesce: quiesce, Impls: st.endToEnd(unique)},
		&Workload{Name: "W8/end-to-end-hot-keys-x10", Unit: "put", quiesce: quiesce, Impls: st.endToEnd(newW8Puts(hot))},
		st.deleteRange(c, quiesce),
	)
	return nil
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

// pebbleAll commits p's puts to raw pebble in batches of w8Batch without
// sync; with syncLast, the last batch is committed with sync, which makes
// every earlier one durable too.
func (st *w8State) pebbleAll(p *w8Puts, syncLast bool) error {
	for j := 0; j < p.len(); j += w8Batch {
		st.pb.Reset()
		for i := j; i < j+w8Batch; i++ {
			if err := st.pb.Set(p.stored.at(i), p.val(i), nil); err != nil {
				return err
			}
		}
		opt := pebble.NoSync
		if syncLast && j+w8Batch >= p.len() {
			opt = pebble.Sync
		}
		if err := st.pb.Commit(opt); err != nil {
			return err
		}
	}
	return nil
}

// flushUntimed flushes db after a write-only round, so that the next round
// starts with nothing pending; it fails if a flush already ran during the
// round (the pending limit was too small for the comparison to be
// write-only).
func flushUntimed(ctx context.Context, db *kvbuf.DB, check func() error) error {
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	return db.Flush(ctx)
}

// writeOnly are the rows of W8/batch-64-puts: the cost of the writes
// alone. The engines' rounds end with a Flush that is not timed.
func (st *w8State) writeOnly(p *w8Puts) []Impl {
	n := p.len()
	kvbufRound := func(db *kvbuf.DB, kv *kvbuf.KV, pinned bool) Rounder {
		b := db.NewBatch()
		return RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			p.fill(st.round.Add(1))
			var check func() error
			if pinned {
				check = pendingGuard(db)
			}
			res := RoundResult{Ops: n, Checks: int64(n)}
			if err := Timed(&res, func() error { return st.applyAll(ctx, db, kv, b, p) }); err != nil {
				return res, err
			}
			return res, flushUntimed(ctx, db, check)
		})
	}
	var mu sync.Mutex
	var m map[string][]byte
	var tmu sync.RWMutex
	var tree *btree.BTreeG[w2Item]
	return []Impl{
		{Name: ImplKvbuf, Round: kvbufRound(st.db, st.kv, true)},
		{Name: ImplKvbufSinglePuts, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			p.fill(st.round.Add(1))
			check := pendingGuard(st.db)
			res := RoundResult{Ops: n, Checks: int64(n)}
			if err := Timed(&res, func() error {
				for j := 0; j < n; j += w8Batch {
					o := st.op.Add(1) // 64 single calls make up one op
					for i := j; i < j+w8Batch; i++ {
						if err := st.kv.Put(ctx, p.keys.at(i), p.val(i), o); err != nil {
							return err
						}
					}
				}
				return nil
			}); err != nil {
				return res, err
			}
			return res, flushUntimed(ctx, st.db, check)
		})},
		{Name: ImplKvbufDefault, Round: kvbufRound(st.def, st.dkv, false)},
		{Name: ImplPebbleNoSync, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
			p.fill(st.round.Add(1))
			res := RoundResult{Ops: n, Checks: int64(n)}
			return res, Timed(&res, func() error { return st.pebbleAll(p, false) })
		})},
		{Name: ImplMutexMap, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
			p.fill(st.round.Add(1))
			m = map[string][]byte{} // a fresh map, as a flushed buffer starts empty
			res := RoundResult{Ops: n, Checks: int64(n)}
			return res, Timed(&res, func() error {
				for j := 0; j < n; j += w8Batch {
					mu.Lock()
					for i := j; i < j+w8Batch; i++ {
						m[string(p.keys.at(i))] = append([]byte(nil), p.val(i)...)
					}
					mu.Unlock()
				}
				return nil
			})
		})},
		{Name: ImplRWMutexBTree, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
			p.fill(st.round.Add(1))
			tree = newW2Tree()
			res := RoundResult{Ops: n, Checks: int64(n)}
			return res, Timed(&res, func() error {
				for j := 0; j < n; j += w8Batch {
					tmu.Lock()
					for i := j; i < j+w8Batch; i++ {
						tree.Set(w2Item{string(p.keys.at(i)), append([]byte(nil), p.val(i)...)})
					}
					tmu.Unlock()
				}
				return nil
			})
		})},
	}
}

// endToEnd are the rows of W8's end-to-end workloads: the puts and what
// makes them durable, timed together. kvbuf applies them in batches of 64
// and then calls Flush; raw pebble commits the same batches without sync
// and the last one with sync.
func (st *w8State) endToEnd(p *w8Puts) []Impl {
	n := p.len()
	return []Impl{
		{Name: ImplKvbuf, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			p.fill(st.round.Add(1))
			res := RoundResult{Ops: n, Checks: int64(n)}
			return res, Timed(&res, func() error {
				if err := st.applyAll(ctx, st.db, st.kv, st.batch, p); err != nil {
					return err
				}
				return st.db.Flush(ctx)
			})
		})},
		{Name: ImplPebbleNoSyncSync, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
			p.fill(st.round.Add(1))
			res := RoundResult{Ops: n, Checks: int64(n)}
			return res, Timed(&res, func() error { return st.pebbleAll(p, true) })
		})},
	}
}

// deleteRange is W8/delete-1m (a feature row): one KV.DeleteRange over the
// keys i×4, i < 1,048,576, against a loop of KV.Delete of the same keys;
// one op is the whole deletion; a Flush (not timed) follows each round.
func (st *w8State) deleteRange(c Config, quiesce func(context.Context) error) *Workload {
	nDel := c.scaled(w8DeleteKey, 64)
	delKeys := newFlatKeys(8, nDel)
	for i := range nDel {
		delKeys.b = u64Key(delKeys.b, uint64(i)*4)
	}
	delLo, delHi := u64Key(nil, 0), u64Key(nil, uint64(nDel)*4)
	timedThenFlush := func(ctx context.Context, f func() error) (RoundResult, error) {
		res := RoundResult{Ops: 1, Checks: int64(nDel)}
		if err := Timed(&res, f); err != nil {
			return res, err
		}
		return res, st.db.Flush(ctx)
	}
	return &Workload{Name: "W8/delete-1m", Unit: "1M deletes", quiesce: quiesce, Impls: []Impl{
		{Name: ImplKvbuf, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			return timedThenFlush(ctx, func() error { return st.kv.DeleteRange(ctx, delLo, delHi, st.op.Add(1)) })
		})},
		{Name: ImplDeleteLoop, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			return timedThenFlush(ctx, func() error {
				o := st.op.Add(1)
				for i := range nDel {
					if err := st.kv.Delete(ctx, delKeys.at(i), o); err != nil {
						return err
					}
				}
				return nil
			})
		})},
	}}
}
