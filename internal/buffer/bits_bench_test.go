package buffer

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/kvbuf/kvbuf/bitslice"
)

// The bits overlay benchmarks: W1 and W6 of doc/workloads.md for the
// overlay alone (no engine, no admission), next to the baselines of the
// same workloads built from the same changes in the same process. Every
// benchmark is paired: each b.Loop iteration runs one block of every row,
// in rotating order, and timing each block on its own, so that the ratios
// it reports (row ÷ the first row, per block, then the median) come from
// the same moments of a shared machine:
//
//	go test ./internal/buffer -run '^$' -bench 'BenchmarkBits' -count 5
//
// Metrics: <row>-ns/op per lookup or set, and <row>/<first row> the median
// of the per-block ratios.

// W1 sizes (doc/workloads.md).
const (
	benchBits    = 4_194_304
	benchSets    = 1_000_000
	benchLookups = 1 << 20
	benchBlock   = 1 << 14
)

// pairedRow is one row of a paired benchmark: run does operations
// [lo, hi) of the row's input and returns a check value.
type pairedRow struct {
	name string
	run  func(lo, hi int) int
}

// runPaired runs the rows block by block over n operations per pass and
// reports each row's ns per op and its median ratio to the first row. The
// rows must agree on their check values unless check is false.
func runPaired(b *testing.B, n int, check bool, rows ...pairedRow) {
	b.Helper()
	spent := make([]time.Duration, len(rows))
	ops := 0
	ratios := make([][]float64, len(rows))
	r := 0
	for b.Loop() {
		for lo := 0; lo < n; lo += benchBlock {
			hi := min(lo+benchBlock, n)
			var dt [16]time.Duration
			var sums [16]int
			for j := range rows {
				k := (r + j) % len(rows)
				t0 := time.Now()
				sums[k] = rows[k].run(lo, hi)
				dt[k] = time.Since(t0)
				spent[k] += dt[k]
			}
			r++
			for k := range rows {
				if check && sums[k] != sums[0] {
					b.Fatalf("%s counted %d, %s %d", rows[k].name, sums[k], rows[0].name, sums[0])
				}
				ratios[k] = append(ratios[k], float64(dt[k])/float64(max(dt[0], 1)))
			}
			ops += hi - lo
		}
	}
	for k, row := range rows {
		b.ReportMetric(float64(spent[k].Nanoseconds())/float64(max(ops, 1)), row.name+"-ns/op")
		if k > 0 {
			b.ReportMetric(medianOf(ratios[k]), row.name+"/"+rows[0].name)
		}
	}
}

func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[len(s)/2]
}

// benchW1 is the W1 setup over the overlay: a flushed file of benchBits
// bits with benchSets random sets, the raw twin file holding the same, and
// the lookup indexes.
type benchW1 struct {
	b       *Bits
	raw     *bitslice.File
	lookups []uint64
	pending []change
	rng     *rand.Rand
	// atomic-words: dense pending mask and value words, value first.
	amask, aval []atomic.Uint64
	gen         uint64
}

type change struct {
	i uint64
	v bool
}

func newBenchW1(b *testing.B) *benchW1 {
	b.Helper()
	dir := b.TempDir()
	f, err := bitslice.Create(filepath.Join(dir, "kvbuf.bits"), benchBits)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := bitslice.Create(filepath.Join(dir, "raw.bits"), benchBits)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close(); raw.Close() })
	ov, err := NewBits(f, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	w := &benchW1{b: ov, raw: raw, rng: rand.New(rand.NewPCG(1, 2)),
		amask: make([]atomic.Uint64, benchBits/64), aval: make([]atomic.Uint64, benchBits/64)}
	for range benchSets {
		i, v := w.rng.Uint64N(benchBits), w.rng.IntN(2) == 1
		if err := ov.Set(i, v); err != nil {
			b.Fatal(err)
		}
		if err := raw.Set(i, v); err != nil {
			b.Fatal(err)
		}
	}
	w.flush(b)
	w.lookups = make([]uint64, benchLookups)
	for k := range w.lookups {
		w.lookups[k] = w.rng.Uint64N(benchBits)
	}
	w.pending = make([]change, benchSets)
	for k := range w.pending {
		w.pending[k] = change{w.rng.Uint64N(benchBits), w.rng.IntN(2) == 1}
	}
	return w
}

func (w *benchW1) flush(b *testing.B) {
	w.gen++
	if g := w.b.Freeze(w.gen); g != nil {
		if err := g.Write(context.Background(), w.gen); err != nil {
			b.Fatal(err)
		}
		w.b.Release(w.gen)
	}
	w.b.Settle()
}

// pend makes the pending changes pending in the overlay and the dense words.
func (w *benchW1) pend(b *testing.B) {
	for _, c := range w.pending {
		if err := w.b.Set(c.i, c.v); err != nil {
			b.Fatal(err)
		}
		bit := uint64(1) << (c.i & 63)
		if c.v {
			w.aval[c.i>>6].Or(bit)
		} else {
			w.aval[c.i>>6].And(^bit)
		}
		w.amask[c.i>>6].Or(bit)
	}
}

// The row constructors are not inlined: a closure cloned into the
// benchmark that inlines its constructor is compiled without inlining
// the calls in its body (Go 1.26), which left atomic-words with three
// calls per lookup (two atomic loads and the file's Get) and the overlay
// rows with one (bits13).
//
//go:noinline
func (w *benchW1) rowRaw() pairedRow {
	return pairedRow{"raw", func(lo, hi int) int {
		n := 0
		for _, i := range w.lookups[lo:hi] {
			n += b2i(w.raw.Get(i))
		}
		return n
	}}
}

//go:noinline
func (w *benchW1) rowGet() pairedRow {
	return pairedRow{"kvbuf", func(lo, hi int) int {
		n := 0
		for _, i := range w.lookups[lo:hi] {
			n += b2i(w.b.Get(i))
		}
		return n
	}}
}

//go:noinline
func (w *benchW1) rowGetMany() pairedRow {
	var out [64]bool
	return pairedRow{"kvbuf-getmany", func(lo, hi int) int {
		n := 0
		for j := lo; j < hi; j += 64 {
			e := min(j+64, hi)
			w.b.GetMany(w.lookups[j:e], out[:])
			for _, v := range out[:e-j] {
				n += b2i(v)
			}
		}
		return n
	}}
}

//go:noinline
func (w *benchW1) rowAtomicWords() pairedRow {
	return pairedRow{"atomic-words", func(lo, hi int) int {
		n := 0
		for _, i := range w.lookups[lo:hi] {
			bit := uint64(1) << (i & 63)
			if w.amask[i>>6].Load()&bit != 0 {
				n += b2i(w.aval[i>>6].Load()&bit != 0)
			} else {
				n += b2i(w.raw.Get(i))
			}
		}
		return n
	}}
}

// b2i is 1 for true. The W1 rows count the set bits they read with it
// because it compiles to a flag set: a branch on a random bit is a coin
// flip that mispredicts about half the time, which cost atomic-words about
// 30% and the overlay's Get hardly anything (bits12, doc/design.md "Bits
// tables"), so counting with a branch flattered the overlay's ratio.
func b2i(v bool) int {
	var x int
	if v {
		x = 1
	}
	return x
}

// BenchmarkBitsW1 is W1 over the overlay: lookups with nothing pending
// (against the raw file) and with 1M sets pending (against atomic words).
func BenchmarkBitsW1(b *testing.B) {
	w := newBenchW1(b)
	b.Run("lookup-without-pending-changes", func(b *testing.B) {
		if !w.b.direct() {
			b.Fatal("not on the direct path")
		}
		runPaired(b, len(w.lookups), true, w.rowRaw(), w.rowGet(), w.rowGetMany(), w.rowAtomicWords())
	})
	w.pend(b)
	b.Run("lookup-with-pending-changes", func(b *testing.B) {
		runPaired(b, len(w.lookups), true, w.rowAtomicWords(), w.rowGet(), w.rowGetMany())
	})
	// Get and atomic-words alone: beside GetMany, which reads the same
	// lines for the same lookups, Get found them in the caches in two
	// blocks out of three (bits13).
	b.Run("lookup-with-pending-changes-get-alone", func(b *testing.B) {
		runPaired(b, len(w.lookups), true, w.rowAtomicWords(), w.rowGet())
	})
}

// BenchmarkBitsW6 is W6/flush-bits-1m over the overlay: 1M random sets
// made durable, values flipped every iteration. Rows: kvbuf (SetMany,
// then Freeze, Write, Release), kvbuf-flush-only (its Freeze, Write,
// Release alone), coalesce+apply-words+msync (a dense mask/value array,
// ApplyWords and Sync of the raw file) and apply-words+msync (the
// coalescing untimed). Each b.Loop iteration runs kvbuf and the baseline
// in alternating order; the metrics are the ns of each and the medians of
// the per-iteration ratios kvbuf ÷ coalesce+apply-words+msync and
// kvbuf-flush-only ÷ apply-words+msync (times: below 1 is kvbuf faster).
func BenchmarkBitsW6(b *testing.B) {
	w := newBenchW1(b)
	idx := make([]uint64, len(w.pending))
	vals := [2][]bool{make([]bool, len(idx)), make([]bool, len(idx))}
	for k, c := range w.pending {
		idx[k], vals[0][k], vals[1][k] = c.i, c.v, !c.v
	}
	dense := make([]bitslice.WordChange, benchBits/64)
	coalesce := func(v []bool) []bitslice.WordChange {
		dense = dense[:cap(dense)]
		clear(dense)
		for k, i := range idx {
			wc := &dense[i>>6]
			bit := uint64(1) << (i & 63)
			wc.Mask |= bit
			if v[k] {
				wc.Bits |= bit
			} else {
				wc.Bits &^= bit
			}
		}
		// Compacted in place (out never passes j), as W6's row does.
		out := dense[:0]
		for j, wc := range dense {
			if wc.Mask != 0 {
				wc.Word = uint64(j)
				out = append(out, wc)
			}
		}
		return out
	}
	var sets, flush, coal, apply time.Duration
	var all, alone []float64
	round := 0
	for b.Loop() {
		round++
		v := vals[round&1]
		var ds, df, dc, da time.Duration
		kvbuf := func() {
			t0 := time.Now()
			if err := w.b.SetMany(idx, v); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			w.flush(b)
			ds, df = t1.Sub(t0), time.Since(t1)
		}
		base := func() {
			t0 := time.Now()
			words := coalesce(v)
			t1 := time.Now()
			if err := w.raw.ApplyWords(words); err != nil {
				b.Fatal(err)
			}
			w.raw.SetWatermark(uint64(round))
			if err := w.raw.Sync(); err != nil {
				b.Fatal(err)
			}
			dc, da = t1.Sub(t0), time.Since(t1)
		}
		if round&1 == 0 {
			kvbuf()
			base()
		} else {
			base()
			kvbuf()
		}
		sets += ds
		flush += df
		coal += dc
		apply += da
		all = append(all, float64(ds+df)/float64(dc+da))
		alone = append(alone, float64(df)/float64(da))
	}
	n := float64(max(round, 1))
	b.ReportMetric(float64((sets+flush).Nanoseconds())/n, "kvbuf-ns/op")
	b.ReportMetric(float64(flush.Nanoseconds())/n, "kvbuf-flush-only-ns/op")
	b.ReportMetric(float64(sets.Nanoseconds())/n/float64(len(idx)), "kvbuf-ns/set")
	b.ReportMetric(float64((coal+apply).Nanoseconds())/n, "coalesce+apply-words+msync-ns/op")
	b.ReportMetric(float64(apply.Nanoseconds())/n, "apply-words+msync-ns/op")
	b.ReportMetric(float64(coal.Nanoseconds())/n/float64(len(idx)), "coalesce-ns/set")
	b.ReportMetric(medianOf(all), "kvbuf/coalesce+apply-words+msync")
	b.ReportMetric(medianOf(alone), "kvbuf-flush-only/apply-words+msync")
}

// BenchmarkBitsSets compares ways of recording W6's 1M sets: a loop of Set
// (each change alone: its filter mark, table word, the value beneath and
// the count, one after the other), SetMany bit by bit (setmany-bits: in
// chunks of setChunk, the loads of a chunk first, overlapping their cache
// misses, then an atomic OR per bit; the count once), SetMany coalescing
// (setmany: plain stores into a private window of packed words, then one
// atomic OR, maybe an AND, and a filter mark per touched word), and the
// baseline's coalescing into a dense array of (mask, value) words (what
// coalesce+apply-words+msync does before it writes). Each b.Loop iteration
// times every row on its own overlay over the same file contents, in
// rotating order; the flush after each is not timed. Metrics: ns per set
// of each and the medians of the per-iteration ratios to setmany.
func BenchmarkBitsSets(b *testing.B) {
	ws := [3]*benchW1{newBenchW1(b), newBenchW1(b), newBenchW1(b)}
	ws[2].b.manyCfg.min = 1 << 62 // setmany-bits: bit by bit
	idx := make([]uint64, len(ws[0].pending))
	vals := [2][]bool{make([]bool, len(idx)), make([]bool, len(idx))}
	for k, c := range ws[0].pending {
		idx[k], vals[0][k], vals[1][k] = c.i, c.v, !c.v
	}
	dense := make([]bitslice.WordChange, benchBits/64)
	names := []string{"setmany", "set-loop", "setmany-bits", "coalesce-dense"}
	spent := make([]time.Duration, len(names))
	ratios := make([][]float64, len(names))
	round := 0
	for b.Loop() {
		round++
		v := vals[round&1]
		var dt [4]time.Duration
		for j := range names {
			k := (round + j) % len(names)
			t0 := time.Now()
			var err error
			switch k {
			case 0:
				err = ws[0].b.SetMany(idx, v)
			case 1:
				for j, i := range idx {
					if err = ws[1].b.Set(i, v[j]); err != nil {
						break
					}
				}
			case 2:
				err = ws[2].b.SetMany(idx, v)
			case 3:
				clear(dense)
				for j, i := range idx {
					wc := &dense[i>>6]
					bit := uint64(1) << (i & 63)
					wc.Mask |= bit
					if v[j] {
						wc.Bits |= bit
					} else {
						wc.Bits &^= bit
					}
				}
			}
			dt[k] = time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
		}
		for k := range names {
			spent[k] += dt[k]
			ratios[k] = append(ratios[k], float64(dt[k])/float64(dt[0]))
		}
		for _, w := range ws[1:] {
			if w.b.Count() != ws[0].b.Count() {
				b.Fatalf("counts differ: %d and %d", w.b.Count(), ws[0].b.Count())
			}
		}
		for _, w := range ws {
			w.flush(b)
		}
	}
	n := float64(max(round, 1)) * float64(len(idx))
	for k, name := range names {
		b.ReportMetric(float64(spent[k].Nanoseconds())/n, name+"-ns/set")
		if k > 0 {
			b.ReportMetric(medianOf(ratios[k]), name+"/setmany")
		}
	}
}

// BenchmarkBitsOpen measures what NewBits costs over a 100M-bit file with
// 0.1% of its bits set at random (W10's): the scan that counts the set
// bits (CountOnes, what NewBits did before the region summary) and
// NewBits, which builds the summary in the same pass. Paired per
// iteration; metrics: ns of each and newbits/count-ones.
func BenchmarkBitsOpen(b *testing.B) {
	const nbits = 100_000_000
	f, err := bitslice.Create(filepath.Join(b.TempDir(), "open.bits"), nbits)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	rng := rand.New(rand.NewPCG(3, 4))
	for range nbits / 1000 {
		if err := f.Set(rng.Uint64N(nbits), true); err != nil {
			b.Fatal(err)
		}
	}
	var count, open time.Duration
	var ratios []float64
	for b.Loop() {
		t0 := time.Now()
		n := f.CountOnes()
		t1 := time.Now()
		ov, err := NewBits(f, nil, nil)
		t2 := time.Now()
		if err != nil || ov.Count() != n {
			b.Fatalf("NewBits: %v, count %d, want %d", err, ov.Count(), n)
		}
		count += t1.Sub(t0)
		open += t2.Sub(t1)
		ratios = append(ratios, float64(t2.Sub(t1))/float64(t1.Sub(t0)))
	}
	b.ReportMetric(float64(count.Nanoseconds())/float64(len(ratios)), "count-ones-ns/op")
	b.ReportMetric(float64(open.Nanoseconds())/float64(len(ratios)), "newbits-ns/op")
	b.ReportMetric(medianOf(ratios), "newbits/count-ones")
}

// BenchmarkBitsFewPending is the read side of W7 over the overlay: W1's
// lookups while few changes are pending (1,000 sets frozen into a sealed
// generation, 1,000 more in the active table, as a flush every 10 ms at
// 100k writes/s leaves), against the raw file alone.
func BenchmarkBitsFewPending(b *testing.B) {
	w := newBenchW1(b)
	for k, c := range w.pending[:2000] {
		if err := w.b.Set(c.i, c.v); err != nil {
			b.Fatal(err)
		}
		if k == 999 {
			w.gen++
			w.b.Freeze(w.gen)
		}
	}
	runPaired(b, len(w.lookups), false, w.rowRaw(), w.rowGet(), w.rowGetMany())
}

// BenchmarkBitsSparseOnes is W10/ones-sparse over the overlay: one pass of
// Ones over a 100M-bit file with 0.1% of its bits set at random, nothing
// pending, against roaring's Iterate, Values (its iter.Seq, the same kind
// of API as Ones) and NextMany over a bitmap of the same bits; the
// kvbuf-until row is OnesUntil with a stop flag, as the engine's Ones
// (a check of it per page of bits yielded); kvbuf-nextones is NextOnes
// into a buffer of 256, the counterpart of NextMany. Paired per iteration (rotating order); metrics: ns per pass
// of each and the median ratios to kvbuf.
func BenchmarkBitsSparseOnes(b *testing.B) {
	const nbits = 100_000_000
	f, err := bitslice.Create(filepath.Join(b.TempDir(), "sparse.bits"), nbits)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	rng := rand.New(rand.NewPCG(5, 6))
	rb := roaring.New()
	for range nbits / 1000 {
		i := rng.Uint64N(nbits)
		if err := f.Set(i, true); err != nil {
			b.Fatal(err)
		}
		rb.Add(uint32(i))
	}
	rb.RunOptimize()
	ov, err := NewBits(f, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	rows := []struct {
		name string
		pass func() (n, sum uint64)
	}{
		{"kvbuf", func() (n, sum uint64) {
			for i := range ov.Ones(0) {
				n++
				sum += i
			}
			return n, sum
		}},
		{"kvbuf-until", func() (n, sum uint64) {
			var stop atomic.Bool
			for i := range ov.OnesUntil(0, &stop) {
				n++
				sum += i
			}
			return n, sum
		}},
		{"kvbuf-nextones", func() (n, sum uint64) {
			var buf [256]uint64
			for k, next := ov.NextOnes(0, buf[:], nil); k > 0; k, next = ov.NextOnes(next, buf[:], nil) {
				for _, i := range buf[:k] {
					n++
					sum += i
				}
			}
			return n, sum
		}},
		{"roaring", func() (n, sum uint64) {
			rb.Iterate(func(x uint32) bool {
				n++
				sum += uint64(x)
				return true
			})
			return n, sum
		}},
		{"roaring-values", func() (n, sum uint64) {
			for x := range roaring.Values(rb) {
				n++
				sum += uint64(x)
			}
			return n, sum
		}},
		{"roaring-nextmany", func() (n, sum uint64) {
			var buf [256]uint32
			it := rb.ManyIterator()
			for k := it.NextMany(buf[:]); k > 0; k = it.NextMany(buf[:]) {
				for _, x := range buf[:k] {
					n++
					sum += uint64(x)
				}
			}
			return n, sum
		}},
	}
	spent := make([]time.Duration, len(rows))
	ratios := make([][]float64, len(rows))
	r := 0
	for b.Loop() {
		var dt [6]time.Duration
		var sums [6]uint64
		for j := range rows {
			k := (r + j) % len(rows)
			t0 := time.Now()
			n, sum := rows[k].pass()
			dt[k] = time.Since(t0)
			sums[k] = n ^ sum<<20
			spent[k] += dt[k]
		}
		r++
		for k := range rows {
			if sums[k] != sums[0] {
				b.Fatalf("%s and %s disagree", rows[k].name, rows[0].name)
			}
			ratios[k] = append(ratios[k], float64(dt[k])/float64(dt[0]))
		}
	}
	for k, row := range rows {
		b.ReportMetric(float64(spent[k].Nanoseconds())/float64(max(r, 1)), row.name+"-ns/pass")
		if k > 0 {
			b.ReportMetric(medianOf(ratios[k]), row.name+"/kvbuf")
		}
	}
}
