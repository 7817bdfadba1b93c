//go:build linux

package kvbuf

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvbuf/kvbuf/bitslice"
)

// BenchmarkBitsW1Gap tests, one at a time, the suspects of issue 26 for
// the gap between the overlay's W1 lookup with 1M bits pending (about
// atomic-words' time) and the public Bits.Get in kvtool's W1 (1.5x it).
// W1's sizes: 1M random sets flushed into a 4,194,304-bit slice, 1M more
// left pending, 1M random lookups. Rows, each counting the set bits it
// reads (checked equal): kvbuf (Bits.Get on engine A), atomic-words (W1's
// baseline, its mask and value arrays on the Go heap), atomic-words-mmap
// (the same arrays in an anonymous mapping with MADV_NOHUGEPAGE: 4 KiB
// pages for sure) and atomic-words-thp (an anonymous mapping with
// MADV_HUGEPAGE, 2 MiB aligned: what a careful engineer might run). Each
// falls back to the same raw bitslice file (mmap) on a bit not pending.
//
// Sub-benchmarks (engines/mode):
//   - one/blocks: one engine; rows timed block by block (16384 lookups) in
//     rotating order, as the overlay's BenchmarkBitsW1 does;
//   - one/passes: the same rows, each over all 1M lookups in turn, as
//     kvtool runs them;
//   - one/passes-evict: passes with a 64 MiB scan (untimed) before each
//     row, as kvtool's other rows (maps of 1M entries, roaring) evict the
//     caches (suspect i);
//   - bits-1M/passes, bits-16M/passes: one engine, passes, W1 at a
//     quarter and four times its length (sets and lookups scaled): the
//     cache footprint (at 1M both rows' lines fit a 1 MiB L2, at 16M
//     neither's do);
//   - three/blocks, three/passes: three engines that get every change in
//     turn, with a map of the changes beside them, as kvtool's W1 state
//     does, so that engine A's table pages are allocated interleaved with
//     the others' (suspect ii).
//
// Two more rows count the bits without a branch on the value read, as
// kvtool's W1 rows do: atomic-words-nobranch and kvbuf-nobranch (the rows
// above branch on a coin flip, as the overlay's BenchmarkBitsW1 does).
//
// Metrics: each row's ns/op and the median (and min, max) over blocks or
// passes of its time ÷ atomic-words' in the same block or pass (below 1:
// faster), and kvbuf-nobranch/atomic-words-nobranch, the same median of
// the two branch-free rows' ratio. doc/design.md ("Bits tables", bits12) quotes it.
func BenchmarkBitsW1Gap(b *testing.B) {
	for _, engines := range []int{1, 3} {
		g := newW1Gap(b, engines, w6BitsLen)
		name := map[int]string{1: "one", 3: "three"}[engines]
		modes := []string{"blocks", "passes", "passes-evict"}
		if engines == 3 {
			modes = modes[:2]
		}
		for _, mode := range modes {
			b.Run(name+"/"+mode, func(b *testing.B) { g.run(b, mode) })
		}
	}
	// The footprint: W1 at a quarter and at four times its length, the
	// pending sets and the lookups scaled with it (one engine, passes).
	// At 1M bits both rows' lines fit a core's L2 (1 MiB here), at 16M
	// neither's do.
	for _, nbits := range []uint64{w6BitsLen / 4, w6BitsLen * 4} {
		g := newW1Gap(b, 1, nbits)
		b.Run(fmt.Sprintf("bits-%dM/passes", nbits>>20), func(b *testing.B) { g.run(b, "passes") })
	}
}

type w1GapRow struct {
	name string
	run  func(lo, hi int) int
}

type w1Gap struct {
	bs      *Bits
	raw     *bitslice.File
	lookups []uint64
	rows    []w1GapRow
	evict   []uint64
}

// mappedWords returns n atomic words in an anonymous mapping, with
// MADV_HUGEPAGE (aligned to 2 MiB) or MADV_NOHUGEPAGE.
func mappedWords(b *testing.B, n int, huge bool) []atomic.Uint64 {
	const huge2M = 2 << 20
	size := (n*8 + huge2M - 1) &^ (huge2M - 1)
	m, err := unix.Mmap(-1, 0, size+huge2M, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = unix.Munmap(m) })
	off := (huge2M - int(uintptr(unsafe.Pointer(&m[0])))&(huge2M-1)) & (huge2M - 1)
	region := m[off : off+size]
	advice := unix.MADV_NOHUGEPAGE
	if huge {
		advice = unix.MADV_HUGEPAGE
	}
	if err := unix.Madvise(region, advice); err != nil {
		b.Fatal(err)
	}
	return unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(&region[0])), n)
}

// w1GapEngine opens an engine that flushes only when told, with room for
// W1's pending sets, and returns its bitslice "w1".
func w1GapEngine(b *testing.B) *Bits {
	db, err := Open(b.TempDir(), &Options{FlushInterval: -1, MaxPendingBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	bs, err := db.Bits("w1")
	if err != nil {
		b.Fatal(err)
	}
	return bs
}

func newW1Gap(b *testing.B, engines int, nbits uint64) *w1Gap {
	n := int(nbits * 1_000_000 / w6BitsLen)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 5))
	var all []*Bits
	for range engines {
		all = append(all, w1GapEngine(b))
	}
	setAll := func(i uint64, v bool, op uint64) { // in every engine
		for _, bs := range all {
			if err := bs.Set(ctx, i, v, op); err != nil {
				b.Fatal(err)
			}
		}
	}
	raw, err := bitslice.Create(filepath.Join(b.TempDir(), "raw.bits"), nbits)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = raw.Close() })
	op := uint64(0)
	for range n {
		i, v := rng.Uint64N(nbits), rng.IntN(2) == 1
		op++
		setAll(i, v, op)
		if err := raw.Set(i, v); err != nil {
			b.Fatal(err)
		}
	}
	for _, bs := range all {
		if err := bs.db.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if err := raw.Sync(); err != nil {
		b.Fatal(err)
	}
	type words = w1Words
	heap := words{make([]atomic.Uint64, nbits/64), make([]atomic.Uint64, nbits/64)}
	mm := words{mappedWords(b, int(nbits/64), false), mappedWords(b, int(nbits/64), false)}
	thp := words{mappedWords(b, int(nbits/64), true), mappedWords(b, int(nbits/64), true)}
	beside := map[uint64]bool{} // kvtool's maps beside the engines
	for range n {
		i, v := rng.Uint64N(nbits), rng.IntN(2) == 1
		op++
		setAll(i, v, op)
		if engines > 1 {
			beside[i] = v
		}
		bit := uint64(1) << (i & 63)
		for _, w := range []words{heap, mm, thp} {
			if v {
				w.val[i>>6].Or(bit)
			} else {
				w.val[i>>6].And(^bit)
			}
			w.mask[i>>6].Or(bit)
		}
	}
	g := &w1Gap{bs: all[0], raw: raw, lookups: make([]uint64, n), evict: make([]uint64, 8<<20)}
	for k := range g.lookups {
		g.lookups[k] = rng.Uint64N(nbits)
	}
	atomicRow := func(name string, w words) w1GapRow { return w1AtomicRow(name, w, g.lookups, g.raw) }
	g.rows = []w1GapRow{
		atomicRow("atomic-words", heap),
		{"kvbuf", func(lo, hi int) int {
			c := 0
			for _, i := range g.lookups[lo:hi] {
				v, err := g.bs.Get(i)
				if err != nil {
					b.Fatal(err)
				}
				if v {
					c++
				}
			}
			return c
		}},
		atomicRow("atomic-words-mmap", mm),
		atomicRow("atomic-words-thp", thp),
		// Counting without a branch on the bit read, as kvtool's rows do
		// (b2i); the rows above branch on it (a coin flip: about half
		// mispredicted), as the overlay's BenchmarkBitsW1 does.
		{"atomic-words-nobranch", func(lo, hi int) int {
			c := 0
			for _, i := range g.lookups[lo:hi] {
				bit := uint64(1) << (i & 63)
				if heap.mask[i>>6].Load()&bit != 0 {
					c += w1GapB2i(heap.val[i>>6].Load()&bit != 0)
				} else {
					c += w1GapB2i(g.raw.Get(i))
				}
			}
			return c
		}},
		{"kvbuf-nobranch", func(lo, hi int) int {
			c := 0
			for _, i := range g.lookups[lo:hi] {
				v, err := g.bs.Get(i)
				if err != nil {
					b.Fatal(err)
				}
				c += w1GapB2i(v)
			}
			return c
		}},
	}
	return g
}

// w1Words are atomic-words' mask and value words.
type w1Words struct{ mask, val []atomic.Uint64 }

// w1AtomicRow is the atomic-words row over w (raw for a bit not pending),
// counting with a branch. Not inlined: a closure cloned into a caller
// that inlines its constructor is compiled without inlining the calls in
// its body (Go 1.26), which cost this row three calls per lookup until
// bits13.
//
//go:noinline
func w1AtomicRow(name string, w w1Words, lookups []uint64, raw *bitslice.File) w1GapRow {
	return w1GapRow{name, func(lo, hi int) int {
		c := 0
		for _, i := range lookups[lo:hi] {
			bit := uint64(1) << (i & 63)
			if w.mask[i>>6].Load()&bit != 0 {
				if w.val[i>>6].Load()&bit != 0 {
					c++
				}
			} else if raw.Get(i) {
				c++
			}
		}
		return c
	}}
}

// w1GapB2i is 1 for true, compiled to a flag set (no branch), as bench's b2i.
func w1GapB2i(v bool) int {
	var x int
	if v {
		x = 1
	}
	return x
}

// run times g's rows in mode (see BenchmarkBitsW1Gap).
func (g *w1Gap) run(b *testing.B, mode string) {
	n := len(g.lookups)
	block := n
	if mode == "blocks" {
		block = 1 << 14
	}
	spent := make([]time.Duration, len(g.rows))
	ratios := make([][]float64, len(g.rows))
	r, ops := 0, 0
	var sink uint64
	for _, row := range g.rows { // warm-up: first touches, caches
		row.run(0, n)
	}
	for b.Loop() {
		for lo := 0; lo < n; lo += block {
			hi := min(lo+block, n)
			dt := make([]time.Duration, len(g.rows))
			sums := make([]int, len(g.rows))
			for j := range g.rows {
				k := (r + j) % len(g.rows)
				if mode == "passes-evict" {
					for x := 0; x < len(g.evict); x += 8 {
						g.evict[x]++
						sink += g.evict[x]
					}
				}
				t0 := time.Now()
				sums[k] = g.rows[k].run(lo, hi)
				dt[k] = time.Since(t0)
				spent[k] += dt[k]
			}
			r++
			for k := range g.rows {
				if sums[k] != sums[0] {
					b.Fatalf("%s counted %d, %s %d", g.rows[k].name, sums[k], g.rows[0].name, sums[0])
				}
				ratios[k] = append(ratios[k], float64(dt[k])/float64(max(dt[0], 1)))
			}
			ops += hi - lo
		}
	}
	_ = sink
	nb := make([]float64, len(ratios[0]))
	for j := range nb { // kvbuf-nobranch ÷ atomic-words-nobranch, same block
		nb[j] = ratios[len(g.rows)-1][j] / ratios[len(g.rows)-2][j]
	}
	slices.Sort(nb)
	b.ReportMetric(nb[len(nb)/2], "kvbuf-nobranch/atomic-words-nobranch")
	for k, row := range g.rows {
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
