package kvbuf

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/kvbuf/kvbuf/storage"
)

// TestFaultIngestParts: a generation large enough to be sorted and written
// on several goroutines (buffer.Options.IngestWriters' default, one per
// processor but one: here 3, of which 140k keys take 2) is flushed in
// parts, each its own table, all in one
// ingest; then, while every other table sync of the ingest directory
// fails (one part fails, the others succeed), each Flush fails, the
// watermark stays, the pending values are read; once the fault is gone
// the next Flush lands every part, and the reopened engine holds every
// value, with no table of the failed attempts left.
func TestFaultIngestParts(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	var armed atomic.Bool
	var creates, syncs, hits atomic.Int64
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.Contains(op.Path, storage.IngestDir) {
			return nil
		}
		switch op.Kind {
		case errorfs.OpCreate:
			creates.Add(1)
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if armed.Load() && syncs.Add(1)%2 == 0 {
				hits.Add(1)
				return errorfs.ErrInjected
			}
		}
		return nil
	})
	ctx := context.Background()
	dir := t.TempDir()
	opts := &Options{FlushInterval: -1, IngestThreshold: 1, storeFS: errorfs.Wrap(vfs.Default, inj)}
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	kv, err := db.KV("big")
	if err != nil {
		t.Fatal(err)
	}
	const n = 140_000 // more than two parts of 64k keys
	key := func(i int) []byte { return fmt.Appendf(nil, "key-%07d", i*7919%n) }
	putAll := func(v string) {
		for i := range n {
			if err := kv.Put(ctx, key(i), []byte(v), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(when, v string) {
		for i := 0; i < n; i += 97 {
			if got, err := kv.Get(key(i)); err != nil || string(got) != v {
				t.Fatalf("%s: Get(%s) = %q, %v; want %q", when, key(i), got, err, v)
			}
		}
	}
	putAll("v1")
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if c := creates.Load(); c < 3 {
		t.Fatalf("the flush of %d keys created %d tables: not written in parts", n, c)
	}
	good := db.Watermark()
	putAll("v2")
	armed.Store(true)
	for attempt := range 2 {
		if err := db.Flush(ctx); !errors.Is(err, errorfs.ErrInjected) {
			t.Fatalf("flush %d with a part's sync failing = %v, want the injected error", attempt, err)
		}
		if wm := db.Watermark(); wm != good {
			t.Fatalf("flush %d failed, yet the watermark moved from %d to %d", attempt, good, wm)
		}
		check(fmt.Sprintf("after failed flush %d", attempt), "v2")
	}
	armed.Store(false)
	if hits.Load() < 2 {
		t.Fatalf("the fault was injected %d times", hits.Load())
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatalf("flush after the fault: %v", err)
	}
	check("after the fault", "v2")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkNoIngestLeftovers(t, dir, opts)
	if kv, err = db.KV("big"); err != nil {
		t.Fatal(err)
	}
	check("reopened", "v2")
}
