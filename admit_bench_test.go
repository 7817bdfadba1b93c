package kvbuf

import (
	"context"
	"encoding/binary"
	"testing"
)

// BenchmarkWriteHot times the fixed cost of one synchronous write, its
// lines in cache (issues 25 and 26: the single-op write path without the
// misses of W6's random slots), so that admission's share shows: rows
// admission (Flusher.BeginWrite and Ticket.End, nothing applied, with
// changes pending as during W6), admission-write (the same through
// Flusher.Write, no Ticket, an empty apply), admission-idle (BeginWrite
// and End with nothing pending: the first write after a flush), bits-set (Bits.Set over 65,536
// bits), bits-overlay (the overlay's Set alone, same bits) and kv-put
// (KV.Put overwriting 1,024 keys of 8 bytes with 16-byte values). Each
// row's ns/op is one write. doc/design.md ("admit7") quotes it with the
// command.
func BenchmarkWriteHot(b *testing.B) {
	open := func(b *testing.B) *DB {
		db, err := Open(b.TempDir(), &Options{FlushInterval: -1, MaxPendingBytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		return db
	}
	bits := func(b *testing.B) (*DB, *Bits) {
		db := open(b)
		bs, err := db.Bits("hot")
		if err != nil {
			b.Fatal(err)
		}
		return db, bs
	}
	const nbits = 1 << 16
	// beginEnd is the admission rows' loop: a write admitted and ended.
	beginEnd := func(b *testing.B, db *DB) {
		for b.Loop() {
			t, err := db.flusher.BeginWrite(ctx, 0, false)
			if err != nil {
				b.Fatal(err)
			}
			t.End()
		}
	}
	b.Run("admission", func(b *testing.B) {
		db, bs := bits(b)
		if err := bs.Set(ctx, 1, true, 0); err != nil { // something pending
			b.Fatal(err)
		}
		beginEnd(b, db)
	})
	b.Run("admission-write", func(b *testing.B) {
		db, bs := bits(b)
		if err := bs.Set(ctx, 1, true, 0); err != nil { // something pending
			b.Fatal(err)
		}
		nop := func() error { return nil }
		// Through an interface, so that the file also builds at revisions
		// before Flusher.Write (scripts/gobench-compare.sh's OVERLAY).
		w, ok := any(db.flusher).(interface {
			Write(context.Context, uint64, func() error) error
		})
		if !ok {
			b.Skip("no Flusher.Write at this revision")
		}
		for b.Loop() {
			if err := w.Write(ctx, 0, nop); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("admission-idle", func(b *testing.B) {
		db, _ := bits(b)
		if err := db.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		beginEnd(b, db)
	})
	b.Run("bits-set", func(b *testing.B) {
		_, bs := bits(b)
		i := uint64(0)
		for b.Loop() {
			if err := bs.Set(ctx, i%nbits, i&nbits == 0, 0); err != nil {
				b.Fatal(err)
			}
			i += 97
		}
	})
	b.Run("bits-overlay", func(b *testing.B) {
		_, bs := bits(b)
		i := uint64(0)
		for b.Loop() {
			if err := bs.ov.Set(i%nbits, i&nbits == 0); err != nil {
				b.Fatal(err)
			}
			i += 97
		}
	})
	b.Run("kv-put", func(b *testing.B) {
		db := open(b)
		kv, err := db.KV("hot")
		if err != nil {
			b.Fatal(err)
		}
		var key [8]byte
		val := make([]byte, 16)
		i := uint64(0)
		for b.Loop() {
			binary.BigEndian.PutUint64(key[:], i%1024)
			binary.BigEndian.PutUint64(val, i)
			if err := kv.Put(ctx, key[:], val, 0); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
