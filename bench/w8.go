package bench

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// W8 sizes at Scale 1 (doc/workloads.md).
const (
	w8Batch     = 64     // puts per op
	w8Ops       = 10_000 // ops per round
	w8DeleteKey = 1 << 20
)

// setupW8 builds W8 (batch writes) and the delete-range feature rows: an
// engine with one keyspace and a raw pebble database opened like the
// engine's store. Rounds of the kvbuf rows end with a Flush that is not
// timed, so that every round starts with nothing pending.
func setupW8(ctx context.Context, s *Suite, c Config) error {
	db, err := openEngine(s, "engine")
	if err != nil {
		return err
	}
	kv, err := db.KV("w8")
	if err != nil {
		return err
	}
	pdb, err := openPebble(s, "pebble")
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed+8))
	nOps := c.scaled(w8Ops, 4)
	nPuts := nOps * w8Batch
	keys := newFlatKeys(8, nPuts)
	vals := make([]byte, nPuts*w2ValueLen)
	for i := range nPuts {
		keys.b = u64Key(keys.b, rng.Uint64N(w6Space))
		binary.BigEndian.PutUint64(vals[i*16:], rng.Uint64())
		binary.BigEndian.PutUint64(vals[i*16+8:], uint64(i))
	}
	val := func(i int) []byte { return vals[i*16 : i*16+16 : i*16+16] }
	stored := keys.stored(engineKeyspace(kv))
	var op atomic.Uint64 // the engine's op numbers, shared by its rows

	// timedThenFlush times f, then flushes the engine (not timed).
	timedThenFlush := func(ctx context.Context, res RoundResult, f func() error) (RoundResult, error) {
		if err := Timed(&res, f); err != nil {
			return res, err
		}
		return res, db.Flush(ctx)
	}
	batch := db.NewBatch()
	pb := pdb.NewBatch()
	s.onClose(pb.Close)
	nDel := c.scaled(w8DeleteKey, 64)
	delKeys := newFlatKeys(8, nDel)
	for i := range nDel {
		delKeys.b = u64Key(delKeys.b, uint64(i)*4)
	}
	delLo, delHi := u64Key(nil, 0), u64Key(nil, uint64(nDel)*4)
	quiesce := quiesceAll(db, pdb)
	s.add(
		&Workload{Name: "W8/batch-64-puts", Unit: "put", quiesce: quiesce, Impls: []Impl{
			{Name: ImplKvbuf, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
				return timedThenFlush(ctx, RoundResult{Ops: nPuts, Checks: int64(nPuts)}, func() error {
					for j := 0; j < nPuts; j += w8Batch {
						batch.Reset()
						for i := j; i < j+w8Batch; i++ {
							batch.Put(kv, keys.at(i), val(i))
						}
						if err := db.Apply(ctx, batch, op.Add(1)); err != nil {
							return err
						}
					}
					return nil
				})
			})},
			{Name: ImplKvbufSinglePuts, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
				return timedThenFlush(ctx, RoundResult{Ops: nPuts, Checks: int64(nPuts)}, func() error {
					for j := 0; j < nPuts; j += w8Batch {
						o := op.Add(1) // 64 single calls make up one op
						for i := j; i < j+w8Batch; i++ {
							if err := kv.Put(ctx, keys.at(i), val(i), o); err != nil {
								return err
							}
						}
					}
					return nil
				})
			})},
			{Name: ImplPebbleBatchNoSync, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
				res := RoundResult{Ops: nPuts, Checks: int64(nPuts)}
				return res, Timed(&res, func() error {
					for j := 0; j < nPuts; j += w8Batch {
						pb.Reset()
						for i := j; i < j+w8Batch; i++ {
							if err := pb.Set(stored.at(i), val(i), nil); err != nil {
								return err
							}
						}
						if err := pb.Commit(pebble.NoSync); err != nil {
							return err
						}
					}
					return nil
				})
			})},
		}},
		&Workload{Name: "W8/delete-1m", Unit: "1M deletes", quiesce: quiesce, Impls: []Impl{
			{Name: ImplKvbuf, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
				return timedThenFlush(ctx, RoundResult{Ops: 1, Checks: int64(nDel)}, func() error {
					return kv.DeleteRange(ctx, delLo, delHi, op.Add(1))
				})
			})},
			{Name: ImplDeleteLoop, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
				return timedThenFlush(ctx, RoundResult{Ops: 1, Checks: int64(nDel)}, func() error {
					o := op.Add(1)
					for i := range nDel {
						if err := kv.Delete(ctx, delKeys.at(i), o); err != nil {
							return err
						}
					}
					return nil
				})
			})},
		}},
	)
	return nil
}
