package kvbuf

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/kvbuf/kvbuf/buffer"
	"github.com/kvbuf/kvbuf/flush"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// The engine is its flusher's one Target: a generation is every bitslice's
// and every keyspace's frozen tables, plus the catalog if it changed. It is
// written bitslices first (each msynced before its header records the
// watermark), then one pebble batch with every keyspace's changes, the
// catalog and the watermark, committed in generation order. So the receipt
// is never ahead of the data it covers (contract 4), and a keyspace's data is
// never in the store without its catalog entry.

// target is the engine as its flusher sees it: a flush.Target and
// flush.Settler. It is a distinct type so that these methods are not the
// engine's API.
type target DB

// Freeze implements flush.Target. The flusher holds the write barrier
// exclusively: no write is in flight.
func (t *target) Freeze(g uint64) flush.Generation {
	db := (*DB)(t)
	ts := db.targets.Load()
	gen := &generation{db: db, g: g, highest: db.flusher.HighestOp()}
	for _, b := range ts.bits {
		if bg := b.ov.Freeze(g); bg != nil {
			gen.bits = append(gen.bits, bitsPart{b, bg})
		}
	}
	for _, k := range ts.kvs {
		if kg := k.ov.Freeze(g); kg != nil {
			gen.kvs = append(gen.kvs, kg)
		}
	}
	db.mu.Lock()
	if len(db.bitsAdded) > 0 {
		gen.bitsAdded = db.bitsAdded
		db.bitsAdded = enginedir.BitsCatalog{}
	}
	if db.catDirty {
		// A dropped keyspace's keys are deleted in the same batch that
		// writes the catalog without it (by its overlay's range tombstone,
		// and by an explicit one for drops an earlier session left
		// unfinished), so the catalog forgets the id at once.
		gen.dropIDs = slices.Clone(db.catalog.Dropped)
		for _, id := range gen.dropIDs {
			db.catalog.Purge(id)
		}
		cat, err := db.catalog.Encode()
		if err != nil {
			// KV and DropKV encode before they change the catalog.
			panic(fmt.Sprintf("kvbuf: catalog cannot be encoded: %v", err))
		}
		gen.catalog = cat
		db.catDirty = false
	}
	db.mu.Unlock()
	return gen
}

// PendingBytes implements flush.Target: the memory of every pending change,
// plus one byte while a catalog has unflushed changes, so that a flush
// writes a new or dropped keyspace, or a new bitslice, even with no data.
func (t *target) PendingBytes() int64 {
	db := (*DB)(t)
	n := db.acct.Bytes()
	if n == 0 {
		db.mu.Lock()
		if db.catDirty || len(db.bitsAdded) > 0 {
			n = 1
		}
		db.mu.Unlock()
	}
	return n
}

// Settle implements flush.Settler: with nothing in flight, bitslices with
// nothing pending return to their direct-read fast path.
func (t *target) Settle() {
	for _, b := range t.targets.Load().bits {
		b.ov.Settle()
	}
}

type generation struct {
	db      *DB
	g       uint64
	highest uint64 // the flusher's HighestOp at the freeze
	bits    []bitsPart
	kvs     []*buffer.KVGen
	catalog []byte   // nil if unchanged
	dropIDs []uint32 // keyspaces whose drop an earlier session did not finish
	// bitsAdded are bitslices the bitslice catalog records from this
	// generation on (created or adopted since the previous freeze).
	bitsAdded enginedir.BitsCatalog
}

type bitsPart struct {
	b   *Bits
	gen *buffer.BitsGen
}

// Write implements flush.Generation.
func (gen *generation) Write(ctx context.Context, wm uint64) (func() error, error) {
	db := gen.db
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	wgen := db.genBase + gen.g
	for _, p := range gen.bits {
		// The header records this write generation with the watermark;
		// the catalog records it only once the file is durable, so the
		// file's is never below the catalog's.
		p.b.file.SetGen(wgen)
		if err := p.gen.Write(ctx, wm); err != nil {
			return nil, kverr.Errorf("flush bitslice %q: %w", p.b.name, err)
		}
		db.catW[p.b.name] = enginedir.BitsEntry{Gen: wgen, Len: p.b.file.Len()}
	}
	for name, e := range gen.bitsAdded {
		if _, ok := db.catW[name]; !ok {
			db.catW[name] = e
		}
	}
	batch := db.store.NewBatch()
	if len(gen.bits) > 0 || len(gen.bitsAdded) > 0 {
		batch.SetMeta(enginedir.BitsCatalogMeta, db.catW.Encode())
	}
	for _, id := range gen.dropIDs {
		batch.DeleteRange(storage.KeyspaceID(id), nil, nil)
	}
	for _, k := range gen.kvs {
		if err := k.AddTo(ctx, batch); err != nil {
			return nil, kverr.Errorf("flush keyspace %d: %w", k.Keyspace(), err)
		}
	}
	if gen.catalog != nil {
		batch.SetMeta(enginedir.CatalogMeta, gen.catalog)
	}
	if gen.highest > 0 {
		batch.SetMeta(enginedir.HighestOpMeta, binary.BigEndian.AppendUint64(nil, gen.highest))
	}
	batch.SetWatermark(wm)
	c, err := gen.db.store.Commit(batch)
	if err != nil {
		return nil, kverr.Errorf("flush: commit: %w", err)
	}
	return c.Wait, nil
}

// Release implements flush.Generation: the generation is durable.
func (gen *generation) Release() {
	db := gen.db
	for _, p := range gen.bits {
		p.b.ov.Release(gen.g)
	}
	var gone bool
	for _, k := range gen.kvs {
		k.Release()
	}
	ts := db.targets.Load()
	for _, k := range ts.kvs {
		if k.ov.Dropped() && k.ov.Idle() {
			gone = true
		}
	}
	if gone {
		// A dropped keyspace whose drop is durable leaves the target list.
		db.mu.Lock()
		ts := db.targets.Load()
		var keep []*KV
		for _, k := range ts.kvs {
			if !(k.ov.Dropped() && k.ov.Idle()) {
				keep = append(keep, k)
			}
		}
		db.targets.Store(&targetSet{kvs: keep, bits: ts.bits})
		db.mu.Unlock()
	}
}
