package kvbuf

// Fault tests of flushes by ingestion (Options.IngestThreshold): a file
// operation of the ingestion fails (creating or syncing the generation's
// table, pebble reading it back in DB.Ingest). Each failure fails the
// flush, again at every attempt while the fault lasts; the watermark stays;
// every pending change stays readable, including writes made meanwhile;
// the first flush after the fault is gone makes everything durable, and
// the reopened engine holds exactly that, with no table of the failed
// attempts left behind.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/kvbuf/kvbuf/storage"
)

func TestFaultIngestFailure(t *testing.T) {
	cases := []struct {
		name string
		op   func(k errorfs.OpKind) bool
	}{
		// storage.Ingest creating the table: the generation fails
		// before anything reaches pebble.
		{"create-table", func(k errorfs.OpKind) bool { return k == errorfs.OpCreate }},
		// The table's sync (Ingest syncs each table it finishes).
		{"sync-table", func(k errorfs.OpKind) bool {
			return k == errorfs.OpFileSync || k == errorfs.OpFileSyncData || k == errorfs.OpFileSyncTo
		}},
		// pebble opening the table in DB.Ingest (reading its metadata,
		// before it links it in): the ingestion fails inside pebble.
		{"pebble-ingest", func(k errorfs.OpKind) bool { return k == errorfs.OpOpen }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var armed atomic.Bool
			var hits atomic.Int64
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if armed.Load() && strings.Contains(op.Path, storage.IngestDir) && c.op(op.Kind) {
					hits.Add(1)
					return errorfs.ErrInjected
				}
				return nil
			})
			opts := &Options{FlushInterval: -1, IngestThreshold: 1, storeFS: errorfs.Wrap(vfs.Default, inj)}
			ingestFaultRound(t, opts, &armed, &hits, errorfs.ErrInjected)
		})
	}
}

// ingestFaultRound runs a fault round: arm starts the fault, hits counts
// the injections, want is the error the failed flushes wrap.
func ingestFaultRound(t *testing.T, opts *Options, armed *atomic.Bool, hits *atomic.Int64, want error) {
	ctx := context.Background()
	dir := t.TempDir()
	fe := openFaultEngine(t, dir, opts)
	db := fe.db
	fe.run(50)
	good := fe.flushAll(ctx, "before the fault")
	if n := db.Metrics().IngestedGenerations; n == 0 {
		t.Fatal("the flush before the fault did not ingest: the test does not test ingestion")
	}
	armed.Store(true)
	fe.run(30)
	for attempt := range 3 {
		err := db.Flush(ctx)
		if !errors.Is(err, want) {
			t.Fatalf("flush %d with the ingestion failing = %v, want %v", attempt, err, want)
		}
		if wm := db.Watermark(); wm != good {
			t.Fatalf("flush %d failed, yet the watermark moved from %d to %d", attempt, good, wm)
		}
		if wm, err := db.store.Watermark(); err != nil || wm != good {
			t.Fatalf("flush %d failed, yet the store's watermark is %d (%v), want %d", attempt, wm, err, good)
		}
		fe.check(fmt.Sprintf("after failed flush %d", attempt))
		// (No look at the ingest directory here: the flusher retries in
		// the background and may be writing a table.)
		fe.run(10) // writes during the fault join the retry
	}
	armed.Store(false)
	if n := hits.Load(); n < 3 {
		t.Fatalf("the fault was injected %d times in 3 failed flushes", n)
	}
	fe.recoverAndReopen(ctx, dir, opts, want)
	checkNoIngestLeftovers(t, dir, opts)
}
