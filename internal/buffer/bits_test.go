package buffer

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// faultyFile wraps a real bitslice file and fails ApplyWords, WriteWords or Sync on
// demand (after applying part of the words, as a torn write would).
type faultyFile struct {
	*bitslice.File
	fail     atomic.Bool // ApplyWords and WriteWords apply half and fail, Sync fails
	failSync atomic.Bool // only Sync fails (after every word was applied)
}

var errBitsInjected = errors.New("injected bits failure")

func (f *faultyFile) ApplyWords(c []bitslice.WordChange) error {
	if f.fail.Load() {
		_ = f.File.ApplyWords(c[:len(c)/2])
		return errBitsInjected
	}
	return f.File.ApplyWords(c)
}

func (f *faultyFile) WriteWords(first uint64, words []uint64) error {
	if f.fail.Load() {
		_ = f.File.WriteWords(first, words[:len(words)/2])
		return errBitsInjected
	}
	return f.File.WriteWords(first, words)
}

func (f *faultyFile) Sync() error {
	if f.fail.Load() || f.failSync.Load() {
		return errBitsInjected
	}
	return f.File.Sync()
}

func (f *faultyFile) SyncLagged() error {
	if f.fail.Load() || f.failSync.Load() {
		return errBitsInjected
	}
	return f.File.SyncLagged()
}

// bitsModel is a dense model of a bitslice.
type bitsModel struct {
	bits  []bool
	count int
	n     uint64 // length
}

func newBitsModel(universe uint64) *bitsModel { return &bitsModel{bits: make([]bool, universe)} }

func (m *bitsModel) set(i uint64, v bool) {
	if m.bits[i] != v {
		m.bits[i] = v
		if v {
			m.count++
		} else {
			m.count--
		}
	}
	m.n = max(m.n, i+1)
}

func (m *bitsModel) clone() *bitsModel {
	return &bitsModel{bits: slices.Clone(m.bits), count: m.count, n: m.n}
}

func (m *bitsModel) ones(from uint64) []uint64 {
	var out []uint64
	for k := from; k < m.n && len(out) < 300; k++ {
		if m.bits[k] {
			out = append(out, k)
		}
	}
	return out
}

type bitsReader interface {
	Get(uint64) bool
	Count() uint64
	Len() uint64
	GetMany([]uint64, []bool)
}

func checkBits(t testing.TB, r bitsReader, ones func(uint64) []uint64, m *bitsModel, universe uint64, rng *rand.Rand, where string) {
	t.Helper()
	if got, want := r.Count(), uint64(m.count); got != want {
		t.Fatalf("%s: Count = %d, want %d", where, got, want)
	}
	if got := r.Len(); got < m.n {
		t.Fatalf("%s: Len = %d, below %d", where, got, m.n)
	}
	idx := make([]uint64, 0, 256)
	for range 256 {
		idx = append(idx, rng.Uint64N(universe))
	}
	out := make([]bool, len(idx))
	r.GetMany(idx, out)
	for j, i := range idx {
		if got, want := r.Get(i), m.bits[i]; got != want || out[j] != want {
			t.Fatalf("%s: bit %d: Get %v, GetMany %v; want %v", where, i, got, out[j], want)
		}
	}
	from := rng.Uint64N(universe)
	got, want := ones(from), m.ones(from)
	if len(want) > 300 {
		want = want[:300]
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: Ones(%d) = %v, want %v", where, from, got, want)
	}
}

// collectNext is collect through NextOnes: calls into a dst of size bits,
// each from the previous call's next, up to 300 bits (nextOnesRun).
func collectNext(t *testing.T, b *Bits, from uint64, size int) []uint64 {
	t.Helper()
	return nextOnesRun(t, "", liveNextOnes(b), b.Len, from, size, 300)
}

// collectSnapNext is collectNext over a snapshot.
func collectSnapNext(t *testing.T, s *BitsSnapshot, from uint64, size int) []uint64 {
	t.Helper()
	return nextOnesRun(t, "snapshot ", s.NextOnes, s.Len, from, size, 300)
}

// liveNextOnes is b.NextOnes with no stop flag.
func liveNextOnes(b *Bits) func(uint64, []uint64) (int, uint64) {
	return func(from uint64, dst []uint64) (int, uint64) { return b.NextOnes(from, dst, nil) }
}

// nextOnesRun calls next into a dst of size bits, each call from the
// previous one's next, until a short batch or limit bits (no limit if
// negative), and returns the bits read, at most limit. It checks each
// call's results against the contract: increasing indexes at or after
// from, below next, and a short batch only at the end (next then at or
// past the length). what prefixes its messages.
func nextOnesRun(t *testing.T, what string, next func(uint64, []uint64) (int, uint64), length func() uint64, from uint64, size, limit int) []uint64 {
	t.Helper()
	dst := make([]uint64, size)
	var out []uint64
	for limit < 0 || len(out) < limit {
		n, nx := next(from, dst)
		for j, i := range dst[:n] {
			if i < from || i >= nx || j > 0 && i <= dst[j-1] {
				t.Fatalf("%sNextOnes(%d, [%d]) read %d at %d, next %d", what, from, size, i, j, nx)
			}
		}
		out = append(out, dst[:n]...)
		if n < size {
			if nx != max(from, length()) {
				t.Fatalf("%sNextOnes(%d, [%d]) ended short (%d) at next %d, length %d", what, from, size, n, nx, length())
			}
			break
		}
		from = nx
	}
	if limit >= 0 {
		out = out[:min(len(out), limit)]
	}
	return out
}

// collect returns the first 300 indexes of seq (stopping it early, which
// exercises the early exit too).
func collect(seq func(func(uint64) bool)) []uint64 {
	var out []uint64
	for i := range seq {
		out = append(out, i)
		if len(out) == 300 {
			break
		}
	}
	return out
}

type bitsSnap struct {
	s *BitsSnapshot
	m *bitsModel
}

// TestBitsModel runs random sets, ranges (including whole 32768-bit runs),
// freezes, failed and successful writes, releases and snapshots against a
// model; every read, Count and Ones is exact.
func TestBitsModel(t *testing.T) {
	seed := seedFor(t)
	for round := range 6 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(round)))
			f, err := bitslice.Create(filepath.Join(t.TempDir(), "m.bits"), 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			ff := &faultyFile{File: f}
			var acct Account
			o := &Options{}
			if round%2 == 1 {
				o.PoolBytes = -1
			}
			r, err := o.resolve()
			if err != nil {
				t.Fatal(err)
			}
			b := newBits(f, ff, &acct, r)
			if round%3 != 0 {
				// SetMany coalesces every slice, a page per window, so
				// that small slices take the coalescing path and span
				// several windows.
				b.manyCfg = manyConfig{min: 1, shift: pageShift}
			}
			universe, steps := uint64(4*pageBits), 2000
			switch round {
			case 2, 3:
				universe = 600
			case 4, 5:
				// Past the word filter's cover of a new table (2^20 bits
				// over an empty file: B4a, unfiltered), sparse; fewer
				// steps, as every check scans the universe.
				universe = 1<<20 + 1<<15
				steps = 300
			}
			bitsModelRun(t, rng, b, ff, &acct, universe, steps)
		})
	}
}

func bitsModelRun(t *testing.T, rng *rand.Rand, b *Bits, ff *faultyFile, acct *Account, universe uint64, steps int) {
	m := newBitsModel(universe)
	var gen, lastWM uint64 // lastWM: the watermark of the last successful write
	var queue []*BitsGen
	var snaps []bitsSnap
	f := ff.File
	defer func() {
		for _, s := range snaps {
			s.s.Close()
		}
	}()
	for step := range steps {
		where := fmt.Sprintf("step %d", step)
		switch p := rng.IntN(100); {
		case p < 40:
			i, v := rng.Uint64N(universe), rng.IntN(3) > 0
			if err := b.Set(i, v); err != nil {
				t.Fatal(err)
			}
			m.set(i, v)
		case p < 44:
			n, spread := rng.IntN(40), uint64(300)
			if rng.IntN(8) == 0 {
				// Enough to coalesce with the default configuration,
				// with repeated bits.
				n, spread = defaultMany.min+rng.IntN(1000), universe
			}
			idx := make([]uint64, n)
			vals := make([]bool, len(idx))
			base := rng.Uint64N(universe)
			for j := range idx {
				idx[j] = (base + rng.Uint64N(spread)) % universe
				vals[j] = rng.IntN(2) == 0
			}
			if err := b.SetMany(idx, vals); err != nil {
				t.Fatal(err)
			}
			for j, i := range idx {
				m.set(i, vals[j])
			}
		case p < 48:
			lo := rng.Uint64N(universe)
			hi := min(universe, lo+rng.Uint64N(3*pageBits/2))
			if rng.IntN(3) == 0 {
				lo = lo / pageBits * pageBits
				hi = min(universe, lo+pageBits*uint64(1+rng.IntN(2)))
			}
			v := rng.IntN(2) == 0
			if err := b.SetRange(lo, hi, v); err != nil {
				t.Fatal(err)
			}
			for i := lo; i < hi; i++ {
				m.set(i, v)
			}
		case p < 58:
			gen++
			if g := b.Freeze(gen); g != nil {
				queue = append(queue, g)
			}
		case p < 68:
			if len(queue) > 0 {
				fail := rng.IntN(4) == 0
				failSync := fail && rng.IntN(2) == 0
				ff.fail.Store(fail && !failSync)
				ff.failSync.Store(failSync)
				// Both syncs: Write (msync, then the header with this
				// watermark) and WriteLagged (one fdatasync, the header
				// with the last successful write's watermark).
				lagged := rng.IntN(2) == 0
				write := queue[0].Write
				if lagged {
					write = queue[0].WriteLagged
				}
				err := write(context.Background(), queue[0].g)
				ff.fail.Store(false)
				ff.failSync.Store(false)
				if fail != (err != nil) {
					t.Fatalf("%s: Write (lagged %v) with fail=%v: %v", where, lagged, fail, err)
				}
				if err == nil {
					if wm := f.Watermark(); (lagged && wm > lastWM) || (!lagged && wm != queue[0].g) {
						t.Fatalf("%s: header watermark %d after Write (lagged %v) of %d; the previous write's was %d", where, wm, lagged, queue[0].g, lastWM)
					}
					lastWM = queue[0].g
					b.Release(queue[0].g)
					queue = queue[1:]
				}
			}
		case p < 70:
			if len(queue) == 0 {
				b.Settle()
			}
		case p < 73:
			if len(snaps) < 4 {
				snaps = append(snaps, bitsSnap{b.Snapshot(), m.clone()})
			}
		case p < 75:
			if len(snaps) > 0 {
				i := rng.IntN(len(snaps))
				snaps[i].s.Close()
				snaps = slices.Delete(snaps, i, i+1)
			}
		default:
			checkBits(t, b, func(from uint64) []uint64 { return collect(b.Ones(from)) }, m, universe, rng, where)
			size := 1 + rng.IntN(300)
			checkBits(t, b, func(from uint64) []uint64 { return collectNext(t, b, from, size) }, m, universe, rng, fmt.Sprintf("%s, NextOnes [%d]", where, size))
			for i, s := range snaps {
				checkBits(t, s.s, func(from uint64) []uint64 { return collect(s.s.Ones(from)) }, s.m, universe, rng, fmt.Sprintf("%s, snapshot %d", where, i))
				checkBits(t, s.s, func(from uint64) []uint64 { return collectSnapNext(t, s.s, from, size) }, s.m, universe, rng, fmt.Sprintf("%s, snapshot %d, NextOnes [%d]", where, i, size))
			}
		}
	}
	for _, g := range queue {
		if err := g.Write(context.Background(), g.g); err != nil {
			t.Fatal(err)
		}
		b.Release(g.g)
	}
	gen++
	if g := b.Freeze(gen); g != nil {
		if err := g.Write(context.Background(), gen); err != nil {
			t.Fatal(err)
		}
		b.Release(gen)
	}
	b.Settle()
	if !b.direct() {
		t.Fatal("not back on the fast path after everything was flushed")
	}
	if n := acct.Bytes(); n != 0 {
		t.Fatalf("account after the final flush = %d", n)
	}
	checkBits(t, b, func(from uint64) []uint64 { return collect(b.Ones(from)) }, m, universe, rand.New(rand.NewPCG(1, 2)), "after the final flush")
	for _, size := range []int{1, 2, 63, 64, 65, 256} {
		checkBits(t, b, func(from uint64) []uint64 { return collectNext(t, b, from, size) }, m, universe, rand.New(rand.NewPCG(1, 2)), fmt.Sprintf("NextOnes [%d] after the final flush", size))
	}
	// The file alone holds the model now.
	for i := range universe {
		if b.file.Get(i) != m.bits[i] {
			t.Fatalf("file bit %d = %v, want %v", i, !m.bits[i], m.bits[i])
		}
	}
	if got := b.file.CountOnes(); got != uint64(m.count) {
		t.Fatalf("file CountOnes = %d, want %d", got, m.count)
	}
	checkSummary(t, b)
	for i, s := range snaps {
		checkBits(t, s.s, func(from uint64) []uint64 { return collect(s.s.Ones(from)) }, s.m, universe, rand.New(rand.NewPCG(3, uint64(i))), fmt.Sprintf("snapshot %d after the final flush", i))
		for _, size := range []int{1, 2, 63, 64, 65, 256} {
			checkBits(t, s.s, func(from uint64) []uint64 { return collectSnapNext(t, s.s, from, size) }, s.m, universe, rand.New(rand.NewPCG(3, uint64(i))), fmt.Sprintf("snapshot %d after the final flush, NextOnes [%d]", i, size))
		}
	}
}

// checkSummary checks that the region summary marks exactly the lines of
// the file that hold a set bit (true once everything is flushed: a failed
// write may leave it behind the file until it is retried, while the
// generation is still pending).
func checkSummary(t testing.TB, b *Bits) {
	t.Helper()
	s, v := b.sum.Load(), b.view.Load()
	ix := s.index.Load()
	if got, want := uint64(len(s.lines)), summaryPages(v.nbits); got != want || uint64(len(ix.start)) != got+1 {
		t.Fatalf("summary of %d pages (index %d) for %d bits, want %d", got, len(ix.start), v.nbits, want)
	}
	for l := range uint64(len(s.lines)) * 64 {
		var or uint64
		for w := l * lineWords; w < (l+1)*lineWords; w++ {
			or |= v.fileWord(w)
		}
		if marked := s.lines[l>>6]>>(l&63)&1 != 0; marked != (or != 0) {
			t.Fatalf("summary line %d marked %v, the file's line is %#x", l, marked, or)
		}
	}
	for pi := range uint64(len(s.lines)) {
		var want []uint16
		for w := pi * pageWords64; w < (pi+1)*pageWords64; w++ {
			for x := v.fileWord(w); x != 0; x &= x - 1 {
				want = append(want, uint16((w-pi*pageWords64)*64)+uint16(bits.TrailingZeros64(x)))
			}
		}
		offs, indexed := ix.offsets(pi)
		switch {
		case len(want) > maxIndexed:
			if indexed {
				t.Fatalf("page %d: %d set bits, indexed", pi, len(want))
			}
		case !indexed || !slices.Equal(offs, want) && len(want)+len(offs) > 0:
			t.Fatalf("page %d: index %v (%v), the file has %v", pi, offs, indexed, want)
		}
	}
}

// TestBitsSummaryPagesChangeKind flushes a page from sparse to dense, a
// dense page staying dense and a dense page back to sparse: the first and
// last need a new index (rule B9), the second keeps the index as it was
// (summarize publishes none when every page written was and stays
// unindexed). Ones and the summary must match the file after each.
func TestBitsSummaryPagesChangeKind(t *testing.T) {
	r := newBitsRig(t, nil)
	b := r.b
	check := func(what string) {
		t.Helper()
		checkSummary(t, b)
		var want []uint64
		for i := range b.Len() {
			if b.Get(i) {
				want = append(want, i)
			}
		}
		if got := slices.Collect(b.Ones(0)); !slices.Equal(got, want) {
			t.Fatalf("%s: Ones(0) has %d bits, the overlay %d", what, len(got), len(want))
		}
	}
	set := func(lo, hi, step uint64, v bool) {
		t.Helper()
		for i := lo; i < hi; i += step {
			if err := b.Set(i, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	set(0, 2*pageBits, pageBits/4, true) // pages 0 and 1 sparse
	r.flush()
	check("sparse")
	set(pageBits, 2*pageBits, 7, true) // page 1 dense, alone in the flush
	r.flush()
	check("page 1 turned dense")
	before := b.sum.Load().index.Load()
	set(pageBits+1, 2*pageBits, 11, true) // page 1 stays dense
	r.flush()
	check("page 1 stayed dense")
	if b.sum.Load().index.Load() != before {
		t.Error("a flush of a page that stays dense published a new index")
	}
	set(pageBits, 2*pageBits, 1, false) // page 1 empty again
	set(pageBits+5, pageBits+6, 1, true)
	r.flush()
	check("page 1 back to sparse")
}

// TestBitsSummaryAtOpen: an overlay over a file that already holds bits
// builds its summary and count from the file, and Ones skips nothing.
func TestBitsSummaryAtOpen(t *testing.T) {
	f, err := bitslice.Create(filepath.Join(t.TempDir(), "s.bits"), 3*pageBits+100)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Page 0 sparse (indexed), page 1 dense (read through lines), page 2
	// empty, page 3 sparse and partial.
	want := []uint64{0, 511, 512, 4095}
	for i := uint64(pageBits); i < pageBits+4*maxIndexed; i += 3 {
		want = append(want, i)
	}
	want = append(want, 3*pageBits+7, 3*pageBits+99)
	for _, i := range want {
		if err := f.Set(i, true); err != nil {
			t.Fatal(err)
		}
	}
	b, err := NewBits(f, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSummary(t, b)
	if got := b.Count(); got != uint64(len(want)) {
		t.Fatalf("Count = %d, want %d", got, len(want))
	}
	if got := slices.Collect(b.Ones(0)); !slices.Equal(got, want) {
		t.Fatalf("Ones(0) = %v, want %v", got, want)
	}
	for _, from := range []uint64{1, 513, pageBits + 1, pageBits + 4*maxIndexed, 3*pageBits + 8} {
		k, _ := slices.BinarySearch(want, from)
		if got := slices.Collect(b.Ones(from)); !slices.Equal(got, want[k:]) {
			t.Fatalf("Ones(%d) = %v, want %v", from, got, want[k:])
		}
	}
	ix := b.sum.Load().index.Load()
	o0, i0 := ix.offsets(0)
	_, i1 := ix.offsets(1)
	o2, i2 := ix.offsets(2)
	if !i0 || len(o0) != 4 || i1 || !i2 || len(o2) != 0 {
		t.Fatal("pages 0 (sparse), 1 (dense), 2 (empty) not summarized as such")
	}
}

func TestBitsBadInput(t *testing.T) {
	r := newBitsRig(t, &Options{MaxBits: 1000})
	if err := r.b.Set(1000, true); !errors.Is(err, kverr.ErrOutOfRange) {
		t.Errorf("Set(max) = %v", err)
	}
	if err := r.b.SetRange(5, 4, true); !errors.Is(err, kverr.ErrBadRange) {
		t.Errorf("SetRange(5, 4) = %v", err)
	}
	if err := r.b.SetRange(0, 1001, true); !errors.Is(err, kverr.ErrOutOfRange) {
		t.Errorf("SetRange(0, 1001) = %v", err)
	}
	if err := r.b.SetMany([]uint64{1, 2}, []bool{true}); !errors.Is(err, kverr.ErrBadRange) {
		t.Errorf("SetMany(2 indexes, 1 value) = %v", err)
	}
	if err := r.b.SetMany([]uint64{1, 1000}, []bool{true, true}); !errors.Is(err, kverr.ErrOutOfRange) {
		t.Errorf("SetMany(1, max) = %v", err)
	}
	if r.b.Get(1) || r.b.Count() != 0 {
		t.Error("a refused SetMany set a bit")
	}
	// The same through the coalescing pass (CheckMany coalesces while it
	// checks): refused at the bad index with nothing recorded, and the
	// scratch it coalesced into comes back clean (the next SetMany, in
	// the same window, records only its own bits).
	r.b.manyCfg = manyConfig{min: 1, shift: pageShift}
	if err := r.b.SetMany([]uint64{1, 3, 5, 1000, 7}, []bool{true, true, true, true, true}); !errors.Is(err, kverr.ErrOutOfRange) {
		t.Errorf("coalesced SetMany(1, 3, 5, max, 7) = %v", err)
	}
	if r.b.Get(1) || r.b.Count() != 0 {
		t.Error("a refused coalesced SetMany set a bit")
	}
	if err := r.b.SetMany([]uint64{2, 4}, []bool{true, true}); err != nil {
		t.Fatal(err)
	}
	if r.b.Get(1) || r.b.Get(3) || !r.b.Get(2) || !r.b.Get(4) || r.b.Count() != 2 {
		t.Errorf("after a refused coalesced SetMany, SetMany(2, 4): bits 1-4 %v %v %v %v, count %d (want false true false true, 2)",
			r.b.Get(1), r.b.Get(2), r.b.Get(3), r.b.Get(4), r.b.Count())
	}
	if _, err := NewBits(r.f, nil, &Options{MaxBits: bitslice.MaxBits + 1}); !errors.Is(err, kverr.ErrBadOptions) {
		t.Errorf("NewBits(MaxBits too large) = %v", err)
	}
}

// TestBitsHugeRangeIsCheap sets 2^30 bits: whole pages cost a pointer each,
// so the pending memory stays small, and the flush applies them.
func TestBitsHugeRangeIsCheap(t *testing.T) {
	r := newBitsRig(t, nil)
	const n = 1 << 30
	if err := r.b.SetRange(0, n, true); err != nil {
		t.Fatal(err)
	}
	if got := r.b.Count(); got != n {
		t.Fatalf("Count = %d", got)
	}
	if pb := r.b.PendingBytes(); pb > 1<<20 {
		t.Fatalf("PendingBytes = %d for a range of 2^30 bits", pb)
	}
	if err := r.b.Set(12345, false); err != nil {
		t.Fatal(err)
	}
	if r.b.Get(12345) || !r.b.Get(12346) || r.b.Count() != n-1 {
		t.Fatal("copy on write of a shared page went wrong")
	}
	if fullPages[1][0] != lowHalf<<32|lowHalf {
		t.Fatal("a shared page was written")
	}
}

// TestBitsFreezeRetriedWithSameGeneration: see the KV test of that name.
func TestBitsFreezeRetriedWithSameGeneration(t *testing.T) {
	r := newBitsRig(t, nil)
	if err := r.b.Set(5, true); err != nil {
		t.Fatal(err)
	}
	s := r.b.Snapshot() // seals the table holding bit 5
	defer s.Close()
	if err := r.b.Set(6, true); err != nil {
		t.Fatal(err)
	}
	first := r.b.Freeze(3)
	again := r.b.Freeze(3)
	if first == nil || again == nil || len(again.tables) != len(first.tables) {
		t.Fatalf("retried Freeze(3): %v, first %v", again, first)
	}
	if err := again.Write(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	r.b.Release(3)
	if !r.f.Get(5) || !r.f.Get(6) {
		t.Fatal("a table of the first attempt was not written")
	}
}

// TestBitsSettleKeepsSealed: Settle publishes a direct view only with no
// sealed table (B3), not merely an empty active table: a table sealed by
// a Freeze whose generation is not written yet, or by a Snapshot (which
// the engine takes with no generation in flight, when its flusher may
// settle), holds bits the file lacks, and a direct view reads the file
// alone. After Settle, every read still sees the sealed bits; once the
// generation is written and released, Settle goes direct.
func TestBitsSettleKeepsSealed(t *testing.T) {
	for _, by := range []string{"freeze", "snapshot"} {
		r := newSizedBitsRig(t, 1<<16)
		if err := r.b.Set(100, true); err != nil {
			t.Fatal(err)
		}
		r.gen++
		var s *BitsSnapshot
		var g *BitsGen
		if by == "freeze" {
			if g = r.b.Freeze(r.gen); g == nil {
				t.Fatal("nothing frozen")
			}
		} else {
			s = r.b.Snapshot()
		}
		if v := r.b.view.Load(); len(v.sealed) == 0 || !v.active.empty() {
			t.Fatalf("%s: %d sealed tables, active empty %v: want the bit sealed, the active table empty", by, len(v.sealed), v.active.empty())
		}
		r.b.Settle()
		if r.b.direct() {
			t.Errorf("%s: Settle published a direct view with a sealed table", by)
		}
		out := make([]bool, 1)
		r.b.GetMany([]uint64{100}, out)
		if !r.b.Get(100) || !out[0] || !slices.Equal(slices.Collect(r.b.Ones(0)), []uint64{100}) {
			t.Errorf("%s: after Settle, Get(100) %v, GetMany %v, Ones %v: want the sealed bit", by, r.b.Get(100), out[0], slices.Collect(r.b.Ones(0)))
		}
		if s != nil {
			s.Close()
			if g = r.b.Freeze(r.gen); g == nil {
				t.Fatal("the snapshot's table not frozen")
			}
		}
		if err := g.Write(context.Background(), r.gen); err != nil {
			t.Fatal(err)
		}
		r.b.Release(r.gen)
		r.b.Settle()
		if !r.b.direct() || !r.b.Get(100) {
			t.Errorf("%s: after the flush, Settle: direct %v, Get(100) %v; want true, true", by, r.b.direct(), r.b.Get(100))
		}
	}
}

// TestBitsFilterUnionPastCover: a sealed table written past the word
// filter's cover of its day (unfiltered: B4a; the first table, made over
// the empty file) and a newer sealed one with a larger cover (made for the
// overlay's length since). A lookup of a bit past the older cover but
// within the newer must not trust the union of the filters there: the
// newest pending value of the bit is in a table whose filter does not
// reach it.
func TestBitsFilterUnionPastCover(t *testing.T) {
	r := newBitsRig(t, &Options{PoolBytes: -1})
	const x = 1<<20 + 100 // past the cover of a table made over an empty file
	if err := r.b.Set(x, true); err != nil {
		t.Fatal(err)
	}
	if a := r.b.view.Load().active; !a.unfiltered.Load() {
		t.Fatal("the first table is not unfiltered past its cover")
	}
	r.b.Freeze(1) // not written: x stays pending, the file empty
	// The table made at Freeze(1), covering x:
	if err := r.b.Set(5, true); err != nil {
		t.Fatal(err)
	}
	if a := r.b.view.Load().active; a.unfiltered.Load() || uint64(len(a.lines))*filterWordBits <= x {
		t.Fatal("the second table's filter does not cover x")
	}
	r.b.Freeze(2)
	if r.f.Get(x) {
		t.Fatal("x reached the file")
	}
	if !r.b.Get(x) {
		t.Fatal("bit past the older filter's cover read as the file's 0, not the pending 1")
	}
	out := make([]bool, 1)
	if r.b.GetMany([]uint64{x}, out); !out[0] {
		t.Fatal("GetMany read the file's 0, not the pending 1")
	}
}

// TestBitsFilterFollowsGrowth: a bitslice created empty and grown by its
// first flush past the line filter's cover of the tables made then (pooled
// tables included) keeps filtering lookups afterwards: the active table of
// each later generation covers the file, so a few sets leave it filtered,
// not dense, and a lookup of a word no write touched reads the file alone
// (no table page probed). With pooling on, as the engine runs it.
func TestBitsFilterFollowsGrowth(t *testing.T) {
	for _, opts := range []*Options{nil, {PoolBytes: -1}} {
		r := newBitsRig(t, opts)
		const n = 4 << 20 // past the 1M-bit cover of a table made over the empty file
		for i := uint64(0); i < n; i += 4099 {
			if err := r.b.Set(i, true); err != nil {
				t.Fatal(err)
			}
		}
		for gen := range 5 {
			r.flush()
			for k := range uint64(16) {
				if err := r.b.Set(n-1-k*9973, gen%2 == 0); err != nil {
					t.Fatal(err)
				}
			}
			a := r.b.view.Load().active
			if a.unfiltered.Load() || a.dense.Load() {
				t.Fatalf("opts %+v, generation %d: the active table's filter covers %d bits of %d (unfiltered %v, dense %v)",
					opts, gen, uint64(len(a.lines))*filterWordBits, r.b.Len(), a.unfiltered.Load(), a.dense.Load())
			}
			var probed int
			testHook = func(point string) {
				if point == "bits-page" {
					probed++
				}
			}
			// Word 1 (bits 64-127): set only before the first flush, if at
			// all; nothing pending there now.
			got := r.b.Get(100)
			testHook = nil
			if got != r.f.Get(100) || probed != 0 {
				t.Fatalf("generation %d: Get(100) = %v (file %v), %d table pages probed", gen, got, r.f.Get(100), probed)
			}
		}
	}
}

// TestBitsOnesBatches: Ones reads a batch of onesBatch bits at a time
// (onesCursor); batches end inside an indexed page, inside a dense page
// and inside a pending one, and a sequence from any offset, stopped early
// or not, is the model's.
func TestBitsOnesBatches(t *testing.T) {
	const n = 5*pageBits + 77
	f, err := bitslice.Create(filepath.Join(t.TempDir(), "o.bits"), n)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	model := map[uint64]bool{}
	// Page 0 indexed with 1000 bits (four batches), page 1 dense, page 2
	// empty, page 3 indexed in the file and pending, page 4 dense and
	// partly pending, page 5 partial, its last bit set. Pages 0, 1 and 4
	// hold runs of adjacent set bits, so that a batch that continues one
	// bit late (or early) misses (or repeats) one.
	var file []uint64
	for k := uint64(0); k < 1000; k++ {
		file = append(file, k*31)
	}
	for i := uint64(31001); i < 31011; i++ {
		file = append(file, i)
	}
	for i := uint64(pageBits); i < 2*pageBits; i += 5 {
		file = append(file, i)
	}
	for i := uint64(pageBits + 1001); i < pageBits+1301; i++ {
		if i%5 != 0 {
			file = append(file, i)
		}
	}
	for k := uint64(0); k < 600; k++ {
		file = append(file, 3*pageBits+k*50)
	}
	for i := uint64(4 * pageBits); i < 5*pageBits; i += 3 {
		file = append(file, i)
	}
	for i := uint64(4*pageBits + 7001); i < 4*pageBits+7400; i++ {
		if i%3 != 1 {
			file = append(file, i)
		}
	}
	file = append(file, 5*pageBits, n-1)
	for _, i := range file {
		if err := f.Set(i, true); err != nil {
			t.Fatal(err)
		}
		model[i] = true
	}
	b, err := NewBits(f, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	set := func(i uint64, v bool) {
		if err := b.Set(i, v); err != nil {
			t.Fatal(err)
		}
		model[i] = v
	}
	check := func(where string) {
		t.Helper()
		var want []uint64
		for i := range uint64(n) {
			if model[i] {
				want = append(want, i)
			}
		}
		froms := []uint64{0, 1, 255 * 31, 256*31 + 1, pageBits - 1, pageBits, 3*pageBits + 12345, 4*pageBits + 1, 5 * pageBits, n - 1, n, n + 5}
		for range 20 {
			froms = append(froms, rng.Uint64N(n))
		}
		for _, from := range froms {
			k, _ := slices.BinarySearch(want, from)
			if got := slices.Collect(b.Ones(from)); !slices.Equal(got, want[k:]) {
				t.Fatalf("%s: Ones(%d): %d bits, want %d", where, from, len(got), len(want[k:]))
			}
		}
		for _, stopAt := range []int{0, 1, 255, 256, 257, 511, 999, 1000, 1001, len(want) - 1} {
			var got []uint64
			for i := range b.Ones(0) {
				if len(got) == stopAt {
					break
				}
				got = append(got, i)
			}
			if !slices.Equal(got, want[:stopAt]) {
				t.Fatalf("%s: Ones(0) stopped after %d: %d bits", where, stopAt, len(got))
			}
		}
		// NextOnes: every dst size from 1 to 300 from the start, sizes
		// about a word and a batch from the other offsets.
		for size := 1; size <= 300; size++ {
			if got := collectNextAll(t, b, 0, size); !slices.Equal(got, want) {
				t.Fatalf("%s: NextOnes(0, [%d]): %d bits, want %d (first difference at %d)", where, size, len(got), len(want), firstDiff(got, want))
			}
		}
		for _, from := range froms {
			k, _ := slices.BinarySearch(want, from)
			for _, size := range []int{1, 7, 63, 64, 65, 255, 256, 257} {
				if got := collectNextAll(t, b, from, size); !slices.Equal(got, want[k:]) {
					t.Fatalf("%s: NextOnes(%d, [%d]): %d bits, want %d (first difference at %d)", where, from, size, len(got), len(want[k:]), firstDiff(got, want[k:]))
				}
			}
		}
		// From on each set bit and between: the first bit read is the
		// model's next one.
		dst := make([]uint64, 1)
		for j, i := range want {
			if j%7 != 0 {
				continue
			}
			for _, from := range []uint64{i, i + 1} {
				k, _ := slices.BinarySearch(want, from)
				n, next := b.NextOnes(from, dst, nil)
				if k == len(want) {
					if n != 0 || next != b.Len() {
						t.Fatalf("%s: NextOnes(%d) past the last bit: %d bits, next %d (length %d)", where, from, n, next, b.Len())
					}
					continue
				}
				if n != 1 || dst[0] != want[k] || next <= want[k] || k+1 < len(want) && next > want[k+1] {
					t.Fatalf("%s: NextOnes(%d, [1]) = %d bits (%d), next %d; want %d and a next up to the bit after it", where, from, n, dst[0], next, want[k])
				}
			}
		}
		// Past the length: nothing, and next is from.
		for _, from := range []uint64{b.Len(), b.Len() + 1, 1 << 40} {
			if k, next := b.NextOnes(from, dst, nil); k != 0 || next != from {
				t.Fatalf("%s: NextOnes(%d) past the length %d: %d bits, next %d", where, from, b.Len(), k, next)
			}
		}
		// OnesUntil: stop set during the first page ends the sequence at
		// the next page.
		var stop atomic.Bool
		cnt := 0
		for i := range b.OnesUntil(0, &stop) {
			if i >= pageBits {
				t.Fatalf("%s: OnesUntil yielded %d after stop was set in page 0", where, i)
			}
			cnt++
			stop.Store(true)
		}
		if cnt == 0 || cnt > onesBatch {
			t.Fatalf("%s: OnesUntil yielded %d bits after the stop, want 1 to a batch", where, cnt)
		}
	}
	check("file only")
	for k := range 400 {
		set(3*pageBits+uint64(k)*70, k%3 != 0)
		set(4*pageBits+rng.Uint64N(pageBits), rng.IntN(2) == 0)
	}
	set(n-1, false)
	check("pending")
	ctx := context.Background()
	if g := b.Freeze(1); g != nil {
		if err := g.Write(ctx, 1); err != nil {
			t.Fatal(err)
		}
		b.Release(1)
	}
	b.Settle()
	check("flushed")
}

// collectNextAll is collectNext with no cap on the bits read.
func collectNextAll(t *testing.T, b *Bits, from uint64, size int) []uint64 {
	t.Helper()
	return nextOnesRun(t, "", liveNextOnes(b), b.Len, from, size, -1)
}

// firstDiff is the first index where got and want differ.
func firstDiff(got, want []uint64) int {
	for j := range min(len(got), len(want)) {
		if got[j] != want[j] {
			return j
		}
	}
	return min(len(got), len(want))
}

// TestBitsFlushAppliesPages: with no snapshot open the flush applies each
// table page by page straight from its packed words (applyPages, runs of
// consecutive pages written by File.WriteWords): the file must then hold
// every pending bit, on the first page, past a page with nothing pending
// (skipped: it ends a run) and on a last page the file's end cuts (its
// last word holding the last bit), sets to 1 and clears of bits the file
// held, next to bits of the same words that stay; and the region summary
// of every page applied must be brought up to date before the release
// (B9), which Ones and checkSummary read (mutations 261, 262, 350, 351).
func TestBitsFlushAppliesPages(t *testing.T) {
	r := newBitsRig(t, nil)
	b := r.b
	want := map[uint64]bool{}
	set := func(i uint64, v bool) {
		t.Helper()
		if err := b.Set(i, v); err != nil {
			t.Fatal(err)
		}
		want[i] = v
	}
	check := func(what string) {
		t.Helper()
		checkSummary(t, b)
		var ones []uint64
		for i := range b.Len() {
			if got := r.f.Get(i); got != want[i] {
				t.Fatalf("%s: the file's bit %d is %v, want %v", what, i, got, want[i])
			}
			if want[i] {
				ones = append(ones, i)
			}
		}
		if got := slices.Collect(b.Ones(0)); !slices.Equal(got, ones) {
			t.Fatalf("%s: Ones(0) has %d bits, want %d", what, len(got), len(ones))
		}
	}
	last := uint64(3*pageBits + 100) // page 3 is cut by the file's end: 2 words of 512
	for i := uint64(0); i < pageBits; i += 97 {
		set(i, true) // page 0 sparse, page 1 and 2 nothing pending
	}
	for i := uint64(3 * pageBits); i <= last; i += 3 {
		set(i, true)
	}
	set(last, true)
	r.flush()
	if b.Len() <= last || b.Len() >= 4*pageBits {
		t.Fatalf("Len %d after the flush, want above %d and inside page 3", b.Len(), last)
	}
	check("first flush")
	for i := uint64(0); i < pageBits; i += 97 * 2 {
		set(i, false) // clears of bits the file holds
	}
	set(last, false)
	set(2*pageBits+5, true)
	r.flush()
	check("second flush")
}

// TestBitsUnionBufferPrepared: Recycle prepares the buffer of the next
// freeze's union of sealed filters, the freeze publishes its union in it
// (marks of the frozen table, nothing else), takes it only once, and a
// union longer than the buffer gets new memory.
func TestBitsUnionBufferPrepared(t *testing.T) {
	r := newBitsRig(t, nil)
	for _, i := range []uint64{5, 70_000} {
		if err := r.b.Set(i, true); err != nil {
			t.Fatal(err)
		}
	}
	g := r.b.Freeze(1)
	if err := g.Write(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	r.b.Release(1) // ReleaseView, then Recycle: prepares the buffer
	buf := r.b.unionBuf
	if n := len(r.b.view.Load().active.lines); len(buf) < n || n == 0 {
		t.Fatalf("prepared union buffer of %d words for a filter of %d", len(buf), n)
	}
	if err := r.b.Set(9000, true); err != nil {
		t.Fatal(err)
	}
	r.b.Freeze(2)
	v := r.b.view.Load()
	if r.b.unionBuf != nil || len(v.sfilt) == 0 || &v.sfilt[0] != &buf[0] {
		t.Fatal("the freeze did not publish its union in the prepared buffer, or kept it")
	}
	for k, w := range v.sfilt {
		want := uint64(0)
		if k == 9000/filterWordBits {
			want = 1 << (9000 / 64 % 64)
		}
		if w != want {
			t.Fatalf("union word %d = %#x, want %#x", k, w, want)
		}
	}
	if !r.b.Get(9000) || r.b.Get(9001) {
		t.Fatal("lookups through the union disagree with the pending bits")
	}
	if u, _ := unionFilters(v.sealed, make([]uint64, 1)); len(u) != len(v.sfilt) {
		t.Fatalf("a short buffer gave a union of %d words, want %d", len(u), len(v.sfilt))
	}
}

// TestBitsMergePage checks the flush's merge (mergePage, then the file's
// last word masked and lineSummary, as applyPages does) against a word by
// word reference (pageWord64): full pages on its bounds-check-free path,
// full pages holding the file's last word (a length not a multiple of 64),
// and partial pages, with random pending masks and values over random file
// words, and pages with nothing pending, everything pending, and lines
// left empty.
func TestBitsMergePage(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 26))
	for round := range 200 {
		var c bitsPage
		switch round % 4 {
		case 0:
			// nothing pending
		case 1:
			c = fullPages[round/4%2]
		default:
			for j := range c {
				c[j] = rng.Uint64() & rng.Uint64() // sparse masks
			}
		}
		file := make([]uint64, pageWords64)
		for j := range file {
			if rng.IntN(3) == 0 {
				file[j] = rng.Uint64()
			}
		}
		n := pageWords64
		if round%5 == 4 {
			n = 1 + rng.IntN(pageWords64-1)
		}
		last := ^uint64(0)
		if round%3 == 2 {
			last = 1<<(1+rng.IntN(63)) - 1
		}
		want := make([]uint64, n)
		var wantChanged uint64
		for j := range want {
			m, v := pageWord64(&c, uint64(j)<<1)
			want[j] = file[j]&^m | v&m
			wantChanged += b2u(m != 0)
		}
		want[n-1] &= last
		wantLines, wantOnes := lineSummary(want)
		// As applyPages does: the merge, the last word masked, the summary.
		out := make([]uint64, n)
		changed := mergePage(&c, file[:n], out)
		out[n-1] &= last
		lines, ones := lineSummary(out)
		if changed != wantChanged || lines != wantLines || ones != wantOnes {
			t.Fatalf("round %d (%d words, last %#x): changed, lines, ones = %d, %#x, %d; want %d, %#x, %d",
				round, n, last, changed, lines, ones, wantChanged, wantLines, wantOnes)
		}
		for j := range want {
			if out[j] != want[j] {
				t.Fatalf("round %d (%d words, last %#x): word %d = %#x, want %#x", round, n, last, j, out[j], want[j])
			}
		}
	}
}
