package kvbuf

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestWatchDurableAfterSync: a durable watch delivers nothing of a
// generation while its data is written but not synced (the generation's
// wait not returned), here a write of op 0, which no watermark covers,
// so only the release orders it (rule D1 in watch.go: the feed learns of
// a release first thing in Release, and never before the wait returned);
// once the sync is let through, the flush returns and the watch delivers
// the change. Mutation 590 (the feed told at the end of the generation's
// Write, before its wait) fails it.
func TestWatchDurableAfterSync(t *testing.T) {
	sfs, fsys := newStallFSOn(errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo)
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, GroupWait: -1, WatchFromOpen: true, storeFS: fsys})
	defer closeT(t, db)
	// Let a held sync through whatever happens: a t.Fatal while it is
	// held would leave closeT waiting on the flusher forever.
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(sfs.released) }) }
	defer release()
	ctx := context.Background()
	k := mustKV(t, db, "a")
	w, err := db.Watch(ctx, &WatchOptions{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	mustPut(t, k, "z", "0", 0)
	bt := db.NewBatch()
	bt.Put(k, []byte("b"), []byte("0"))
	if err := db.Apply(ctx, bt, 0); err != nil {
		t.Fatal(err)
	}
	done := sfs.stall(t, db)
	// The generation is committed, its sync held. The resolver runs every
	// watchTick; run it here too, so that a release told early shows at
	// once however late the machine schedules the resolver.
	db.feed.process()
	c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	e, err := w.Next(c)
	cancel()
	if err == nil {
		t.Fatalf("durable watch delivered %+v before its generation's sync returned", e)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"z", "b"} {
		e, err := w.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e.Kind != EventPut || e.Op != 0 || string(e.Key) != want || string(e.Value) != "0" {
			t.Fatalf("after the flush: %+v, want the put of %q at op 0", e, want)
		}
	}
}
