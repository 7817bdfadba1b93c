package bench

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/storage"
)

// TestSettleRounds checks the W6 and W8 settle step: pending changes are
// made durable; an engine's store whose write-ahead log holds only flush
// receipts, and a raw pebble database whose log holds less than
// settleLogMin, keep their memtables; an engine's store and a raw pebble
// database whose log holds a round's data (settleLogMin or more) are
// flushed to sstables.
func TestSettleRounds(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func(name string) *kvbuf.DB {
		db, err := kvbuf.Open(filepath.Join(dir, name), &kvbuf.Options{MaxBits: 1 << 12})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	openPDB := func(name string) *pebble.DB {
		pdb, err := pebble.Open(filepath.Join(dir, name), storage.PebbleOptions(&storage.Options{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pdb.Close() })
		return pdb
	}
	receipts, data := open("receipts"), open("data")
	small, large := openPDB("small"), openPDB("large")
	for _, db := range []*kvbuf.DB{receipts, data} {
		if err := db.FlushMemtables(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// receipts: bit flushes, whose receipts alone reach the store's log.
	bits, err := receipts.Bits("b")
	if err != nil {
		t.Fatal(err)
	}
	for op := uint64(1); op <= 4; op++ {
		if err := bits.Set(ctx, op, true, op); err != nil {
			t.Fatal(err)
		}
		if err := receipts.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// data: KV puts left pending, more than settleLogMin and less than
	// the ingest threshold, so that the settle step's flush writes them
	// to the store's log as one batch.
	kv, err := data.KV("k")
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 100)
	for i := range 2 * settleLogMin / len(val) {
		if err := kv.Put(ctx, binary.BigEndian.AppendUint64(nil, uint64(i)), val, 0); err != nil {
			t.Fatal(err)
		}
	}
	// small: one put to the log; large: a batch over settleLogMin.
	if err := small.Set([]byte("k"), val, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	b := large.NewBatch()
	for i := range 2 * settleLogMin / len(val) {
		if err := b.Set(binary.BigEndian.AppendUint64(nil, uint64(i)), val, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()

	if err := settleRounds([]*kvbuf.DB{receipts, data}, small, large)(ctx); err != nil {
		t.Fatal(err)
	}
	if m := data.Metrics(); m.PendingBytes != 0 || m.StoreLogBytes != 0 {
		t.Errorf("data engine after settle: PendingBytes %d, StoreLogBytes %d; want both 0 (pending changes flushed, then the memtable)", m.PendingBytes, m.StoreLogBytes)
	}
	if m := receipts.Metrics(); m.StoreLogBytes == 0 || m.StoreLogBytes >= settleLogMin {
		t.Errorf("receipts engine after settle: StoreLogBytes %d, want in (0, %d): its memtable kept", m.StoreLogBytes, settleLogMin)
	}
	if got := small.Metrics().WAL.Size; got == 0 {
		t.Error("small pebble database: its memtable was flushed (WAL live data 0), want it kept")
	}
	if got := large.Metrics().WAL.Size; got != 0 {
		t.Errorf("large pebble database: WAL live data %d after settle, want 0 (flushed)", got)
	}
}
