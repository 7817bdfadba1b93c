package kvbuf

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestBatchLongRun: a batch whose run of changes to one keyspace spans
// several of Apply's chunks (applyRun) numbers them from one range in
// batch order, so that a later change of a key wins over an earlier one
// in another chunk: a Put overwritten, a Put then a Delete, a Delete then
// a Put; read pending, then after a Flush from the store, then after a
// reopen. A second keyspace between two runs of the first is numbered
// after the first run too.
func TestBatchLongRun(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	defer func() { _ = db.Close() }() // for a failed check (Close is idempotent)
	a, b := mustKV(t, db, "a"), mustKV(t, db, "b")
	n := 3 * applyRun // the later changes start the last chunk
	bt := db.NewBatch()
	for i := range n {
		bt.Put(a, fmt.Appendf(nil, "k%05d", i), fmt.Appendf(nil, "v%d", i))
	}
	// Later changes of keys put in the first chunk, in the last chunk
	// and at lower offsets in it than the first changes in theirs.
	bt.Put(a, []byte("k00001"), []byte("late"))
	bt.Delete(a, []byte("k00002"))
	bt.Put(b, []byte("x"), []byte("b1"))
	bt.Delete(a, []byte("k00003"))
	bt.Put(a, []byte("k00003"), []byte("again"))
	if err := db.Apply(ctx, bt, 0); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"k00000": "v0", "k00001": "late", "k00002": "", "k00003": "again",
		fmt.Sprintf("k%05d", applyRun): fmt.Sprintf("v%d", applyRun), fmt.Sprintf("k%05d", n-1): fmt.Sprintf("v%d", n-1)}
	check := func(when string, db *DB) {
		t.Helper()
		a, b := mustKV(t, db, "a"), mustKV(t, db, "b")
		for k, w := range want {
			v, err := a.Get([]byte(k))
			if w == "" && !errors.Is(err, ErrNotFound) || w != "" && (err != nil || string(v) != w) {
				t.Errorf("%s: Get(%s) = %q, %v; want %q", when, k, v, err, w)
			}
		}
		if v, err := b.Get([]byte("x")); err != nil || string(v) != "b1" {
			t.Errorf("%s: b.Get(x) = %q, %v", when, v, err)
		}
	}
	check("pending", db)
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("flushed", db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openT(t, dir, &Options{FlushInterval: -1})
	check("reopened", db)
	closeT(t, db)
}
