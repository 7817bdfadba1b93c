package kvbuf

import (
	"context"
	"testing"
)

// TestStoreLogBytes checks Metrics.StoreLogBytes: a flush's receipt goes
// to the store's write-ahead log and stays in its memtable (the count
// grows), FlushMemtables writes it to an sstable (the count drops to 0),
// and Close leaves 0.
func TestStoreLogBytes(t *testing.T) {
	ctx := context.Background()
	db := openT(t, t.TempDir(), &Options{MaxBits: 1 << 12})
	b := mustBits(t, db, "b")
	if err := db.FlushMemtables(ctx); err != nil {
		t.Fatal(err)
	}
	if got := db.Metrics().StoreLogBytes; got != 0 {
		t.Fatalf("StoreLogBytes after FlushMemtables = %d, want 0", got)
	}
	var last int64
	for op := uint64(1); op <= 3; op++ {
		if err := b.Set(ctx, op, true, op); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got := db.Metrics().StoreLogBytes
		if got <= last {
			t.Fatalf("StoreLogBytes after flush of op %d = %d, want more than %d (the receipt)", op, got, last)
		}
		last = got
	}
	if err := db.FlushMemtables(ctx); err != nil {
		t.Fatal(err)
	}
	if got := db.Metrics().StoreLogBytes; got != 0 {
		t.Fatalf("StoreLogBytes after FlushMemtables = %d, want 0", got)
	}
	closeT(t, db)
	if got := db.Metrics().StoreLogBytes; got != 0 {
		t.Fatalf("StoreLogBytes after Close = %d, want 0", got)
	}
}
