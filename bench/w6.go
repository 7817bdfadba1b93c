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
	"github.com/kvbuf/kvbuf/internal/workload"
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
	finals  []int                 // indexes of the changes that leave each bit's value (the last Set of it)
	// readBack is Config.ReadBack: how many values each round reads back.
	readBack int
	round    atomic.Uint64 // rounds of every row, so each round's values differ
	// flips counts the rounds of the rows writing each target (the raw
	// file, the engine's bitslice, the roaring bitmap): a row's values
	// are the opposite of the last ones written to its target, so that
	// every bit a round sets changes and every page it touches is dirty
	// again (with one parity for all rows, two rows of one target could
	// write the same values in turn, and the second's words would be
	// unchanged: nothing to write back, a free msync).
	flips [w6Targets]atomic.Uint64
}

// The targets the W6 bit rows write (w6State.flips).
const (
	w6Raw = iota
	w6Engine
	w6RoaringBitmap
	w6Targets
)

// next numbers a round of a row writing target: the round number (for
// the watermark) and the values' flip.
func (w *w6State) next(target int) (uint64, bool) {
	return w.round.Add(1), w.flips[target].Add(1)&1 == 1
}

// readBackKV reads back a sample of the keys round r wrote, with get.
func (w *w6State) readBackKV(row string, r uint64, get kvGetter) (int64, error) {
	return readBackKV(row, readBackSample(w.n, w.readBack, r), w.keys.at, w.val, get)
}

// readBackBits reads back a sample of the bits a round with flip set.
func (w *w6State) readBackBits(row string, r uint64, flip bool, get bitGetter) (int64, error) {
	idx := readBackSample(len(w.finals), w.readBack, r)
	return readBackBits(row, idx, func(j int) uint64 { return w.changes[w.finals[j]].i },
		func(j int) bool { return w.flipped(w.finals[j], flip) }, get)
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

// w6Sides are W6's raw pebble baselines besides mixedSides' pdb (the
// store's memtable, WAL on): the configurations of pebble_baselines.go,
// with the memory of the engine of the kvbuf row.
type w6Sides struct {
	budget, noWAL, noWALStore *pebble.DB
}

// setupW6 builds W6 (flush throughput): an engine with a keyspace and a
// bitslice that keeps its changes pending until the round's Flush, one
// with default Options, raw pebble databases (w6Sides and mixedSides' one,
// opened like the engine's store) and a raw bitslice file.
func setupW6(_ context.Context, s *Suite, c Config) error {
	n := c.scaled(w6Changes, 64)
	nbits := uint64(c.scaled(w1Bits, 64))
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed+6))
	opts := pendingOptions(kvNeed(n))
	m, err := openMixedSides(s, "w6", nbits, opts)
	if err != nil {
		return err
	}
	def, defKV, err := openKV(s, "engine-default", "w6", nil)
	if err != nil {
		return err
	}
	var ps w6Sides
	cache := baselineCache(opts)
	if ps.budget, err = openPebbleConfig(s, "pebble-budget-memtable", pebbleConfig{memtable: budgetMemtable(opts), cache: cache}); err != nil {
		return err
	}
	if ps.noWAL, err = openPebbleConfig(s, "pebble-nowal", pebbleConfig{memtable: budgetMemtable(opts), cache: cache, noWAL: true}); err != nil {
		return err
	}
	if ps.noWALStore, err = openPebbleConfig(s, "pebble-nowal-store-memtable", pebbleConfig{cache: cache, noWAL: true}); err != nil {
		return err
	}
	w := &w6State{n: n, keys: u64Keys(distinct(rng, n, uint64(c.scaled(w6Space, 256)))), vals: make([]byte, n*w2ValueLen), readBack: c.ReadBack}
	w.stored = w.keys.stored()
	w.sorted = make([]int, n)
	for i := range w.sorted {
		w.sorted[i] = i
	}
	slices.SortFunc(w.sorted, func(a, b int) int { return bytes.Compare(w.stored.at(a), w.stored.at(b)) })
	w.changes = w1Changes(rng, n, nbits)
	last := make(map[uint64]int, n)
	for k, ch := range w.changes {
		last[ch.i] = k
	}
	for k, ch := range w.changes {
		if last[ch.i] == k {
			w.finals = append(w.finals, k)
		}
	}
	quiesce := quiesceAll([]*kvbuf.DB{m.db, def}, m.pdb, ps.budget, ps.noWAL, ps.noWALStore)
	settle := settleRounds([]*kvbuf.DB{m.db, def}, m.pdb, ps.budget, ps.noWAL, ps.noWALStore)
	// The user data of one op: every put's 8-byte key and 16-byte value;
	// one bit per Set.
	kvBytes, bitBytes := float64(n*(8+w2ValueLen)), float64(len(w.changes))/8
	s.add(
		&Workload{Name: "W6/flush-kv-1m", Unit: "flush", Writes: true, UserBytesPerOp: kvBytes, quiesce: quiesce, settle: settle, Impls: w6KV(w, m, ps, def, defKV)},
		&Workload{Name: "W6/flush-bits-1m", Unit: "flush", Writes: true, UserBytesPerOp: bitBytes, quiesce: quiesce, settle: settle, Impls: append(w6Bits(w, m, nbits), w6BitsExtra(s, w, m)...)},
	)
	return nil
}

// w6KV are the rows of W6/flush-kv-1m; each has made the round's 1M puts
// durable when its clock stops. kvbuf times the puts (one KV.Put each) and
// the Flush that makes them durable (whatever ordering the engine does, at
// write or at flush time, is inside); kvbuf-one-batch puts them all in one
// Batch, as the pebble rows do; kvbuf-flush-only times the Flush alone
// (a component row, labelled). The pebble rows build one batch of the same
// puts in arrival order and make it durable: committed with sync
// (pebble-batch-sync…), or committed without a write-ahead log and
// flushed to sstables (pebble-nowal+flush…); the sorted-input row gets the
// keys already sorted (the sort not timed; a component row, labelled).
// After the clock (not timed) every row reads back a sample of the keys.
func w6KV(w *w6State, m mixedSides, ps w6Sides, def *kvbuf.DB, defKV *kvbuf.KV) []Impl {
	interval := baselineInterval()
	round := func(row string, get kvGetter, untimed, timed func(ctx context.Context) error) Rounder {
		return RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			r := w.round.Add(1)
			w.fill(r)
			if untimed != nil {
				if err := untimed(ctx); err != nil {
					return RoundResult{}, err
				}
			}
			res := RoundResult{Ops: 1, Checks: int64(w.n)}
			if err := Timed(&res, func() error { return timed(ctx) }); err != nil {
				return res, err
			}
			var err error
			res.ReadBack, err = w.readBackKV(row, r, get)
			return res, err
		})
	}
	putsAndFlush := func(db *kvbuf.DB, kv *kvbuf.KV) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			if err := w.putAll(ctx, kv); err != nil {
				return err
			}
			return db.Flush(ctx)
		}
	}
	kb := m.db.NewBatch()
	// pebbleBatch builds one batch of the round's puts in order (nil:
	// arrival order) and commits it with opt.
	pebbleBatch := func(pdb *pebble.DB, order []int, opt *pebble.WriteOptions) error {
		b := pdb.NewBatch()
		for k := range w.n {
			i := k
			if order != nil {
				i = order[k]
			}
			if err := b.Set(w.stored.at(i), w.val(i), nil); err != nil {
				b.Close()
				return err
			}
		}
		if err := b.Commit(opt); err != nil {
			b.Close()
			return err
		}
		return b.Close()
	}
	syncBatch := func(name string, pdb *pebble.DB, order []int) Impl {
		return Impl{Name: name, Round: round(name, pebbleGetter(pdb), nil, func(context.Context) error {
			return pebbleBatch(pdb, order, pebble.Sync)
		})}
	}
	noWAL := func(name string, pdb *pebble.DB) Impl {
		return Impl{Name: name, Round: round(name, pebbleGetter(pdb), nil, func(context.Context) error {
			return withDurableEvery(interval, flushMemtable(pdb), func() error { return pebbleBatch(pdb, nil, pebble.NoSync) })
		})}
	}
	sorted := syncBatch(ImplPebbleSortedSync, m.pdb, w.sorted)
	sorted.Label = LabelComponent
	return []Impl{
		{Name: ImplKvbuf, Round: round(ImplKvbuf, kvbufGetter(m.kv), nil, putsAndFlush(m.db, m.kv))},
		{Name: ImplKvbufOneBatch, Round: round(ImplKvbufOneBatch, kvbufGetter(m.kv), nil, func(ctx context.Context) error {
			kb.Reset()
			for i := range w.n {
				kb.Put(m.kv, w.keys.at(i), w.val(i))
			}
			if err := m.db.Apply(ctx, kb, 0); err != nil {
				return err
			}
			return m.db.Flush(ctx)
		})},
		{Name: ImplKvbufFlushOnly, Label: LabelComponent, Round: round(ImplKvbufFlushOnly, kvbufGetter(m.kv),
			func(ctx context.Context) error { return w.putAll(ctx, m.kv) },
			func(ctx context.Context) error { return m.db.Flush(ctx) })},
		{Name: ImplKvbufDefault, Round: round(ImplKvbufDefault, kvbufGetter(defKV), nil, putsAndFlush(def, defKV))},
		syncBatch(ImplPebbleBatchSync, ps.budget, nil),
		syncBatch(ImplPebbleBatchSyncStoreMT, m.pdb, nil),
		noWAL(ImplPebbleNoWALFlush, ps.noWAL),
		noWAL(ImplPebbleNoWALFlushStoreMT, ps.noWALStore),
		sorted,
	}
}

// w6Bits are the rows of W6/flush-bits-1m: as W6/flush-kv-1m's, with the
// raw file written by one File.Set per change, by ApplyWords of words
// coalesced untimed (the input a user with pre-coalesced words has; a
// component row, labelled), or by ApplyWords with the coalescing timed,
// and the last two again with the words written by pwrite
// (workload.PwriteWords) instead of through the mapping; each syncs the
// file. Every row reads back a sample of the bits after
// the clock.
func w6Bits(w *w6State, m mixedSides, nbits uint64) []Impl {
	syncRaw := func(r uint64) error {
		m.raw.SetWatermark(r)
		return m.raw.Sync()
	}
	// round runs one round of a row: untimed (if not nil) and timed get the
	// round number and its flip; get reads the bits back.
	round := func(row string, target int, get bitGetter, untimed, timed func(ctx context.Context, r uint64, f bool) error) Rounder {
		return RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
			r, f := w.next(target)
			if untimed != nil {
				if err := untimed(ctx, r, f); err != nil {
					return RoundResult{}, err
				}
			}
			res := RoundResult{Ops: 1, Checks: int64(w.n)}
			if err := Timed(&res, func() error { return timed(ctx, r, f) }); err != nil {
				return res, err
			}
			var err error
			res.ReadBack, err = w.readBackBits(row, r, f, get)
			return res, err
		})
	}
	engine, raw := kvbufBitGetter(m.bits), rawBitGetter(m.raw)
	var words []bitslice.WordChange
	var pbuf []uint64
	pwrite := func(words []bitslice.WordChange, r uint64) error {
		var err error
		if pbuf, err = workload.PwriteWords(m.raw, words, pbuf); err != nil {
			return err
		}
		return syncRaw(r)
	}
	return []Impl{
		{Name: ImplKvbuf, Round: round(ImplKvbuf, w6Engine, engine, nil, func(ctx context.Context, _ uint64, f bool) error {
			if err := w.setAll(ctx, m.bits, f); err != nil {
				return err
			}
			return m.db.Flush(ctx)
		})},
		{Name: ImplKvbufFlushOnly, Label: LabelComponent, Round: round(ImplKvbufFlushOnly, w6Engine, engine,
			func(ctx context.Context, _ uint64, f bool) error { return w.setAll(ctx, m.bits, f) },
			func(ctx context.Context, _ uint64, _ bool) error { return m.db.Flush(ctx) })},
		{Name: ImplFileSetLoop, Round: round(ImplFileSetLoop, w6Raw, raw, nil, func(_ context.Context, r uint64, f bool) error {
			for k, ch := range w.changes {
				if err := m.raw.Set(ch.i, w.flipped(k, f)); err != nil {
					return err
				}
			}
			return syncRaw(r)
		})},
		{Name: ImplApplyWords, Label: LabelComponent, Round: round(ImplApplyWords, w6Raw, raw,
			func(_ context.Context, _ uint64, f bool) error { words = w.coalesce(f, nbits); return nil },
			func(_ context.Context, r uint64, _ bool) error {
				if err := m.raw.ApplyWords(words); err != nil {
					return err
				}
				return syncRaw(r)
			})},
		{Name: ImplCoalesceApply, Round: round(ImplCoalesceApply, w6Raw, raw, nil, func(_ context.Context, r uint64, f bool) error {
			if err := m.raw.ApplyWords(w.coalesce(f, nbits)); err != nil {
				return err
			}
			return syncRaw(r)
		})},
		// The same words written with pwrite, no store through the
		// mapping (the best raw baseline since the engine's flush does
		// it too: doc/workloads.md, W6).
		{Name: ImplPwriteWords, Label: LabelComponent, Round: round(ImplPwriteWords, w6Raw, raw,
			func(_ context.Context, _ uint64, f bool) error { words = w.coalesce(f, nbits); return nil },
			func(_ context.Context, r uint64, _ bool) error { return pwrite(words, r) })},
		{Name: ImplCoalescePwrite, Round: round(ImplCoalescePwrite, w6Raw, raw, nil, func(_ context.Context, r uint64, f bool) error {
			return pwrite(w.coalesce(f, nbits), r)
		})},
	}
}
