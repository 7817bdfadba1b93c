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
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// TestFaultIngestFailsBeforeNextGeneration checks ingest rule 6
// (storage/ingest_commit.go): the engine waits for an ingestion's result
// before it writes the next generation. Generation 1's DB.Ingest is held
// inside pebble while more ops are written and the flush interval comes;
// then the ingestion fails. A table created meanwhile (a next generation's)
// is let through only once the failure is reported. Were the next
// generation written while generation 1's result was pending, it would
// land after the store settled the failure, with a watermark that covers
// generation 1's ops, which are not in the store (contract 4): the retry
// of generation 1 is then refused (its watermark is below one committed),
// or the reopened engine lacks its ops.
func TestFaultIngestFailsBeforeNextGeneration(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var (
		mu        sync.Mutex
		phase     int // 0 pass, 1 armed, 2 the ingestion failed: pass
		atPebble  = make(chan struct{})
		release   = make(chan struct{})
		nextTable = make(chan struct{}) // a table was created while generation 1's ingestion was held
		settled   = make(chan struct{})
	)
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.Contains(op.Path, storage.IngestDir) {
			return nil
		}
		mu.Lock()
		p := phase
		mu.Unlock()
		if p != 1 {
			return nil
		}
		switch op.Kind {
		case errorfs.OpOpen: // pebble reading generation 1's table in DB.Ingest
			select {
			case <-atPebble: // a later table's (behind generation 1's): pass
				return nil
			default:
			}
			close(atPebble)
			<-release
			mu.Lock()
			phase = 2
			mu.Unlock()
			return errorfs.ErrInjected
		case errorfs.OpCreate:
			select {
			case <-atPebble:
				// A later generation's table while generation 1's
				// ingestion is held: held until its failure is reported.
				select {
				case <-nextTable:
				default:
					close(nextTable)
				}
				<-settled
			default: // generation 1's own table
			}
		}
		return nil
	})
	// Background flushes every 20 ms write the generations (an explicit
	// Flush would wait for generation 1's callers before freezing another).
	opts := &Options{FlushInterval: 20 * time.Millisecond, IngestThreshold: 1, storeFS: errorfs.Wrap(vfs.Default, inj)}
	fe := openFaultEngine(t, dir, opts)
	db := fe.db
	fe.run(50)
	good := fe.flushAll(ctx, "before the fault")
	if n := db.Metrics().IngestedGenerations; n == 0 {
		t.Fatal("the flush before the fault did not ingest: the test does not test ingestion")
	}
	failures := db.Metrics().Failures

	mu.Lock()
	phase = 1
	mu.Unlock()
	fe.run(30)
	select {
	case <-atPebble:
	case <-time.After(time.Minute):
		t.Fatal("no ingestion reached pebble within a minute of the writes")
	}
	fe.run(30) // the next generation's ops (KV writes among them: it ingests)
	// With rule 6 kept, generation 1's Write is waiting for its result and
	// no later table is created before the failure: the wait is bounded.
	// Without it, the next generation's table comes within a flush
	// interval.
	select {
	case <-nextTable:
	case <-time.After(2 * time.Second):
	}
	close(release)
	for db.Metrics().Failures == failures {
		time.Sleep(time.Millisecond) // the flusher reports the failure
	}
	close(settled)

	last := fe.flushAll(ctx, "after the failure")
	if last <= good {
		t.Fatalf("watermark %d after the recovery, was %d before the fault", last, good)
	}
	fe.check("after the failure")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db2, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db2.Close(); err != nil {
			t.Error(err)
		}
	}()
	if wm := db2.Watermark(); wm != last {
		t.Fatalf("watermark %d after reopen, want %d", wm, last)
	}
	checkFaultState(t, "after reopen", db2, fe.m)
	checkNoIngestLeftovers(t, dir, opts)
}
