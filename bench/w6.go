package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/bitslice"
)

// W6 sizes at Scale 1 (doc/workloads.md).
const (
	w6Changes = 1_000_000
	w6Space   = 4_194_304 // KV keys are drawn from [0, w6Space); bits from W1's slice
)

// w6State is what W6's rows write: the same 1,000,000 distinct keys (in
// arrival order and sorted by stored key) with values new every round, and
// the same bit Sets, whose values flip every round so pages are dirty
// again.
type w6State struct {
	n       int
	keys    flatKeys // user keys, arrival order
	stored  flatKeys // the same in the store layout
	sorted  []int    // indexes of keys in stored-key order
	vals    []byte   // 16 bytes per key
	changes []w1Change
	words   []bitslice.WordChange // scratch of the coalescing rows
	round   atomic.Uint64         // rounds of every row, so each round's values differ
}

// fill sets the values of round r: the key's index and r.
func (w *w6State) fill(r uint64) {
	for i := range w.n {
		binary.BigEndian.PutUint64(w.vals[i*16:], uint64(i))
		binary.BigEndian.PutUint64(w.vals[i*16+8:], r)
	}
}

func (w *w6State) val(i int) []byte { return w.vals[i*16 : i*16+16 : i*16+16] }

// flipped is Set k's value in a round with flip.
func (w *w6State) flipped(k int, flip bool) bool { return w.changes[k].v != flip }

// putAll writes every key to kv, one Put each (op 0: the rows do not
// track ops).
func (w *w6State) putAll(ctx context.Context, kv *kvbuf.KV) error {
	for i := range w.n {
		if err := kv.Put(ctx, w.keys.at(i), w.val(i), 0); err != nil {
			return err
		}
	}
	return nil
}

// setAll makes every bit Set to bits.
func (w *w6State) setAll(ctx context.Context, bits *kvbuf.Bits, flip bool) error {
	for k, ch := range w.changes {
		if err := bits.Set(ctx, ch.i, w.flipped(k, flip), 0); err != nil {
			return err
		}
	}
	return nil
}

// coalesce turns the round's Sets into word changes sorted by word, as a
// user with a dense pending array would hand them to ApplyWords.
func (w *w6State) coalesce(flip bool, nbits uint64) []bitslice.WordChange {
	words := make([]bitslice.WordChange, (nbits+63)/64)
	for k, ch := range w.changes {
		wc := &words[ch.i/64]
		bit := uint64(1) << (ch.i % 64)
		wc.Mask |= bit
		if w.flipped(k, flip) {
			wc.Bits |= bit
		} else {
			wc.Bits &^= bit
		}
	}
	out := w.words[:0]
	for i, wc := range words {
		if wc.Mask != 0 {
			wc.Word = uint64(i)
			out = append(out, wc)
		}
	}
	w.words = out
	return out
}

// setupW6 builds W6 (flush throughput): an engine with a keyspace and a
// bitslice that keeps its changes pending until the round's Flush, one
// with default Options, a raw pebble database opened like the engine's
// store and a raw bitslice file.
func setupW6(_ context.Context, s *Suite, c Config) error {
	n := c.scaled(w6Changes, 64)
	nbits := uint64(c.scaled(w1Bits, 64))
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed+6))
	m, err := openMixedSides(s, "w6", nbits, pendingOptions(kvNeed(n)))
	if err != nil {
		return err
	}
	def, defKV, err := openKV(s, "engine-default", "w6", nil)
	if err != nil {
		return err
	}
	w := &w6State{n: n, keys: u64Keys(distinct(rng, n, uint64(c.scaled(w6Space, 256)))), vals: make([]byte, n*w2ValueLen)}
	w.stored = w.keys.stored()
	w.sorted = make([]int, n)
	for i := range w.sorted {
		w.sorted[i] = i
	}
	slices.SortFunc(w.sorted, func(a, b int) int { return bytes.Compare(w.stored.at(a), w.stored.at(b)) })
	w.changes = w1Changes(rng, n, nbits)
	quiesce := quiesceAll([]*kvbuf.DB{m.db, def}, m.pdb)
	s.add(
		&Workload{Name: "W6/flush-kv-1m", Unit: "flush", quiesce: quiesce, Impls: w6KV(w, m, def, defKV)},
		&Workload{Name: "W6/flush-bits-1m", Unit: "flush", quiesce: quiesce, Impls: append(w6Bits(w, m, nbits), w6BitsExtra(s, w, m)...)},
	)
	return nil
}

// w6KV are the rows of W6/flush-kv-1m. kvbuf times the puts and the Flush
// that makes them durable (whatever ordering the engine does, at write or
// at flush time, is inside); kvbuf-flush-only times the Flush alone.
// pebble-batch-sync times building one batch of the same puts in arrival
// order and committing it with sync; the sorted-input row gets the keys
// already sorted (the sort not timed).
func w6KV(w *w6State, m mixedSides, def *kvbuf.DB, defKV *kvbuf.KV) []Impl {
	putsAndFlush := func(db *kvbuf.DB, kv *kvbuf.KV) Rounder {
		return RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			w.fill(w.round.Add(1))
			res := RoundResult{Ops: 1, Checks: int64(w.n)}
			return res, Timed(&res, func() error {
				if err := w.putAll(ctx, kv); err != nil {
					return err
				}
				return db.Flush(ctx)
			})
		})
	}
	pebbleBatch := func(order []int) Rounder {
		return RoundFunc(func(context.Context, int) (RoundResult, error) {
			w.fill(w.round.Add(1))
			res := RoundResult{Ops: 1, Checks: int64(w.n)}
			return res, Timed(&res, func() error {
				b := m.pdb.NewBatch()
				for k := range w.n {
					i := k
					if order != nil {
						i = order[k]
					}
					if err := b.Set(w.stored.at(i), w.val(i), nil); err != nil {
						return err
					}
				}
				if err := b.Commit(pebble.Sync); err != nil {
					return err
				}
				return b.Close()
			})
		})
	}
	return []Impl{
		{Name: ImplKvbuf, Round: putsAndFlush(m.db, m.kv)},
		{Name: ImplKvbufFlushOnly, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			w.fill(w.round.Add(1))
			if err := w.putAll(ctx, m.kv); err != nil {
				return RoundResult{}, err
			}
			res := RoundResult{Ops: 1, Checks: int64(w.n)}
			return res, Timed(&res, func() error { return m.db.Flush(ctx) })
		})},
		{Name: ImplKvbufDefault, Round: putsAndFlush(def, defKV)},
		{Name: ImplPebbleBatchSync, Round: pebbleBatch(nil)},
		{Name: ImplPebbleSortedSync, Round: pebbleBatch(w.sorted)},
	}
}

// w6Bits are the rows of W6/flush-bits-1m: as W6/flush-kv-1m's, with the
// raw file written by one File.Set per change, by ApplyWords of words
// coalesced untimed (the input a user with pre-coalesced words has), or by
// ApplyWords with the coalescing timed; each syncs the file.
func w6Bits(w *w6State, m mixedSides, nbits uint64) []Impl {
	flip := func() (uint64, bool) {
		r := w.round.Add(1)
		return r, r&1 == 1
	}
	syncRaw := func(r uint64) error {
		m.raw.SetWatermark(r)
		return m.raw.Sync()
	}
	return []Impl{
		{Name: ImplKvbuf, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			_, f := flip()
			res := RoundResult{Ops: 1, Checks: int64(w.n)}
			return res, Timed(&res, func() error {
				if err := w.setAll(ctx, m.bits, f); err != nil {
					return err
				}
				return m.db.Flush(ctx)
			})
		})},
		{Name: ImplKvbufFlushOnly, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			_, f := flip()
			if err := w.setAll(ctx, m.bits, f); err != nil {
				return RoundResult{}, err
			}
			res := RoundResult{Ops: 1, Checks: int64(w.n)}
			return res, Timed(&res, func() error { return m.db.Flush(ctx) })
		})},
		{Name: ImplFileSetLoop, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
			r, f := flip()
			res := RoundResult{Ops: 1, Checks: int64(w.n)}
			return res, Timed(&res, func() error {
				for k, ch := range w.changes {
					if err := m.raw.Set(ch.i, w.flipped(k, f)); err != nil {
						return err
					}
				}
				return syncRaw(r)
			})
		})},
		{Name: ImplApplyWords, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
			r, f := flip()
			words := w.coalesce(f, nbits)
			res := RoundResult{Ops: 1, Checks: int64(w.n)}
			return res, Timed(&res, func() error {
				if err := m.raw.ApplyWords(words); err != nil {
					return err
				}
				return syncRaw(r)
			})
		})},
		{Name: ImplCoalesceApply, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
			r, f := flip()
			res := RoundResult{Ops: 1, Checks: int64(w.n)}
			return res, Timed(&res, func() error {
				if err := m.raw.ApplyWords(w.coalesce(f, nbits)); err != nil {
					return err
				}
				return syncRaw(r)
			})
		})},
	}
}
