package buffer

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/invariants"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// TestBitsViewWord checks what Lookup relies on to load the view with
// atomic.LoadPointer: an atomic.Pointer is one pointer word, at its
// address, holding what Store stored.
func TestBitsViewWord(t *testing.T) {
	var p atomic.Pointer[bitsView]
	if unsafe.Sizeof(p) != unsafe.Sizeof(unsafe.Pointer(nil)) {
		t.Fatalf("atomic.Pointer is %d bytes, not one word", unsafe.Sizeof(p))
	}
	for _, v := range []*bitsView{{limit: 1}, {limit: 2}, nil} {
		p.Store(v)
		if got := (*bitsView)(atomic.LoadPointer((*unsafe.Pointer)(unsafe.Pointer(&p)))); got != v {
			t.Fatalf("the word at the atomic.Pointer holds %p, Store stored %p", got, v)
		}
	}
}

// TestBitsLookupClosedBetweenLoads: a lookup with nothing pending has
// loaded a direct view when the owner closes the overlay (MarkClosed) and
// the file before the lookup loads the file's word. The mapping the view
// holds is still the file's (bitslice's Close leaves it in place), so the
// lookup returns the file's bit, a read before MarkClosed (B12), never a
// zero the file does not hold (mutation 610: Close zeroes the mappings).
// A lookup that starts after reports closed. Runs in the invariants build
// (`go test -tags invariants`), the only one with the hook on this path.
func TestBitsLookupClosedBetweenLoads(t *testing.T) {
	if !invariants.Enabled {
		t.Skip("the hook on Lookup's direct path is in the invariants build only")
	}
	r := newBitsRig(t, nil)
	const i = 100
	if err := r.b.Set(i, true); err != nil {
		t.Fatal(err)
	}
	r.flush()
	if !r.b.direct() {
		t.Fatal("nothing pending after the flush, but the view is not direct")
	}
	if got, err := r.b.Lookup(i, (*Bits).LookupSlowErr); !got || err != nil {
		t.Fatalf("bit %d before Close: Lookup = %v, %v; want true, nil", i, got, err)
	}
	fired := closeAtHook(t, r, "bits-lookup-direct")
	if got, err := r.b.Lookup(i, (*Bits).LookupSlowErr); !got || err != nil {
		t.Fatalf("bit %d, closed between the view's load and the word's: Lookup = %v, %v; want the file's true, nil", i, got, err)
	}
	if !*fired {
		t.Fatal("the lookup never reached the hook on its direct path")
	}
	if got, err := r.b.Lookup(i, (*Bits).LookupSlowErr); got || err != kverr.ErrClosed {
		t.Fatalf("bit %d after Close: Lookup = %v, %v; want false, ErrClosed", i, got, err)
	}
}

// TestBitsLookupAlimClosedBetweenLoads is TestBitsLookupClosedBetweenLoads
// for LookupSlow's path below alim (B14): with a bit pending elsewhere,
// a lookup of bit 100 (set in the file, its word unmarked) has read the
// active filter when the owner closes the overlay and the file, before
// it loads the file's word. The read re-validates its view after the
// file's word (B8, B14: a changed view's filters may have been reset
// under it), finds it changed and closed, and reports closed (B12).
// Invariants
// build only, as its hook.
func TestBitsLookupAlimClosedBetweenLoads(t *testing.T) {
	if !invariants.Enabled {
		t.Skip("the hook below alim is in the invariants build only")
	}
	const i = 100
	r := flushedThenPending(t, i)
	if v := r.b.view.Load(); v.direct || v.fast || i >= v.alim {
		t.Fatalf("view direct %v, fast %v, alim %d: bit %d not on the path below alim", v.direct, v.fast, v.alim, i)
	}
	fired := closeAtHook(t, r, "bits-lookup-alim")
	if got, err := r.b.Lookup(i, (*Bits).LookupSlowErr); got || err != kverr.ErrClosed {
		t.Fatalf("bit %d, closed between the filter's load and the word's: Lookup = %v, %v; want false, ErrClosed", i, got, err)
	}
	if !*fired {
		t.Fatal("the lookup never reached the hook below alim")
	}
}

// flushedThenPending is a rig over 1<<16 bits with bit i set in the file
// (flushed) and bit 5000 pending in the active table, i's word unmarked.
func flushedThenPending(t *testing.T, i uint64) *bitsRig {
	t.Helper()
	r := newSizedBitsRig(t, 1<<16)
	if err := r.b.Set(i, true); err != nil {
		t.Fatal(err)
	}
	r.flush()
	if err := r.b.Set(5000, true); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestBitsLookupFlimClosedBetweenLoads is TestBitsLookupAlimClosedBetweenLoads
// below flim (B14): with a bit pending in a sealed table and bit 100 set
// in the file, its word unmarked in the active filter and in the sealed
// union, a lookup of bit 100 has read both filters when the owner closes
// the overlay and the file, before it loads the file's word. The read
// re-validates its view after the word (B8, B14), finds it changed and
// closed, and reports closed (B12). Invariants build only, as its hook;
// invariants/618 removes that re-load.
func TestBitsLookupFlimClosedBetweenLoads(t *testing.T) {
	if !invariants.Enabled {
		t.Skip("the hook below flim is in the invariants build only")
	}
	const i = 100
	r := flushedThenPending(t, i)
	r.gen++
	if r.b.Freeze(r.gen) == nil {
		t.Fatal("nothing frozen")
	}
	if v := r.b.view.Load(); v.fast || len(v.sealed) == 0 || i >= v.flim || v.maybe(i>>filterShift) {
		t.Fatalf("view fast %v, %d sealed, flim %d, bit %d maybe pending %v: not on the path below flim", v.fast, len(v.sealed), v.flim, i, v.maybe(i>>filterShift))
	}
	if got, err := r.b.Lookup(i, (*Bits).LookupSlowErr); !got || err != nil {
		t.Fatalf("bit %d before Close: Lookup = %v, %v; want true, nil", i, got, err)
	}
	fired := closeAtHook(t, r, "bits-lookup-flim")
	if got, err := r.b.Lookup(i, (*Bits).LookupSlowErr); got || err != kverr.ErrClosed {
		t.Fatalf("bit %d, closed between the filters' load and the word's: Lookup = %v, %v; want false, ErrClosed", i, got, err)
	}
	if !*fired {
		t.Fatal("the lookup never reached the hook below flim")
	}
}

// TestBitsLookupClosedFilterPath: LookupSlow decides a view that is not
// fast from the filters first and tests the closed mark only past the
// view's alim and flim, which publish sets to 0 in a closed view (B12). After
// MarkClosed, every lookup reports closed: of a bit whose filter word is
// unmarked (the file alone, W7's usual lookup), of a marked one (pending
// in the active table, or in a sealed one), past the file's end, and over
// a view that was direct (nothing pending) when it was closed. Mutation
// 560 leaves alim and flim as they were in a closed view.
func TestBitsLookupClosedFilterPath(t *testing.T) {
	for _, state := range []string{"direct", "active", "sealed"} {
		r := newSizedBitsRig(t, 1<<16)
		if err := r.b.Set(100, true); err != nil {
			t.Fatal(err)
		}
		r.flush() // bit 100 set in the file
		switch state {
		case "active":
			if err := r.b.Set(5000, true); err != nil {
				t.Fatal(err)
			}
		case "sealed":
			if err := r.b.Set(5000, true); err != nil {
				t.Fatal(err)
			}
			r.gen++
			if r.b.Freeze(r.gen) == nil {
				t.Fatal("nothing frozen")
			}
		}
		v := r.b.view.Load()
		if v.fast || v.direct != (state == "direct") || v.alim+v.flim == 0 {
			t.Fatalf("%s: view fast %v, direct %v, alim %d, flim %d before MarkClosed", state, v.fast, v.direct, v.alim, v.flim)
		}
		r.b.MarkClosed()
		if v := r.b.view.Load(); v.alim+v.flim != 0 {
			t.Errorf("%s: a closed view's alim is %d and flim %d, want 0", state, v.alim, v.flim)
		}
		for _, i := range []uint64{100, 101, 5000, 1 << 30} {
			if x, err := r.b.Lookup(i, (*Bits).LookupSlowErr); x || err != kverr.ErrClosed {
				t.Errorf("%s: Lookup(%d) after MarkClosed = %v, %v; want false, ErrClosed", state, i, x, err)
			}
		}
	}
}

// closeAtHook sets the test hook to close r's overlay and then its file
// (the owner's order, B12) the first time the hook fires at point, until
// the test ends; *fired says whether it did.
func closeAtHook(t *testing.T, r *bitsRig, point string) (fired *bool) {
	fired = new(bool)
	testHook = func(p string) {
		if p != point || *fired {
			return
		}
		*fired = true
		r.b.MarkClosed()
		if err := r.f.Close(); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { testHook = nil })
	return fired
}

// TestBitsLookupPastFileEnd: the file's length n = 1<<20 + 100 bits is a
// multiple of neither 64 nor the filters' cover, its last word's bits past
// n are set on disk and the file holds stale 0xff bytes past its data (the
// format ignores both: a corrupt tail, and a Grow that crashed after
// extending the file; bitslice's TestStaleTailIsIgnoredAndClearedByGrow).
// Over a direct view (Lookup's limit is n, and past it LookupSlow's alim is
// n too), a view with bits pending in the active table alone (alim), one
// with them sealed (flim) and a fast one (B13), a lookup of every bit from
// the last word's first up to past the filters' cover returns the file's
// bit below n, a bit pending past n (one in the last word, whose filter bit
// it marks, one past it) as pending, and 0 elsewhere: past n a lookup reads
// no file word (B14). GetMany, Count, Ones, NextOnes and a snapshot agree.
// Mutations 616 and 619 bound alim and flim by the filters' cover alone:
// the lookups past n read the tail's bits and the stale bytes as the
// file's; so does a lookup past n without its length check (the direct
// limit, LookupSlow's, GetMany's) and, in the reads that fold, fileWord
// without its mask (mutation 614). The mapping is a power of two (256 KiB
// here) and the file backs all of it, so such reads read bytes, never a
// fault, but for the two lookups past the mapping, made last.
func TestBitsLookupPastFileEnd(t *testing.T) {
	const (
		n      = 1<<20 + 100
		mapped = 1 << 21 // bits in bitslice's mapping of n bits: 256 KiB, the power of two above the data
	)
	for _, state := range []string{"direct", "active", "sealed", "fast"} {
		r := staleTailRig(t, n, mapped, []uint64{100, n - 1})
		cover := uint64(len(r.b.view.Load().afilt)) * filterWordBits
		if cover <= n || cover > mapped {
			t.Fatalf("the filter covers %d bits: want it past the length %d and within the %d bits the test wrote", cover, n, mapped)
		}
		from := uint64(n / 64 * 64) // the last word's first bit
		want := []uint64{n - 1}     // the bits set from from on
		switch state {
		case "active", "sealed":
			want = append(want, n+10, n+1000)
		case "fast":
			want = append(want, n+10, n+1000, cover+10) // the last: past the cover, the table dense (B4a)
		}
		for _, i := range append([]uint64{5000}, want[1:]...) {
			if state == "direct" {
				break
			}
			if err := r.b.Set(i, true); err != nil {
				t.Fatal(err)
			}
		}
		v := r.b.view.Load()
		switch state {
		case "direct":
			if !v.direct {
				t.Fatal("nothing pending, but the view is not direct")
			}
		case "active":
			if v.direct || v.fast || len(v.sealed) != 0 || v.alim == 0 {
				t.Fatalf("active: view direct %v, fast %v, %d sealed, alim %d: not on the path below alim", v.direct, v.fast, len(v.sealed), v.alim)
			}
		case "sealed":
			r.gen++
			if r.b.Freeze(r.gen) == nil {
				t.Fatal("nothing frozen")
			}
			if v := r.b.view.Load(); v.fast || len(v.sealed) == 0 || v.flim == 0 {
				t.Fatalf("sealed: view fast %v, %d sealed, flim %d: not on the path below flim", v.fast, len(v.sealed), v.flim)
			}
		case "fast":
			if !v.fast {
				t.Fatal("fast: the active table written past its cover, but the view is not fast")
			}
		}
		// Every bit up to past the cover, within the mapping, then two
		// past it, which a lookup that reads a file word past n would
		// fault on: after the others have failed, if they do.
		idx := make([]uint64, 0, cover+64-from)
		for i := from; i < cover+64; i++ {
			idx = append(idx, i)
		}
		isSet := func(i uint64) bool { return slices.Contains(want, i) }
		for _, idx := range [][]uint64{idx, {mapped, 1 << 40}} {
			bad := 0
			for _, i := range idx {
				got, err := r.b.Lookup(i, (*Bits).LookupSlowErr)
				if err != nil || got != isSet(i) {
					if bad++; bad <= 5 {
						t.Errorf("%s: Lookup(%d) = %v, %v; want %v, nil (past the length %d only pending bits are set: the file's last word's bits past it and its bytes past its data are none, B14)", state, i, got, err, isSet(i), n)
					}
				}
			}
			out := make([]bool, len(idx))
			r.b.GetMany(idx, out)
			for j, i := range idx {
				if out[j] != isSet(i) {
					t.Errorf("%s: GetMany read bit %d as %v, want %v", state, i, out[j], isSet(i))
					break
				}
			}
			if bad > 5 {
				t.Errorf("%s: %d of the %d lookups from bit %d wrong", state, bad, len(idx), idx[0])
			}
			if t.Failed() {
				t.FailNow()
			}
		}
		ones := uint64(len(want)) + 1 // and bit 100
		if state != "direct" {
			ones++ // bit 5000
		}
		if c := r.b.Count(); c != ones {
			t.Errorf("%s: Count = %d, want %d", state, c, ones)
		}
		if got := slices.Collect(r.b.Ones(from)); !slices.Equal(got, want) {
			t.Errorf("%s: Ones(%d) = %v, want %v", state, from, got, want)
		}
		if got := nextOnesRun(t, state+": ", liveNextOnes(r.b), r.b.Len, from, 2, -1); !slices.Equal(got, want) {
			t.Errorf("%s: NextOnes from %d read %v, want %v", state, from, got, want)
		}
		s := r.b.Snapshot()
		for _, i := range idx {
			if s.Get(i) != isSet(i) {
				t.Errorf("%s: a snapshot's Get(%d) = %v, want %v", state, i, !isSet(i), isSet(i))
				break
			}
		}
		s.Close()
	}
}

// staleTailRig returns a rig over a new file of n bits, those of set set,
// whose last word's bits past n and bytes past its data, to bit mapped,
// are ones on disk (TestBitsLookupPastFileEnd).
func staleTailRig(t *testing.T, n, mapped uint64, set []uint64) *bitsRig {
	t.Helper()
	path := filepath.Join(t.TempDir(), "b.bits")
	f, err := bitslice.Create(path, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range set {
		if err := f.Set(i, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	fd, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := int64(n / 64)
	var buf [8]byte
	if _, err := fd.ReadAt(buf[:], bitslice.DataOffset+last*8); err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint64(buf[:], binary.LittleEndian.Uint64(buf[:])|^uint64(0)<<(n%64))
	stale := append(buf[:], bytes.Repeat([]byte{0xff}, int(mapped/8)-int(last+1)*8)...)
	if _, err := fd.WriteAt(stale, bitslice.DataOffset+last*8); err != nil {
		t.Fatal(err)
	}
	if err := fd.Close(); err != nil {
		t.Fatal(err)
	}
	if f, err = bitslice.Open(path); err != nil {
		t.Fatal(err)
	}
	return newBitsRigOn(t, f)
}
