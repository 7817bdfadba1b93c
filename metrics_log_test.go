package kvbuf

import (
	"context"
	"fmt"
	"testing"
)

// TestStoreLogBytes checks Metrics.StoreLogBytes: a flush's receipt goes
// to the store's write-ahead log and stays in its memtable (the count
// grows), FlushMemtables writes it to an sstable (the count drops to 0),
// and Close leaves 0.
func TestStoreLogBytes(t *testing.T) {
	ctx := context.Background()
	db := openT(t, t.TempDir(), &Options{MaxBits: 1 << 12})
	b := mustBits(t, db, "b")
	if err := db.FlushMemtables(ctx); err != nil {
		t.Fatal(err)
	}
	if got := db.Metrics().StoreLogBytes; got != 0 {
		t.Fatalf("StoreLogBytes after FlushMemtables = %d, want 0", got)
	}
	var last int64
	for op := uint64(1); op <= 3; op++ {
		if err := b.Set(ctx, op, true, op); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got := db.Metrics().StoreLogBytes
		if got <= last {
			t.Fatalf("StoreLogBytes after flush of op %d = %d, want more than %d (the receipt)", op, got, last)
		}
		last = got
	}
	if err := db.FlushMemtables(ctx); err != nil {
		t.Fatal(err)
	}
	if got := db.Metrics().StoreLogBytes; got != 0 {
		t.Fatalf("StoreLogBytes after FlushMemtables = %d, want 0", got)
	}
	closeT(t, db)
	if got := db.Metrics().StoreLogBytes; got != 0 {
		t.Fatalf("StoreLogBytes after Close = %d, want 0", got)
	}
}

// TestStoreCounters checks the store's counters in Metrics: a generation
// flushed by ingestion counts an ingestion, FlushMemtables a memtable
// flush, Compact a compaction, and StoreBytesWritten grows with each, at
// least by what compactions wrote. After Close they keep the values Close
// read, where the gauges drop to 0.
func TestStoreCounters(t *testing.T) {
	ctx := context.Background()
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, IngestThreshold: 1})
	kv := mustKV(t, db, "k")
	put := func(op uint64) {
		t.Helper()
		for i := range 100 {
			if err := kv.Put(ctx, []byte(fmt.Sprintf("key-%03d", i)), []byte("value"), op); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	m0 := db.Metrics()
	put(1)
	m1 := db.Metrics()
	if m1.IngestedGenerations <= m0.IngestedGenerations || m1.StoreIngests <= m0.StoreIngests {
		t.Fatalf("after an ingested flush: IngestedGenerations %d -> %d, StoreIngests %d -> %d, want both to grow",
			m0.IngestedGenerations, m1.IngestedGenerations, m0.StoreIngests, m1.StoreIngests)
	}
	if m1.StoreBytesWritten <= m0.StoreBytesWritten {
		t.Fatalf("StoreBytesWritten %d -> %d after an ingestion, want it to grow", m0.StoreBytesWritten, m1.StoreBytesWritten)
	}
	// The flush's receipt sits in the store's memtable: FlushMemtables
	// writes it to an sstable.
	if err := db.FlushMemtables(ctx); err != nil {
		t.Fatal(err)
	}
	m2 := db.Metrics()
	if m2.StoreFlushes <= m1.StoreFlushes {
		t.Fatalf("StoreFlushes %d -> %d after FlushMemtables, want it to grow", m1.StoreFlushes, m2.StoreFlushes)
	}
	put(2)
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	m3 := db.Metrics()
	if m3.StoreCompactions <= m2.StoreCompactions || m3.StoreCompactedBytes <= m2.StoreCompactedBytes {
		t.Fatalf("after Compact: StoreCompactions %d -> %d, StoreCompactedBytes %d -> %d, want both to grow",
			m2.StoreCompactions, m3.StoreCompactions, m2.StoreCompactedBytes, m3.StoreCompactedBytes)
	}
	if m3.StoreBytesWritten-m2.StoreBytesWritten < m3.StoreCompactedBytes-m2.StoreCompactedBytes {
		t.Fatalf("StoreBytesWritten grew %d, less than the %d bytes compacted",
			m3.StoreBytesWritten-m2.StoreBytesWritten, m3.StoreCompactedBytes-m2.StoreCompactedBytes)
	}
	// An ingestion that no Metrics call read before Close: Close's own
	// reading counts it.
	put(3)
	closeT(t, db)
	mc := db.Metrics()
	if mc.StoreIngests <= m3.StoreIngests {
		t.Fatalf("StoreIngests after Close = %d, want more than %d (the flush before Close)", mc.StoreIngests, m3.StoreIngests)
	}
	if mc.StoreFlushes < m3.StoreFlushes || mc.StoreCompactions < m3.StoreCompactions ||
		mc.StoreCompactedBytes < m3.StoreCompactedBytes || mc.StoreBytesWritten < m3.StoreBytesWritten {
		t.Fatalf("after Close the counters went back: %+v, before %+v", storeCounters(mc), storeCounters(m3))
	}
	if n := db.InFlight(); n != 0 {
		t.Fatalf("InFlight after Close = %d, want 0", n)
	}
	if mc.StoreJobs != 0 || mc.StoreL0Files != 0 || mc.StoreReadAmp != 0 {
		t.Fatalf("after Close the gauges are not 0: jobs %d, L0 files %d, read amp %d", mc.StoreJobs, mc.StoreL0Files, mc.StoreReadAmp)
	}
}

// storeCounters is Metrics' store counters, for messages.
func storeCounters(m Metrics) [5]int64 {
	return [5]int64{m.StoreFlushes, m.StoreCompactions, m.StoreIngests, m.StoreCompactedBytes, m.StoreBytesWritten}
}
