package buffer

import (
	"sync/atomic"
	"testing"
	"unsafe"
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
