package storage

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

func TestLSMOptions(t *testing.T) {
	for _, o := range []*Options{
		{L0CompactionThreshold: -1},
		{L0StopWritesThreshold: -1},
		{MaxConcurrentCompactions: -1},
		{L0CompactionConcurrency: -1},
		{L0CompactionThreshold: 8, L0StopWritesThreshold: 6},
		{L0CompactionThreshold: 13}, // above pebble's default stop threshold
	} {
		if _, err := Open("db", &Options{FS: vfs.NewMem(), L0CompactionThreshold: o.L0CompactionThreshold,
			L0StopWritesThreshold: o.L0StopWritesThreshold, MaxConcurrentCompactions: o.MaxConcurrentCompactions,
			L0CompactionConcurrency: o.L0CompactionConcurrency}); !errors.Is(err, kverr.ErrBadOptions) {
			t.Errorf("Open(%+v) = %v, want ErrBadOptions", *o, err)
		}
	}
	po := PebbleOptions(&Options{L0CompactionThreshold: 2, L0StopWritesThreshold: 20, MaxConcurrentCompactions: 3, L0CompactionConcurrency: 2})
	if po.L0CompactionThreshold != 2 || po.L0StopWritesThreshold != 20 || po.Experimental.L0CompactionConcurrency != 2 {
		t.Fatalf("pebble options: L0 thresholds %d, %d, L0 compaction concurrency %d",
			po.L0CompactionThreshold, po.L0StopWritesThreshold, po.Experimental.L0CompactionConcurrency)
	}
	if lo, hi := po.CompactionConcurrencyRange(); lo != 1 || hi != 3 {
		t.Fatalf("compaction concurrency [%d, %d], want [1, 3]", lo, hi)
	}
	if po := PebbleOptions(nil); po.CompactionConcurrencyRange != nil || po.L0CompactionThreshold != 0 || po.Experimental.L0CompactionConcurrency != 0 {
		t.Fatal("default options set the compaction options pebble defaults itself")
	}
}

func TestLSMStats(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "a", "1", "b", "2")
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	in := s.NewIngest()
	in.SetWatermark(1)
	in.Put(ks1, []byte("c"), []byte("3"))
	mustIngest(t, s, in)
	st, err := s.LSM()
	if err != nil {
		t.Fatal(err)
	}
	// (L0 may be empty by now: pebble may have compacted both tables.)
	if st.L0Files+st.Compactions < 1 || st.ReadAmp < 1 || st.Flushes < 1 || st.Ingests != 1 || st.WALBytes == 0 ||
		st.FlushedBytes == 0 || st.IngestedBytes == 0 ||
		st.BytesWritten != st.WALBytes+st.FlushedBytes+st.CompactedBytes+st.IngestedBytes {
		t.Fatalf("LSM() = %+v", st)
	}
	if st.FlushableIngests != 0 {
		t.Fatalf("FlushableIngests %d after an ingest over an empty memtable, want 0", st.FlushableIngests)
	}
	// An ingest overlapping the memtable is queued behind it.
	put(t, s, "d", "4")
	in = s.NewIngest()
	in.SetWatermark(2)
	in.Put(ks1, []byte("c"), []byte("5"))
	in.Put(ks1, []byte("e"), []byte("6"))
	mustIngest(t, s, in)
	if err := s.Flush(); err != nil { // pebble counts a flushable ingest once it is flushed
		t.Fatal(err)
	}
	if st, err = s.LSM(); err != nil || st.FlushableIngests != 1 || st.Ingests != 2 {
		t.Fatalf("after an ingest over the memtable: LSM() = %+v, %v; want 1 flushable ingest of 2", st, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LSM(); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("LSM after Close = %v, want ErrClosed", err)
	}
}
