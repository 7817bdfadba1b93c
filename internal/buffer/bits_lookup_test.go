package buffer

import (
	"sync/atomic"
	"testing"
	"unsafe"

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
	r := newSizedBitsRig(t, 1<<16)
	const i = 100
	if err := r.b.Set(i, true); err != nil {
		t.Fatal(err)
	}
	r.flush()
	if err := r.b.Set(5000, true); err != nil {
		t.Fatal(err)
	}
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
