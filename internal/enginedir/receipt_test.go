package enginedir

import (
	"os"
	"path/filepath"
	"testing"
)

// The newest valid slot is in force; a torn newest slot leaves the
// previous one; another engine's slots are ignored.
func TestReceiptSlots(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := ReadReceipt(dir, 7); ok || err != nil {
		t.Fatalf("no file: ok %v, err %v", ok, err)
	}
	cat := BitsCatalog{"a": {Gen: 9, Len: 64}}
	r := NewReceipt(dir, ReceiptSlot{})
	for wm := uint64(1); wm <= 5; wm++ {
		if err := r.Write(7, wm, wm+10, cat.Encode()); err != nil {
			t.Fatal(err)
		}
		s, ok, err := ReadReceipt(dir, 7)
		if err != nil || !ok || s.Watermark != wm || s.Highest != wm+10 || s.Bits["a"] != cat["a"] {
			t.Fatalf("after write %d: %+v, %v, %v", wm, s, ok, err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := ReadReceipt(dir, 8); ok {
		t.Fatal("another engine's receipt was read")
	}
	// Tear the newest slot (write 5: seq 5, slot 1): write 4 is in force.
	path := filepath.Join(dir, ReceiptName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[ReceiptSlotSize+20] ^= 1
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, ok, err := ReadReceipt(dir, 7)
	if err != nil || !ok || s.Watermark != 4 || s.Seq != 4 {
		t.Fatalf("torn newest slot: %+v, %v, %v; want write 4", s, ok, err)
	}
	// A writer continuing from it overwrites the torn slot, not slot 0.
	r = NewReceipt(dir, s)
	defer r.Close()
	if err := r.Write(7, 6, 16, cat.Encode()); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := ReadReceipt(dir, 7); s.Watermark != 6 || s.Seq != 5 {
		t.Fatalf("after the rewrite: %+v", s)
	}
	if !ReceiptFits(cat.Encode()) || ReceiptFits(make([]byte, ReceiptSlotSize)) {
		t.Fatal("ReceiptFits")
	}
}
