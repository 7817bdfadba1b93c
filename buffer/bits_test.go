package buffer

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/kvbuf/kvbuf/bitslice"
)

var errBitsFault = errors.New("injected fault")

// bitsFaultFile wraps a real *bitslice.File and fails chosen flush operations on
// demand. Each counter is the number of upcoming calls that fail.
type bitsFaultFile struct {
	*bitslice.File
	failGrow, failApply, failApplyAfter, failSync atomic.Int32
	applyCalls                                    atomic.Int32
}

// take consumes one pending failure from n.
func takeBitsFault(n *atomic.Int32) bool {
	for {
		v := n.Load()
		if v <= 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

func (f *bitsFaultFile) Grow(nbits uint64) error {
	if takeBitsFault(&f.failGrow) {
		return errBitsFault
	}
	return f.File.Grow(nbits)
}

func (f *bitsFaultFile) ApplyWords(c []bitslice.WordChange) error {
	f.applyCalls.Add(1)
	if takeBitsFault(&f.failApply) {
		return errBitsFault
	}
	if takeBitsFault(&f.failApplyAfter) { // torn: the data lands, the call still fails
		if err := f.File.ApplyWords(c); err != nil {
			return err
		}
		return errBitsFault
	}
	return f.File.ApplyWords(c)
}

func (f *bitsFaultFile) Sync() error {
	if takeBitsFault(&f.failSync) {
		return errBitsFault
	}
	return f.File.Sync()
}

func newBitsTestFile(t testing.TB, nbits uint64) *bitslice.File {
	t.Helper()
	f, err := bitslice.Create(filepath.Join(t.TempDir(), "bits"), nbits)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func newBitsWithFaults(t testing.TB, nbits uint64, opts *Options) (*Bits, *bitsFaultFile) {
	t.Helper()
	ff := &bitsFaultFile{File: newBitsTestFile(t, nbits)}
	return newBits(ff.File, ff, opts), ff
}

// flushBitsOnce runs one full flush cycle and returns Apply's error.
func flushBitsOnce(b *Bits) error {
	wm := b.Freeze()
	if err := b.Apply(context.Background(), wm); err != nil {
		return err
	}
	b.Release()
	return nil
}

func mustSetBit(t testing.TB, b *Bits, i uint64, v bool, op uint64) {
	t.Helper()
	if err := b.Set(i, v, op); err != nil {
		t.Fatalf("Set(%d, %v, %d): %v", i, v, op, err)
	}
}

// checkBitsFile fails unless the file holds exactly want (indexes not in want
// must be false) over [0, n).
func checkBitsFile(t testing.TB, f *bitslice.File, n uint64, want map[uint64]bool) {
	t.Helper()
	for i := uint64(0); i < n; i++ {
		if got := f.Get(i); got != want[i] {
			t.Fatalf("file bit %d = %v, want %v", i, got, want[i])
		}
	}
}

func TestBitsReadYourWritesThroughFlush(t *testing.T) {
	b, ff := newBitsWithFaults(t, 1000, nil)
	f := ff.File
	if err := f.Set(7, true); err != nil {
		t.Fatal(err)
	}
	if !b.Get(7) || b.Get(8) {
		t.Fatal("empty overlay must read through to the file")
	}
	mustSetBit(t, b, 7, false, 1)
	mustSetBit(t, b, 8, true, 2)
	mustSetBit(t, b, 8, false, 3)
	mustSetBit(t, b, 8, true, 4)
	check := func(stage string) {
		t.Helper()
		if b.Get(7) || !b.Get(8) || b.Get(9) {
			t.Fatalf("%s: got 7=%v 8=%v 9=%v, want false true false", stage, b.Get(7), b.Get(8), b.Get(9))
		}
	}
	check("pending")
	if f.Get(8) || !f.Get(7) {
		t.Fatal("Set must not touch the file before a flush")
	}
	if wm := b.Freeze(); wm != 4 {
		t.Fatalf("Freeze = %d, want 4", wm)
	}
	check("frozen")
	mustSetBit(t, b, 9, true, 5) // next generation
	if !b.Get(9) {
		t.Fatal("write after Freeze not visible")
	}
	if err := b.Apply(context.Background(), 4); err != nil {
		t.Fatal(err)
	}
	if f.Get(9) {
		t.Fatal("a write after Freeze was applied with the frozen set")
	}
	if f.Watermark() != 4 {
		t.Fatalf("watermark = %d, want 4", f.Watermark())
	}
	b.Release()
	if !b.Get(9) || b.Get(7) || !b.Get(8) {
		t.Fatal("wrong reads after Release")
	}
	if err := flushBitsOnce(b); err != nil {
		t.Fatal(err)
	}
	checkBitsFile(t, f, f.Len(), map[uint64]bool{8: true, 9: true})
	if f.Watermark() != 5 {
		t.Fatalf("watermark = %d, want 5", f.Watermark())
	}
	if n := b.PendingBytes(); n != 0 {
		t.Fatalf("PendingBytes after flush = %d, want 0", n)
	}
}

func TestBitsOutOfRange(t *testing.T) {
	b, _ := newBitsWithFaults(t, 64, &Options{MaxBits: 1000})
	for _, i := range []uint64{1000, 1001, 1 << 40, ^uint64(0)} {
		err := b.Set(i, true, 1)
		if !errors.Is(err, bitslice.ErrOutOfRange) {
			t.Errorf("Set(%d) error = %v, want ErrOutOfRange", i, err)
		}
		if b.Get(i) {
			t.Errorf("Get(%d) = true after a rejected Set", i)
		}
	}
	mustSetBit(t, b, 999, true, 1)
	if b.Len() != 1000 {
		t.Fatalf("Len = %d, want 1000", b.Len())
	}
	if b.Freeze() != 1 {
		t.Fatal("rejected Sets must not count as pending ops")
	}

	d, _ := newBitsWithFaults(t, 64, nil)
	if err := d.Set(DefaultMaxBits, true, 0); !errors.Is(err, bitslice.ErrOutOfRange) {
		t.Fatalf("default max: Set(DefaultMaxBits) error = %v", err)
	}
	if d.Get(^uint64(0)) {
		t.Fatal("Get of a huge index must be false")
	}
}

func TestBitsGrowAtFlush(t *testing.T) {
	b, ff := newBitsWithFaults(t, 100, nil)
	mustSetBit(t, b, 5, true, 1)
	mustSetBit(t, b, 70_000, true, 2) // beyond the file, in a later chunk
	mustSetBit(t, b, 1_000_000, false, 3)
	if got := b.Len(); got != 1_000_001 {
		t.Fatalf("Len = %d, want 1000001", got)
	}
	if !b.Get(70_000) || b.Get(1_000_000) {
		t.Fatal("pending bits beyond the file not visible")
	}
	ff.failGrow.Store(1)
	if err := flushBitsOnce(b); !errors.Is(err, errBitsFault) {
		t.Fatalf("flush with failing Grow = %v, want injected", err)
	}
	if !b.Get(70_000) || !b.Get(5) {
		t.Fatal("failed grow lost pending bits")
	}
	if err := flushBitsOnce(b); err != nil {
		t.Fatal(err)
	}
	f := ff.File
	if f.Len() < 1_000_001 {
		t.Fatalf("file Len = %d after flush, want >= 1000001", f.Len())
	}
	checkBitsFile(t, f, f.Len(), map[uint64]bool{5: true, 70_000: true})
	if b.Len() != f.Len() {
		t.Fatalf("Len = %d, file %d", b.Len(), f.Len())
	}
}

func TestBitsOpTracking(t *testing.T) {
	b, ff := newBitsWithFaults(t, 1000, nil)
	mustSetBit(t, b, 1, true, 5)
	mustSetBit(t, b, 2, true, 9)
	mustSetBit(t, b, 3, true, 3)
	mustSetBit(t, b, 4, true, 0)
	if wm := b.Freeze(); wm != 9 {
		t.Fatalf("Freeze = %d, want 9", wm)
	}
	if wm := b.Freeze(); wm != 9 {
		t.Fatalf("second Freeze with nothing new = %d, want 9", wm)
	}
	if err := b.Apply(context.Background(), 9); err != nil {
		t.Fatal(err)
	}
	b.Release()
	if ff.Watermark() != 9 {
		t.Fatalf("watermark = %d, want 9", ff.Watermark())
	}
	mustSetBit(t, b, 1, false, 2) // op numbers are per generation
	if wm := b.Freeze(); wm != 2 {
		t.Fatalf("Freeze = %d, want 2", wm)
	}
}

func TestBitsEmptyFlush(t *testing.T) {
	b, ff := newBitsWithFaults(t, 1000, nil)
	if wm := b.Freeze(); wm != 0 {
		t.Fatalf("empty Freeze = %d", wm)
	}
	ff.failSync.Store(1) // must not be reached
	if err := b.Apply(context.Background(), 0); err != nil {
		t.Fatalf("empty Apply: %v", err)
	}
	b.Release()
	if ff.applyCalls.Load() != 0 {
		t.Fatal("empty flush applied words")
	}
	ff.failSync.Store(0)
	// A watermark ahead of the file is still persisted (other targets' ops).
	if err := b.Apply(context.Background(), 42); err != nil {
		t.Fatal(err)
	}
	if ff.Watermark() != 42 {
		t.Fatalf("watermark = %d, want 42", ff.Watermark())
	}
	ff.failSync.Store(1)
	if err := b.Apply(context.Background(), 43); !errors.Is(err, errBitsFault) {
		t.Fatalf("empty Apply with failing Sync = %v", err)
	}
	if b.PendingBytes() != 0 {
		t.Fatalf("PendingBytes = %d", b.PendingBytes())
	}
}

func TestBitsReleaseWithoutApply(t *testing.T) {
	b, ff := newBitsWithFaults(t, 1000, nil)
	mustSetBit(t, b, 10, true, 1)
	b.Freeze()
	b.Release() // no Apply: must keep the frozen set
	if !b.Get(10) {
		t.Fatal("Release without Apply dropped a pending change")
	}
	ff.failApply.Store(1)
	if err := b.Apply(context.Background(), 1); !errors.Is(err, errBitsFault) {
		t.Fatalf("Apply = %v, want injected", err)
	}
	b.Release() // after a failed Apply: must keep it too
	if !b.Get(10) {
		t.Fatal("Release after a failed Apply dropped a pending change")
	}
	if err := flushBitsOnce(b); err != nil {
		t.Fatal(err)
	}
	checkBitsFile(t, ff.File, 1000, map[uint64]bool{10: true})
}

func TestBitsFreezeTwiceMerges(t *testing.T) {
	b, ff := newBitsWithFaults(t, 200_000, nil)
	mustSetBit(t, b, 1, true, 1)
	mustSetBit(t, b, 2, true, 2)
	mustSetBit(t, b, 100_000, true, 3)
	if wm := b.Freeze(); wm != 3 {
		t.Fatalf("Freeze = %d", wm)
	}
	mustSetBit(t, b, 1, false, 4) // newer write over a frozen one
	mustSetBit(t, b, 3, true, 5)
	mustSetBit(t, b, 150_000, true, 6) // a chunk the frozen set lacks
	if wm := b.Freeze(); wm != 6 {
		t.Fatalf("merging Freeze = %d, want 6", wm)
	}
	if b.Get(1) || !b.Get(2) || !b.Get(3) || !b.Get(100_000) || !b.Get(150_000) {
		t.Fatal("merge put an older value over a newer one or lost one")
	}
	if err := b.Apply(context.Background(), 6); err != nil {
		t.Fatal(err)
	}
	b.Release()
	checkBitsFile(t, ff.File, 200_000, map[uint64]bool{2: true, 3: true, 100_000: true, 150_000: true})
}

func TestBitsApplyFailureThenRetry(t *testing.T) {
	for _, tc := range []struct {
		name string
		arm  func(*bitsFaultFile)
	}{
		{"apply", func(f *bitsFaultFile) { f.failApply.Store(1) }},
		{"torn-apply", func(f *bitsFaultFile) { f.failApplyAfter.Store(1) }},
		{"sync", func(f *bitsFaultFile) { f.failSync.Store(1) }},
		{"grow", func(f *bitsFaultFile) { f.failGrow.Store(1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 4096
			b, ff := newBitsWithFaults(t, n, nil)
			model := map[uint64]bool{}
			set := func(i uint64, v bool, op uint64) {
				mustSetBit(t, b, i, v, op)
				model[i] = v
			}
			for i := uint64(0); i < n; i += 3 {
				set(i, true, i)
			}
			set(n+10, true, n) // needs Grow
			wm := b.Freeze()
			tc.arm(ff)
			if err := b.Apply(context.Background(), wm); !errors.Is(err, errBitsFault) {
				t.Fatalf("Apply = %v, want injected", err)
			}
			if ff.Watermark() != 0 {
				t.Fatalf("failed Apply persisted watermark %d", ff.Watermark())
			}
			b.Release()
			for i := uint64(0); i < n; i += 6 {
				set(i, false, n+i) // overwrite half of the frozen changes
			}
			set(1, true, 2*n)
			for i := range uint64(n + 11) {
				if b.Get(i) != model[i] {
					t.Fatalf("bit %d = %v after failure, want %v", i, b.Get(i), model[i])
				}
			}
			if wm := b.Freeze(); wm != 2*n {
				t.Fatalf("merged Freeze = %d, want %d", wm, 2*n)
			}
			if err := b.Apply(context.Background(), 2*n); err != nil {
				t.Fatal(err)
			}
			b.Release()
			checkBitsFile(t, ff.File, ff.Len(), model)
			if ff.Watermark() != 2*n {
				t.Fatalf("watermark = %d", ff.Watermark())
			}
		})
	}
}

func TestBitsApplyCanceled(t *testing.T) {
	b, ff := newBitsWithFaults(t, 1000, nil)
	mustSetBit(t, b, 3, true, 1)
	wm := b.Freeze()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Apply(ctx, wm); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply = %v, want context.Canceled", err)
	}
	b.Release()
	if !b.Get(3) || ff.Get(3) || ff.Watermark() != 0 {
		t.Fatal("cancelled Apply lost the change or wrote the file")
	}
	if err := flushBitsOnce(b); err != nil {
		t.Fatal(err)
	}
	if !ff.Get(3) || ff.Watermark() != 1 {
		t.Fatal("retry after cancel did not persist")
	}
}

func TestBitsPendingBytesAndPooling(t *testing.T) {
	for _, pool := range []int64{0, -1} {
		b, _ := newBitsWithFaults(t, 1<<20, &Options{PoolBytes: pool})
		if b.PendingBytes() != 0 {
			t.Fatalf("new overlay PendingBytes = %d", b.PendingBytes())
		}
		mustSetBit(t, b, 1, true, 0)
		mustSetBit(t, b, 1<<19, true, 0)
		one := b.PendingBytes()
		if one < 2*chunkBytes {
			t.Fatalf("PendingBytes = %d, want >= %d", one, 2*chunkBytes)
		}
		b.Freeze()
		mustSetBit(t, b, 2, true, 0)
		if got := b.PendingBytes(); got <= one {
			t.Fatalf("PendingBytes with active+frozen = %d, want > %d", got, one)
		}
		if err := flushBitsOnce(b); err != nil {
			t.Fatal(err)
		}
		if err := flushBitsOnce(b); err != nil {
			t.Fatal(err)
		}
		if got := b.PendingBytes(); got != 0 {
			t.Fatalf("PendingBytes after flushes = %d", got)
		}
		if (b.spare != nil) != ((&Options{PoolBytes: pool}).poolBytes() > 0) {
			t.Fatalf("PoolBytes %d: spare kept = %v", pool, b.spare != nil)
		}
		if !b.Get(1) || !b.Get(2) || !b.Get(1<<19) || b.Get(3) {
			t.Fatal("wrong reads after recycling")
		}
	}
}

func TestBitsSteadyFlushDoesNotAllocate(t *testing.T) {
	skipWithoutPool(t)
	b, _ := newBitsWithFaults(t, 1<<16, nil)
	cycle := func() {
		for i := uint64(0); i < 1<<16; i += 97 {
			b.Set(i, i%2 == 0, i)
		}
		b.Freeze()
		b.Apply(context.Background(), 1)
		b.Release()
	}
	cycle()
	cycle()
	if n := testing.AllocsPerRun(5, cycle); n > 0 {
		t.Fatalf("steady flush cycle allocates %v times", n)
	}
}
