package kvbuf

import (
	"os"
	"path/filepath"
	"testing"
)

// receiptEngine opens an engine at dir with the bitslice "r" of 1M bits
// and one flush behind it that grew the file and created it (both go
// through the store), so that later flushes of bits below 1M are
// receipt-only.
func receiptEngine(t *testing.T, dir string, hooks *testHooks) (*DB, *Bits) {
	t.Helper()
	db := openT(t, dir, &Options{FlushInterval: -1, hooks: hooks})
	b := mustBits(t, db, "r")
	mustSet(t, b, 1<<20-1, true, 1)
	mustFlush(t, db)
	return db, b
}

// storeWatermark is the watermark the store alone records.
func storeWatermark(t *testing.T, db *DB) uint64 {
	t.Helper()
	wm, err := db.store.Watermark()
	if err != nil {
		t.Fatal(err)
	}
	return wm
}

// A flush of bitslices alone records its watermark in the receipt, and
// only once the bitslice is durable: the receipt must never cover bits
// whose sync has not returned (a cut then would lose bits the watermark
// claims). The hook runs just before the receipt is written; the file's
// generation in force (set when its sync returns) must be the flush's.
func TestBitsReceiptAfterSync(t *testing.T) {
	dir := t.TempDir()
	var genAtReceipt []uint64
	var b *Bits
	hooks := &testHooks{}
	hooks.receiptWrite = func() { genAtReceipt = append(genAtReceipt, b.file.Gen()) }
	db, b0 := receiptEngine(t, dir, hooks)
	b = b0
	base := storeWatermark(t, db)
	for op := uint64(2); op <= 4; op++ {
		mustSet(t, b, op*1000, true, op)
		mustFlush(t, db)
		if len(genAtReceipt) != int(op-1) {
			t.Fatalf("op %d: %d receipts written, want %d", op, len(genAtReceipt), op-1)
		}
		if g, want := genAtReceipt[len(genAtReceipt)-1], b.file.Gen(); g != want {
			t.Fatalf("op %d: receipt written with the file at generation %d, its flush's is %d: the receipt came before the bits were durable", op, g, want)
		}
	}
	if got := storeWatermark(t, db); got != base {
		t.Fatalf("store watermark %d after receipt-only flushes, want %d (unchanged)", got, base)
	}
	// Op 4 has not ended (no later op began): the watermark is 3.
	if got := db.Watermark(); got != 3 {
		t.Fatalf("watermark %d, want 3", got)
	}
	// Close's final Sync and flush change nothing in the store: the
	// reopened engine's watermark comes from the receipt.
	closeT(t, db)
	db = openT(t, dir, &Options{FlushInterval: -1})
	if got := db.Watermark(); got != 3 {
		t.Fatalf("watermark %d after reopen, want 3 (the receipt's)", got)
	}
	b = mustBits(t, db, "r")
	for op := uint64(2); op <= 4; op++ {
		if v, err := b.Get(op * 1000); err != nil || !v {
			t.Fatalf("bit %d: %v, %v after reopen", op*1000, v, err)
		}
	}
	// A store commit after receipts: the newer watermark wins again.
	mustPut(t, mustKV(t, db, "k"), "a", "1", 5)
	mustFlush(t, db)
	closeT(t, db)
	db = openT(t, dir, &Options{FlushInterval: -1})
	defer closeT(t, db)
	if got := db.Watermark(); got != 4 {
		t.Fatalf("watermark %d after a store commit and reopen, want 4", got)
	}
}

// A checkpoint taken after a receipt-only flush records the receipt's
// watermark in its store: the copy holds the bits it covers, and a host
// that trims its log up to the engine's watermark must not be asked to
// replay below it.
func TestCheckpointReceiptWatermark(t *testing.T) {
	db, b := receiptEngine(t, t.TempDir(), nil)
	defer closeT(t, db)
	mustSet(t, b, 77, true, 2)
	mustSet(t, b, 78, true, 3) // op 2 ends: the flush's watermark is 2
	mustFlush(t, db)
	if db.Watermark() != 2 || storeWatermark(t, db) >= 2 {
		t.Fatal("the flush of bits alone went through the store")
	}
	cp := filepath.Join(t.TempDir(), "cp")
	wm, err := db.Checkpoint(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if wm != 2 {
		t.Fatalf("checkpoint watermark %d, want 2", wm)
	}
	c := openT(t, cp, &Options{FlushInterval: -1})
	defer closeT(t, c)
	if got := c.Watermark(); got != 2 {
		t.Fatalf("checkpoint opened at watermark %d, want 2", got)
	}
	if v, err := mustBits(t, c, "r").Get(77); err != nil || !v {
		t.Fatalf("bit 77 in the checkpoint: %v, %v", v, err)
	}
}

// A copy of the engine directory taken while the engine is open, right
// after receipt-only flushes (what a kill -9 leaves: every file as the
// kernel holds it, the store's last commit older than the receipt), opens
// at the receipt's watermark with the bits it covers, and a replay from
// there converges.
func TestBitsReceiptCrashCopy(t *testing.T) {
	dir := t.TempDir()
	db, b := receiptEngine(t, dir, nil)
	defer closeT(t, db)
	for op := uint64(2); op <= 6; op++ {
		mustSet(t, b, op*100, op%2 == 0, op)
		if op%2 == 0 {
			mustFlush(t, db)
		}
	}
	mustFlush(t, db)
	wm := db.Watermark()
	if wm != 5 || storeWatermark(t, db) >= wm {
		t.Fatalf("watermark %d, store's %d: want 5 from the receipt", wm, storeWatermark(t, db))
	}
	cp := filepath.Join(t.TempDir(), "copy")
	if err := os.CopyFS(cp, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	c := openT(t, cp, &Options{FlushInterval: -1})
	defer closeT(t, c)
	if got := c.Watermark(); got != wm {
		t.Fatalf("the copy opened at watermark %d, want %d", got, wm)
	}
	cb := mustBits(t, c, "r")
	for op := uint64(2); op <= wm; op++ {
		if v, err := cb.Get(op * 100); err != nil || v != (op%2 == 0) {
			t.Fatalf("bit %d of op %d in the copy: %v, %v", op*100, op, v, err)
		}
	}
	// The host replays its log above the watermark: op 6.
	mustSet(t, cb, 600, true, 6)
	mustFlush(t, c)
	if v, err := cb.Get(600); err != nil || !v {
		t.Fatalf("bit 600 after the replay: %v, %v", v, err)
	}
}
