package buffer

import (
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/kvbuf/kvbuf/internal/invariants"
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
// the file (whose Close replaces the mapping with zeros) before the
// lookup loads the file's word. The word it then loads is a retired
// mapping's zero; the lookup must see the view change and report closed
// (B12), never return that zero as the bit. Runs in the invariants build
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
	if got := r.b.Lookup(i, (*Bits).LookupSlow); got != 1 {
		t.Fatalf("bit %d before Close: Lookup = %d, want 1", i, got)
	}
	fired := false
	testHook = func(point string) {
		if point != "bits-lookup-direct" || fired {
			return
		}
		fired = true
		r.b.MarkClosed()
		if err := r.f.Close(); err != nil {
			t.Error(err)
		}
	}
	defer func() { testHook = nil }()
	if got := r.b.Lookup(i, (*Bits).LookupSlow); got != LookupClosed {
		t.Fatalf("bit %d, closed between the view's load and the word's: Lookup = %d, want LookupClosed (%d)", i, got, LookupClosed)
	}
	if !fired {
		t.Fatal("the lookup never reached the hook on its direct path")
	}
}
