package storage

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// fillParts writes 100 keys into each part on its own goroutine, as the
// engine's flush does (buffer's ingestTable), each part finishing (and
// syncing) its own table.
func fillParts(parts []*Ingest, val string) {
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Go(func() {
			for j := range 100 {
				p.Put(ks1, fmt.Appendf(nil, "p%d-%03d", i, j), []byte(val))
			}
			p.Done()
		})
	}
	wg.Wait()
}

// TestIngestPartsFailure: the sync of one part's table fails while the
// other parts' succeed (the engine writes a large generation's tables on
// several goroutines): the ingest fails as a whole, nothing of it lands,
// the watermark stays, no table is left in the ingest directory, and the
// retry lands all of it.
func TestIngestPartsFailure(t *testing.T) {
	var armed atomic.Bool
	var syncs, hits atomic.Int64
	fsys := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		isSync := op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
		if armed.Load() && isSync && strings.Contains(op.Path, IngestDir) && syncs.Add(1) == 2 {
			hits.Add(1)
			return errorfs.ErrInjected // the second table synced, whichever part it is
		}
		return nil
	}))
	s := openMemDesign(t, fsys, 0)
	put(t, s, "p1-050", "old")
	b := s.NewBatch()
	b.SetWatermark(1)
	mustApply(t, s, b)

	armed.Store(true)
	in := s.NewIngest()
	in.SetWatermark(2)
	fillParts(in.Parts(3), "new")
	if _, err := s.CommitIngest(in); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("CommitIngest with a part's sync failing = %v, want the injected error", err)
	}
	if hits.Load() != 1 {
		t.Fatalf("the fault was injected %d times, want 1", hits.Load())
	}
	wantGet(t, s, "p1-050", "old")
	wantNotFound(t, s, "p0-000")
	wantNotFound(t, s, "p2-099")
	wantWatermark(t, s, 1)
	if n := ingestFiles(t, fsys, "db"); len(n) != 0 {
		t.Fatalf("a failed ingest left %v", n)
	}

	armed.Store(false)
	in = s.NewIngest()
	in.SetWatermark(2)
	fillParts(in.Parts(3), "new")
	mustIngest(t, s, in)
	for _, k := range []string{"p0-000", "p1-050", "p2-099"} {
		wantGet(t, s, k, "new")
	}
	wantWatermark(t, s, 2)
}

// TestIngestPartsLeftoversRemovedAtOpen: the synced tables of an ingest's
// parts that was never committed (a crash after the parts' writers
// finished, before DB.Ingest) are removed at Open, and none of their
// values or their watermark reaches the store.
func TestIngestPartsLeftoversRemovedAtOpen(t *testing.T) {
	fsys := vfs.NewMem()
	s, err := Open("db", &Options{FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "p1-050", "old")
	b := s.NewBatch()
	b.SetWatermark(1)
	mustApply(t, s, b)
	in := s.NewIngest()
	in.SetWatermark(5)
	fillParts(in.Parts(3), "orphan")
	if err := in.finish(); err != nil { // joined, every table synced, not committed
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := ingestFiles(t, fsys, "db"); len(n) < 3 {
		t.Fatalf("the parts left %v, want at least their 3 tables", n)
	}
	s2 := openMemDesign(t, fsys, 0)
	if n := ingestFiles(t, fsys, "db"); len(n) != 0 {
		t.Fatalf("Open left %v in the ingest directory", n)
	}
	wantGet(t, s2, "p1-050", "old")
	wantNotFound(t, s2, "p0-000")
	wantWatermark(t, s2, 1)
}
