package kvbuf

import (
	"context"
	"errors"
	"testing"
)

// TestBatchDeleteRangeEmptyBoundsFirst: an empty (non-nil) bound is not an
// open one, also when it is the first bytes a fresh Batch holds (its data
// still nil after appending nothing): DeleteRange(nil, "") deletes
// nothing, as KV.DeleteRange does, and the feed says End "" (not open).
func TestBatchDeleteRangeEmptyBoundsFirst(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, WatchFromOpen: true})
	defer closeT(t, db)
	ctx := context.Background()
	k := mustKV(t, db, "k")
	if err := k.Put(ctx, []byte("a"), []byte("1"), 1); err != nil {
		t.Fatal(err)
	}
	w, err := db.Watch(ctx, &WatchOptions{From: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i, limit := range []int{maxRecData, 0} {
		func() {
			old := maxRecData
			maxRecData = limit
			defer func() { maxRecData = old }()
			bt := db.NewBatch()
			bt.DeleteRange(k, nil, []byte{})
			bt.DeleteRange(k, []byte{}, []byte{})
			if err := db.Apply(ctx, bt, uint64(2+i)); err != nil {
				t.Fatal(err)
			}
		}()
		if v, err := k.Get([]byte("a")); err != nil || string(v) != "1" {
			t.Fatalf("form %d: a = %q, %v after deleting [nil, \"\") and [\"\", \"\")", i, v, err)
		}
		for j := range 2 {
			e := nextEvent(t, w)
			if e.Kind != EventDeleteRange || e.End == nil || len(e.End) != 0 || (j == 0) != (e.Key == nil) {
				t.Fatalf("form %d: change %d: %+v (Key nil %v, End nil %v)", i, j, e, e.Key == nil, e.End == nil)
			}
		}
		if e := nextEvent(t, w); e.Kind != EventResolved {
			t.Fatalf("form %d: %+v", i, e)
		}
	}
	// The single-change form and a flush keep the empty bound too.
	if err := k.DeleteRange(ctx, nil, []byte{}, 4); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Get([]byte("a")); errors.Is(err, ErrNotFound) {
		t.Fatal("a deleted by [nil, \"\") or by its flush")
	}
}
