//go:build linux

package kvbuf

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/buffer"
	"github.com/kvbuf/kvbuf/internal/testutil"
)

// BenchmarkBitsW1State isolates, step by step, why the public Bits.Get on
// W1's state with 1M bits pending costs more than the overlay's own Get in
// internal/buffer's BenchmarkBitsW1 (issue 26, bits13). One W1 state (1M
// random sets over a 4,194,304-bit slice flushed, 1M more pending, 1M
// random lookups), built the same way in several set-ups in one process;
// every row counts the set bits it reads branch-free and is checked
// against the others, block by block (16384 lookups) in rotating order:
//
//   - atomic-words: W1's baseline (mask and value words on the heap, the
//     raw file for the rest), the row every ratio divides by;
//   - kvbuf: Bits.Get through an engine;
//   - engine-overlay: the same engine's overlay, its Get called directly
//     (the wrapper's closing check out);
//   - overlay-sized: an overlay over a file created at its full length
//     (as newBenchW1), flushed with Freeze, Write, Release and Settle;
//   - overlay-grown: the same over a file created empty, as the engine's
//     are, grown by its first flush.
//
// Sub-benchmark all logs each overlay's state (buffer.BitsState) and how
// each row's memory is backed (testutil.MappingOf). Metrics: ns/op per row
// and the median (min, max) over blocks of each row's time ÷
// atomic-words' in the same block.
func BenchmarkBitsW1State(b *testing.B) {
	const nbits = w6BitsLen
	n := int(nbits * 1_000_000 / w6BitsLen)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 5))
	type change struct {
		i uint64
		v bool
	}
	gen := func() []change {
		cs := make([]change, n)
		for k := range cs {
			cs[k] = change{rng.Uint64N(nbits), rng.IntN(2) == 1}
		}
		return cs
	}
	flushed, pending := gen(), gen()
	lookups := make([]uint64, n)
	for k := range lookups {
		lookups[k] = rng.Uint64N(nbits)
	}

	bs := w1GapEngine(b)
	for k, c := range flushed {
		if err := bs.Set(ctx, c.i, c.v, uint64(k+1)); err != nil {
			b.Fatal(err)
		}
	}
	if err := bs.db.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	for k, c := range pending {
		if err := bs.Set(ctx, c.i, c.v, uint64(n+k+1)); err != nil {
			b.Fatal(err)
		}
	}

	dir := b.TempDir()
	overlay := func(name string, length uint64) *buffer.Bits {
		f, err := bitslice.Create(filepath.Join(dir, name), length)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = f.Close() })
		ov, err := buffer.NewBits(f, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range flushed {
			if err := ov.Set(c.i, c.v); err != nil {
				b.Fatal(err)
			}
		}
		if g := ov.Freeze(1); g != nil {
			if err := g.Write(ctx, 1); err != nil {
				b.Fatal(err)
			}
			ov.Release(1)
		}
		ov.Settle()
		for _, c := range pending {
			if err := ov.Set(c.i, c.v); err != nil {
				b.Fatal(err)
			}
		}
		return ov
	}
	sized, grown := overlay("sized.bits", nbits), overlay("grown.bits", 0)

	raw, err := bitslice.Create(filepath.Join(dir, "raw.bits"), nbits)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = raw.Close() })
	for _, c := range flushed {
		if err := raw.Set(c.i, c.v); err != nil {
			b.Fatal(err)
		}
	}
	mask, val := make([]atomic.Uint64, nbits/64), make([]atomic.Uint64, nbits/64)
	for _, c := range pending {
		bit := uint64(1) << (c.i & 63)
		if c.v {
			val[c.i>>6].Or(bit)
		} else {
			val[c.i>>6].And(^bit)
		}
		mask[c.i>>6].Or(bit)
	}

	logState := func(b *testing.B) {
		for _, s := range []struct {
			name string
			ov   *buffer.Bits
		}{{"engine-overlay", &bs.ov}, {"overlay-sized", sized}, {"overlay-grown", grown}} {
			st := s.ov.State()
			b.Logf("%s: %+v", s.name, st)
			logMapping(b, s.name+" page", st.FirstPage)
			logMapping(b, s.name+" file", st.FileWords)
		}
		logMapping(b, "atomic-words mask", uintptr(unsafe.Pointer(&mask[0])))
		logMapping(b, "atomic-words val", uintptr(unsafe.Pointer(&val[0])))
		logMapping(b, "raw file", uintptr(unsafe.Pointer(unsafe.SliceData(raw.View().Words()))))
	}
	rows := []w1GapRow{
		{"atomic-words", func(lo, hi int) int {
			c := 0
			for _, i := range lookups[lo:hi] {
				bit := uint64(1) << (i & 63)
				if mask[i>>6].Load()&bit != 0 {
					c += w1GapB2i(val[i>>6].Load()&bit != 0)
				} else {
					c += w1GapB2i(raw.Get(i))
				}
			}
			return c
		}},
		{"kvbuf", func(lo, hi int) int {
			c := 0
			for _, i := range lookups[lo:hi] {
				v, err := bs.Get(i)
				if err != nil {
					b.Fatal(err)
				}
				c += w1GapB2i(v)
			}
			return c
		}},
		w1OverlayRow("engine-overlay", &bs.ov, lookups),
		w1OverlayRow("overlay-sized", sized, lookups),
		w1OverlayRow("overlay-grown", grown, lookups),
	}
	// all: every row in one rotation; kvbuf and engine-overlay read the
	// same memory, the other overlays their own. pair/<row>: atomic-words
	// and that row alone, so that no row finds lines another left in the
	// caches for the same block's lookups.
	b.Run("all", func(b *testing.B) {
		logState(b)
		runW1Rows(b, rows, n, 1<<14)
	})
	for _, row := range rows[1:] {
		b.Run("pair/"+row.name, func(b *testing.B) { runW1Rows(b, []w1GapRow{rows[0], row}, n, 1<<14) })
	}
}

// w1OverlayRow is a row of ov.Get over lookups. Not inlined: a closure
// cloned into a caller that inlines its constructor is compiled without
// inlining the calls in its body (Go 1.26; bits13).
//
//go:noinline
func w1OverlayRow(name string, ov *buffer.Bits, lookups []uint64) w1GapRow {
	return w1GapRow{name, func(lo, hi int) int {
		c := 0
		for _, i := range lookups[lo:hi] {
			c += w1GapB2i(ov.Get(i))
		}
		return c
	}}
}

// logMapping logs how the memory at addr is backed.
func logMapping(b *testing.B, what string, addr uintptr) {
	m, err := testutil.MappingOf(addr)
	if err != nil {
		b.Logf("%s: %v", what, err)
		return
	}
	b.Logf("%s %#x: %v", what, addr, m)
}

// runW1Rows times rows block by block in rotating order over n lookups,
// checks that they agree, and reports each row's ns/op and its median
// (min, max) ratio to rows[0] over blocks.
func runW1Rows(b *testing.B, rows []w1GapRow, n, block int) {
	for _, row := range rows { // warm-up: first touches, caches
		row.run(0, n)
	}
	spent := make([]time.Duration, len(rows))
	ratios := make([][]float64, len(rows))
	r, ops := 0, 0
	for b.Loop() {
		for lo := 0; lo < n; lo += block {
			hi := min(lo+block, n)
			dt := make([]time.Duration, len(rows))
			sums := make([]int, len(rows))
			for j := range rows {
				k := (r + j) % len(rows)
				t0 := time.Now()
				sums[k] = rows[k].run(lo, hi)
				dt[k] = time.Since(t0)
				spent[k] += dt[k]
			}
			r++
			for k := range rows {
				if sums[k] != sums[0] {
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
			s := slices.Clone(ratios[k])
			slices.Sort(s)
			b.ReportMetric(s[len(s)/2], row.name+"/atomic-words")
			b.ReportMetric(s[0], row.name+"/atomic-words-min")
			b.ReportMetric(s[len(s)-1], row.name+"/atomic-words-max")
		}
	}
}
