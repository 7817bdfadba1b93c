package kvbuf

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/internal/testutil"
	"github.com/kvbuf/kvbuf/storage"
)

// TestFlushIngestWaitsForL0: a flush by ingestion waits, before it
// ingests, while the store's L0 is at its stop-writes depth and pebble is
// compacting (storage.Store.WaitL0), and Metrics counts the wait.
func TestFlushIngestWaitsForL0(t *testing.T) {
	// Holds, once armed, the creation of the first table pebble writes
	// itself (a flush's or a compaction's output; not a table of an
	// ingest, written in its own directory).
	hfs := testutil.NewHoldFS(vfs.NewMem(), func(name string) bool {
		return strings.HasSuffix(name, ".sst") && !strings.Contains(name, "kvbuf-ingest")
	}, false)
	waiting := make(chan struct{}, 1)
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, GroupWait: -1, IngestThreshold: 1, storeFS: hfs,
		storeTune: &storage.Options{L0CompactionThreshold: 2, L0StopWritesThreshold: 2},
		hooks:     &testHooks{l0Waiting: func() { waiting <- struct{}{} }}})
	defer func() { hfs.Unhold(); closeT(t, db) }()
	kv, err := db.KV("k")
	if err != nil {
		t.Fatal(err)
	}
	flush := func(v string) error {
		for _, k := range []string{"a", "z"} {
			if err := kv.Put(ctx, []byte(k), []byte(v), 0); err != nil {
				return err
			}
		}
		return db.Flush(ctx)
	}
	// Whatever Open left in the store's memtable goes to a table first,
	// so that no ingestion below is queued behind it.
	if err := db.store.Flush(); err != nil {
		t.Fatal(err)
	}
	hfs.Arm()
	// Generations overlapping each other go to L0 (the first perhaps
	// below it), where two sublevels reach both thresholds: pebble
	// compacts them, its output is held, and a later flush must wait.
	done := make(chan error, 1)
	for i := 1; ; i++ {
		// L0 at its stop-writes depth with the compaction held: this
		// flush must wait.
		st, err := db.store.LSM()
		atStop := err == nil && st.L0Sublevels >= 2 && hfs.IsHeld()
		go func() { done <- flush(fmt.Sprint(i)) }()
		select {
		case <-waiting:
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if atStop {
				t.Fatalf("flush %d by ingestion did not wait with L0 at its stop-writes depth and a compaction in progress (store LSM() = %+v)", i, st)
			}
			if i == 8 {
				t.Fatalf("no wait after %d flushes: store LSM() = %+v", i, st)
			}
			continue
		}
		break
	}
	hfs.Unhold()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	m := db.Metrics()
	if m.StoreL0Waits != 1 || m.StoreL0WaitTime <= 0 {
		t.Fatalf("Metrics: StoreL0Waits %d, StoreL0WaitTime %v; want one wait", m.StoreL0Waits, m.StoreL0WaitTime)
	}
	if v, err := kv.Get([]byte("z")); err != nil || len(v) == 0 {
		t.Fatalf("Get(z) = %q, %v", v, err)
	}
}
