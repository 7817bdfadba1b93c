package kvbuf

import (
	"context"
	"errors"
	"testing"
)


func TestSmoke(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, &Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ks, err := db.KV("points")
	if err != nil {
		t.Fatal(err)
	}
	bits, err := db.Bits("deleted")
	if err != nil {
		t.Fatal(err)
	}
	// The repro: op 1 written in two calls with a flush between.
	if err := ks.Put(ctx, []byte("p7"), []byte("payload"), 1); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if wm := db.Watermark(); wm != 0 {
		t.Fatalf("watermark %d covers half of op 1", wm)
	}
	if err := bits.Set(ctx, 7, true, 1); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx, 2, func(b *Batch) error {
		b.Put(ks, []byte("p8"), []byte("x"))
		b.Set(bits, 8, true)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if wm := db.Watermark(); wm != 2 {
		t.Fatalf("watermark %d, want 2", wm)
	}
	if err := ks.Put(ctx, []byte("p9"), nil, 2); !errors.Is(err, ErrStaleOp) {
		t.Fatalf("stale op: %v", err)
	}
	snap, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.DeleteRange(ctx, nil, nil, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Get([]byte("p7")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after DeleteRange: %v", err)
	}
	sk, _ := snap.KV("points")
	if v, err := sk.Get([]byte("p7")); err != nil || string(v) != "payload" {
		t.Fatalf("snapshot Get = %q, %v", v, err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := sk.Get([]byte("p8")); err != nil || string(v) != "x" {
		t.Fatalf("snapshot Get after flush = %q, %v", v, err)
	}
	n, _ := bits.Count()
	if n != 2 {
		t.Fatalf("Count = %d", n)
	}
	t.Logf("metrics: %+v", db.Metrics())
	snap.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ks, _ = db.KV("points")
	if _, err := ks.Get([]byte("p8")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after reopen: %v", err)
	}
	if wm := db.Watermark(); wm != 2 {
		t.Fatalf("reopened watermark %d", wm)
	}
	bits, _ = db.Bits("deleted")
	if v, _ := bits.Get(8); !v {
		t.Fatal("bit 8 lost")
	}
}
