package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// W6 sizes at Scale 1 (doc/workloads.md).
const (
	w6Changes = 1_000_000
	w6Space   = 4_194_304 // KV keys are drawn from [0, w6Space); bits from W1's slice
)

// setupW6 builds W6 (flush throughput): one engine with a keyspace and a
// bitslice, a raw pebble database opened like the engine's store and a raw
// bitslice file. Each round of a kvbuf row makes 1,000,000 changes pending
// (not timed) and times one Flush; the baselines time writing the same
// changes directly.
func setupW6(ctx context.Context, s *Suite, c Config) error {
	n := c.scaled(w6Changes, 64)
	nbits := uint64(c.scaled(w1Bits, 64))
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed+6))
	m, err := openMixedSides(s, "w6", nbits)
	if err != nil {
		return err
	}
	db, kv, bits, pdb, raw := m.db, m.kv, m.bits, m.pdb, m.raw

	space := uint64(c.scaled(w6Space, 256))
	keys := newFlatKeys(8, n)
	for range n {
		keys.b = u64Key(keys.b, rng.Uint64N(space))
	}
	stored := keys.stored(engineKeyspace(kv))
	sorted := make([]int, n)
	for i := range sorted {
		sorted[i] = i
	}
	slices.SortFunc(sorted, func(a, b int) int { return bytes.Compare(stored.at(a), stored.at(b)) })
	// Values: 16 bytes, the change's index and the round, so every round
	// writes new values.
	vals := make([]byte, n*w2ValueLen)
	fill := func(r uint64) {
		for i := range n {
			binary.BigEndian.PutUint64(vals[i*16:], uint64(i))
			binary.BigEndian.PutUint64(vals[i*16+8:], r)
		}
	}
	val := func(i int) []byte { return vals[i*16 : i*16+16 : i*16+16] }
	changes := w1Changes(rng, n, nbits)
	var round atomic.Uint64 // rounds of every row, so each round's values differ

	pebbleBatch := func(order []int) Rounder {
		return RoundFunc(func(context.Context, int) (RoundResult, error) {
			fill(round.Add(1))
			res := RoundResult{Ops: 1, Checks: int64(n)}
			err := Timed(&res, func() error {
				b := pdb.NewBatch()
				for k := range n {
					i := k
					if order != nil {
						i = order[k]
					}
					if err := b.Set(stored.at(i), val(i), nil); err != nil {
						return err
					}
				}
				if err := b.Commit(pebble.Sync); err != nil {
					return err
				}
				return b.Close()
			})
			return res, err
		})
	}
	// flushRound makes changes pending with pend (not timed), then times
	// one engine Flush.
	flushRound := func(pend func(ctx context.Context) error) Rounder {
		return RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			if err := pend(ctx); err != nil {
				return RoundResult{}, err
			}
			res := RoundResult{Ops: 1, Checks: int64(n)}
			return res, Timed(&res, func() error { return db.Flush(ctx) })
		})
	}
	quiesce := quiesceAll(db, pdb)
	s.add(
		&Workload{Name: "W6/flush-kv-1m", Unit: "flush", quiesce: quiesce, Impls: []Impl{
			{Name: ImplKvbuf, Round: flushRound(func(ctx context.Context) error {
				fill(round.Add(1))
				for i := range n {
					if err := kv.Put(ctx, keys.at(i), val(i), 0); err != nil {
						return err
					}
				}
				return nil
			})},
			{Name: ImplPebbleBatchSync, Round: pebbleBatch(nil)},
			{Name: ImplPebbleBatchSyncSorted, Round: pebbleBatch(sorted)},
		}},
		&Workload{Name: "W6/flush-bits-1m", Unit: "flush", quiesce: quiesce, Impls: []Impl{
			{Name: ImplKvbuf, Round: flushRound(func(ctx context.Context) error {
				flip := round.Add(1)&1 == 1
				for _, ch := range changes {
					if err := bits.Set(ctx, ch.i, ch.v != flip, 0); err != nil {
						return err
					}
				}
				return nil
			})},
			{Name: ImplDirectApply, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
				r := round.Add(1)
				flip := r&1 == 1
				res := RoundResult{Ops: 1, Checks: int64(n)}
				err := Timed(&res, func() error {
					for _, ch := range changes {
						if err := raw.Set(ch.i, ch.v != flip); err != nil {
							return err
						}
					}
					raw.SetWatermark(r)
					return raw.Sync()
				})
				return res, err
			})},
		}},
	)
	return nil
}
