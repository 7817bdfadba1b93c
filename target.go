package kvbuf

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/internal/buffer"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/failpoint"
	"github.com/kvbuf/kvbuf/internal/flush"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// The engine is its flusher's one Target: a generation is every bitslice's
// and every keyspace's frozen tables, plus the catalog if it changed. It is
// written bitslices first (each made durable, with a header recording the
// generation, by one fdatasync: BitsGen.WriteLagged), then one pebble
// batch with every keyspace's changes, the
// catalog and the watermark, committed in generation order. So the receipt
// is never ahead of the data it covers (contract 4; publication order 16 in
// internal/buffer/protocol.go), and a keyspace's data is never in the store without
// its catalog entry.

// target is the engine as its flusher sees it: a flush.Target and
// flush.Settler. It is a distinct type so that these methods are not the
// engine's API.
type target DB

// Freeze implements flush.Target. The flusher holds the write barrier
// exclusively: no write is in flight.
func (t *target) Freeze(g uint64) flush.Generation {
	db := (*DB)(t)
	db.feed.freezeHook(g) // a cut of the change feed (watch.go)
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
	db.catPending.Store(false) // both cleared above
	db.mu.Unlock()
	return gen
}

// PendingBytes implements flush.Target: the memory of every pending change,
// plus one byte while a catalog has unflushed changes, so that a flush
// writes a new or dropped keyspace, or a new bitslice, even with no data.
// Admission calls it only when the account's total is above FlushBytes
// (PendingCounter) or with no PendingCounter in use; Stats and the
// flusher's idle check call it too: with nothing pending it reads
// catPending, not catDirty and bitsAdded under mu.
func (t *target) PendingBytes() int64 {
	db := (*DB)(t)
	n := db.acct.Bytes()
	if n == 0 && db.catPending.Load() {
		n = 1
	}
	return n
}

// PendingCounter implements flush.PendingCounter: PendingBytes is the
// account's total whenever it is not zero.
func (t *target) PendingCounter() *atomic.Int64 { return (*DB)(t).acct.Counter() }

// markCatalog records that a catalog has unflushed changes: the caller
// just set catDirty or added to bitsAdded. db.mu held.
func (db *DB) markCatalog() { db.catPending.Store(true) }

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
	// Bitslices first, the batch with the watermark after (publication
	// order 16).
	for _, p := range gen.bits {
		// The header records this write generation with the watermark;
		// the catalog records it only once the file is durable, so the
		// file's is never below the catalog's.
		p.b.file.SetGen(wgen)
		if err := p.gen.WriteLagged(ctx, wm); err != nil {
			return nil, kverr.Errorf("flush bitslice %q: %w", p.b.name, err)
		}
		if err := failpoint.Hit(failpoint.FlushBitsHeader); err != nil {
			// Tested by TestFaultBitsliceFailpoints and
			// TestCrashFlushBitsHeader under -tags kvbuf_failpoints.
			return nil, kverr.Errorf("flush bitslice %q: %w", p.b.name, err)
		}
		db.catW[p.b.name] = enginedir.BitsEntry{Gen: wgen, Len: p.b.file.Len()}
	}
	for name, e := range gen.bitsAdded {
		if _, ok := db.catW[name]; !ok {
			db.catW[name] = e
		}
	}
	// The change feed's retained changes of the ops this watermark covers
	// go into the same batch or ingest (watch_retain.go, R1).
	rw := db.feed.retainWrite(gen.g, wm)
	if db.opts.IngestThreshold > 0 && gen.kvBytes() >= db.opts.IngestThreshold {
		return nil, gen.ingest(ctx, wm, rw)
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
	gen.setOpsMeta(batch.SetMeta)
	if rw != nil {
		rw.addToBatch(batch)
	}
	batch.SetWatermark(wm)
	c, err := gen.db.store.Commit(batch)
	if err != nil {
		return nil, kverr.Errorf("flush: commit: %w", err)
	}
	return c.Wait, nil
}

// setOpsMeta sets, with set (the batch's or the ingest's SetMeta), the
// keyspace catalog if the generation changed it and its highest op.
func (gen *generation) setOpsMeta(set func(name string, v []byte)) {
	if gen.catalog != nil {
		set(enginedir.CatalogMeta, gen.catalog)
	}
	if gen.highest > 0 {
		set(enginedir.HighestOpMeta, binary.BigEndian.AppendUint64(nil, gen.highest))
	}
}

// kvBytes is the memory of the generation's KV changes.
func (gen *generation) kvBytes() int64 {
	var n int64
	for _, k := range gen.kvs {
		n += k.Bytes()
	}
	return n
}

// ingest writes the generation's store part (every keyspace's changes,
// the catalogs, the highest op and the watermark wm) as sstables and
// ingests them in one call (flush by ingestion, doc/design.md), then waits
// for the result: the next generation is written only once this one is in
// the store or has failed, so that nothing is committed behind an ingest
// that fails (the store fails what it queued behind it, but a generation
// written after the failure was settled would land with a watermark that
// covers this one: ingest rule 6 in storage/ingest_commit.go). The
// bitslices were written and synced before (Write).
func (gen *generation) ingest(ctx context.Context, wm uint64, rw *retWrite) error {
	db := gen.db
	db.pacer.begin()
	in := db.store.NewIngest()
	in.SetWatermark(wm)
	if len(gen.bits) > 0 || len(gen.bitsAdded) > 0 {
		in.SetMeta(enginedir.BitsCatalogMeta, db.catW.Encode())
	}
	gen.setOpsMeta(in.SetMeta)
	if rw != nil {
		rw.ingestMeta(in)
	}
	// An ingest takes keyspaces in increasing order; a keyspace whose drop
	// an earlier session left unfinished comes before one of this
	// session's with the same id.
	kvs := slices.Clone(gen.kvs)
	slices.SortFunc(kvs, func(a, b *buffer.KVGen) int { return cmp.Compare(a.Keyspace(), b.Keyspace()) })
	pace := db.pacer.pace
	if db.pacer.quantum <= 0 {
		pace = nil // never yield (Options.FlushQuantum), nor the flush's other goroutines
	}
	drops := slices.Clone(gen.dropIDs)
	slices.Sort(drops)
	for len(kvs) > 0 || len(drops) > 0 {
		if len(drops) > 0 && (len(kvs) == 0 || storage.KeyspaceID(drops[0]) <= kvs[0].Keyspace()) {
			in.DeleteRange(storage.KeyspaceID(drops[0]), nil, nil)
			drops = drops[1:]
			continue
		}
		k := kvs[0]
		kvs = kvs[1:]
		if err := k.IngestTo(ctx, in, pace); err != nil {
			in.Abort()
			return kverr.Errorf("flush keyspace %d: %w", k.Keyspace(), err)
		}
	}
	if rw != nil {
		rw.addToIngest(in) // feedKS is above every keyspace
	}
	// pebble's stop-writes depth holds batch writes back, not ingestions
	// (storage.Store.WaitL0): the flush keeps L0 within it itself.
	if !db.opts.noL0Wait {
		w, err := db.store.WaitL0(ctx, db.l0Waiting)
		db.l0WaitNs.Add(int64(w))
		if err != nil {
			in.Abort()
			return kverr.Errorf("flush: ingest: %w", err)
		}
	}
	c, err := db.store.CommitIngest(in)
	if err != nil {
		return kverr.Errorf("flush: ingest: %w", err)
	}
	if err := c.Wait(); err != nil {
		return kverr.Errorf("flush: ingest: %w", err)
	}
	db.ingests.Add(1)
	return nil
}

// l0Waiting counts a flush by ingestion that waits for the store's L0
// (Metrics.StoreL0Waits), as it begins to wait.
func (db *DB) l0Waiting() {
	db.l0Waits.Add(1)
	if h := db.opts.hooks; h != nil && h.l0Waiting != nil {
		h.l0Waiting()
	}
}

// Recycle implements flush.Recycler: after the callers of the flush were
// woken, each bitslice resets the table its release kept for reuse.
func (gen *generation) Recycle() {
	for _, p := range gen.bits {
		p.b.ov.Recycle()
	}
}

// Release implements flush.Generation: the generation is durable.
func (gen *generation) Release() {
	db := gen.db
	// The change feed first (watch.go, rule D1): its durable watches wait
	// for nothing of what follows.
	db.feed.releaseHook(gen.g)
	for _, p := range gen.bits {
		p.b.ov.ReleaseView(gen.g) // the tables' reset waits for Recycle
	}
	var gone bool
	if db.opts.ReadTierBytes > 0 {
		db.tier.retain(gen, db.opts.ReadTierBytes)
	} else {
		for _, k := range gen.kvs {
			k.Release()
		}
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
	if db.share != nil {
		db.share.sync() // the memory budget learns of the release
	}
}
