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

// TestWatchDurableWokenByRelease checks rule D3 in watch.go: the
// generation's release itself moves the durable position and wakes the
// watches waiting for it, before the flush returns, without the resolver.
// The WAL's sync is held while the generation's step is resolved; the
// channel a waiting Next would wait on is taken then; once the sync is let
// through and the flush has returned, that channel is closed and the
// durable watch reads the changes without waiting. Mutation 627 (the hook
// moves the durable position without waking anyone) fails it: the
// resolver, not kicked, never wakes a watch waiting since before the release.
func TestWatchDurableWokenByRelease(t *testing.T) {
	sfs, fsys := newStallFSOn(errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo)
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, GroupWait: -1, WatchFromOpen: true, storeFS: fsys})
	defer closeT(t, db)
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(sfs.released) }) }
	defer release()
	ctx := context.Background()
	k := mustKV(t, db, "a")
	w, err := db.Watch(ctx, &WatchOptions{From: 1, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	mustPut(t, k, "a", "1", 1)
	mustPut(t, k, "b", "2", 2)
	done := sfs.stall(t, db)
	db.feed.process() // the generation's step is resolved, not durable
	// What Next does: nothing is durable yet, so it gets the channel to
	// wait on.
	wait, err := db.feed.read(w)
	if err != nil {
		t.Fatal(err)
	}
	if wait == nil {
		t.Fatal("durable watch had something to read before its generation's sync returned")
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case <-wait:
	default:
		t.Fatal("the flush returned and a durable watch waiting since before its release was not woken")
	}
	// Op 2 is still open (no later op began): the watermark, hence the
	// durable delivery, covers op 1.
	want := []WatchEvent{{Kind: EventPut, Op: 1, Keyspace: "a", Key: []byte("a"), Value: []byte("1")}, {Kind: EventResolved, Op: 1, Watermark: 1}}
	for _, want := range want {
		e, err := w.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e.Kind != want.Kind || e.Op != want.Op || string(e.Key) != string(want.Key) || e.Watermark != want.Watermark {
			t.Fatalf("after the flush: %+v, want %+v", e, want)
		}
	}
}
