package buffer

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/kvbuf/kvbuf/internal/invariants"
	"github.com/kvbuf/kvbuf/storage"
)

// Flush by ingestion: a sealed generation is already what an sstable is, a
// sorted set of changes with one version per key. IngestTo writes it into a
// storage.Ingest in the order the sealed tables already have (each table is
// sorted once, and that order serves its iterators and its flush; see
// kv_order.go), so the flush sorts nothing again, encodes no batch and
// skips pebble's WAL, memtable and memtable flush.
//
// Every change of an ingested table carries one sequence number, so a
// range tombstone of the generation does not hide the generation's own
// points, as it does in a batch where it comes after them. IngestTo
// resolves that itself: a point is written only if no tombstone of the
// generation numbered above it covers it, and every tombstone is written
// (they delete what the store holds, which is older than the generation).

// Bytes returns the memory held by the generation's tables: what the
// flusher compares with its ingestion threshold.
func (g *KVGen) Bytes() int64 {
	var n int64
	for _, t := range g.tables {
		n += t.bytes()
	}
	return n
}

// flushTables returns the tables whose changes a flush writes: for a
// dropped keyspace, only those from the drop on (older ones are deleted by
// its tombstone anyway).
func (g *KVGen) flushTables() []*table {
	tables := g.tables
	for i := len(tables) - 1; i > 0; i-- {
		if tables[i].rdel.Load().whole() {
			return tables[i:]
		}
	}
	return tables
}

// IngestTo adds the generation's changes to in, keyspace by keyspace as
// storage.Ingest wants them (the caller orders the keyspaces): every range
// tombstone, then every key's newest change in key order, unless a
// tombstone of the generation numbered above it hides it. It may be called
// again after a failed ingest (the tables are unchanged until Release).
// pace, if not nil, is called every paceKeys keys: the flusher's CPU bound
// (it may yield or sleep). Errors: ctx's.
func (g *KVGen) IngestTo(ctx context.Context, in *storage.Ingest, pace func()) error {
	ks := g.kv.ks
	tables := g.flushTables()
	for _, t := range tables {
		for _, s := range t.rdel.Load().list() {
			var hi []byte
			if !s.open {
				hi = []byte(s.hi)
			}
			in.DeleteRange(ks, []byte(s.lo), hi)
		}
	}
	if len(tables) == 1 {
		writers := g.kv.opt.writers
		if writers == 0 {
			// Every processor but one: the one left runs the readers
			// and writers a flush must not starve (IngestWriters).
			writers = max(1, runtime.GOMAXPROCS(0)-1)
		}
		return ingestTable(ctx, in, ks, tables[0], writers, pace)
	}
	return ingestMerged(ctx, in, ks, tables, pace)
}

// paceKeys is how many keys IngestTo writes between two calls of its pace
// function: about 20-50µs of work.
const paceKeys = 256

// step is called once per key of a flush: every paceKeys keys it calls
// pace, every 64k it checks ctx.
func step(ctx context.Context, i int, pace func()) error {
	if i%paceKeys == paceKeys-1 && pace != nil {
		pace()
	}
	if i&0xffff == 0xffff {
		return ctx.Err()
	}
	return nil
}

// ingestTable writes the points of one table: the common case (a
// generation of one table, not sealed early by a snapshot).
//
// The table is read in key order, and keys are in hash order in their slot
// arrays, so every key's slot is a cache miss (and, in a large table, a TLB
// miss). Read one by one, each miss waits for the writer's work on the key
// before it; ingestChunk keys' slot words are loaded first in a loop of
// nothing but loads, so that their misses overlap, then written, and the
// next chunk's slots are touched before the writer's work on this one
// (BenchmarkIngestTo compares the designs).
//
// With Options.IngestWriters > 1, a large table with no range deletion is
// cut into that many key ranges, each written into its own part of the
// ingest (its own sstable) by its own goroutine: the table writer
// (encoding, compression, filters) is most of a large flush's time
// (BenchmarkIngestToWriters: 1, 2, 4 writers). Only the first range, on
// the caller's goroutine, calls pace (the flusher's pacer serves one
// goroutine); the others, if pace is not nil, yield the processor every
// paceKeys keys (runtime.Gosched: a reader waiting for a processor runs
// first, as it does when the pacer yields). The first sort of the table runs on as
// many goroutines (sortedKeysN).
func ingestTable(ctx context.Context, in *storage.Ingest, ks storage.KeyspaceID, t *table, writers int, pace func()) error {
	sp := t.rdel.Load()
	sortWorkers := writers
	if t.flushParts != 0 {
		sortWorkers = t.flushParts
	}
	if t.flushSortWorkers != 0 {
		sortWorkers = t.flushSortWorkers
	}
	x, ents := t.sortedKeysN(sortWorkers)
	if t.flushDesign == flushRanked && x != nil { // x is nil for a table of range deletions only
		return ingestRanked(ctx, in, ks, t, sp, x, ents, pace)
	}
	if t.flushParts != 0 { // a test's or benchmark's choice, any size
		writers = min(t.flushParts, len(ents))
	} else {
		writers = min(writers, len(ents)/ingestPartMinKeys)
	}
	if writers < 2 || sp != nil {
		return ingestEnts(ctx, in, ks, t, sp, x, ents, pace)
	}
	var yield func() // the other parts' pace: yield if the caller paces
	if pace != nil {
		yield = runtime.Gosched
	}
	parts := in.Parts(writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := 1; i < writers; i++ {
		lo, hi := len(ents)*i/writers, len(ents)*(i+1)/writers
		wg.Go(func() {
			errs[i] = ingestEnts(ctx, parts[i], ks, t, sp, x, ents[lo:hi], yield)
			parts[i].Done() // its table's tail and sync on this goroutine too
		})
	}
	errs[0] = ingestEnts(ctx, parts[0], ks, t, sp, x, ents[:len(ents)/writers], pace)
	parts[0].Done()
	wg.Wait() // the parts are joined by the ingest's next use
	return errors.Join(errs...)
}

// ingestPartMinKeys is the fewest keys ingestTable gives one writer: below
// it a goroutine and a table more cost more than they save.
const ingestPartMinKeys = 1 << 16

// ingestEnts writes the points of ents, a key range of table t, into in.
func ingestEnts(ctx context.Context, in *storage.Ingest, ks storage.KeyspaceID, t *table, sp *spans, x *keyIndex, ents []sortEnt, pace func()) error {
	var (
		sws [ingestChunk]slotWords
		shs [ingestChunk]*shard
		ib  [inlineBytes]byte
	)
	chunk := ingestChunk
	if t.flushDesign == flushByKey {
		chunk = 1
	}
	for base := 0; base < len(ents); base += chunk {
		part := ents[base:min(base+chunk, len(ents))]
		for j, e := range part {
			sws[j], shs[j] = x.words(e.ref)
		}
		if t.flushDesign == flushChunked {
			// The next chunk's slots' first words, so that their misses
			// overlap the writer's work on this chunk (BenchmarkIngestTo:
			// flushNoPrefetch).
			for _, e := range ents[min(base+chunk, len(ents)):min(base+2*chunk, len(ents))] {
				x.touch(e.ref)
			}
		}
		for j, e := range part {
			if err := step(ctx, base+j, pace); err != nil {
				return err
			}
			sw := &sws[j]
			v, st := t.versionAt(shs[j], sw, ^uint64(0))
			invariants.Check(st == verFound, "buffer: a sealed table's key has no version (%d)", st)
			if st != verFound {
				continue
			}
			k := x.key(e.ref)
			if sp != nil && sp.hides(k, v.seq, ^uint64(0)) {
				continue
			}
			ingestPoint(in, ks, k, sw, &v, &ib)
		}
	}
	return nil
}

// ingestRanked is ingestTable reading the slots in slot order: the rank of
// each slot in key order is scattered into a per-shard array, the slots are
// then read array by array and their words scattered into a buffer indexed
// by rank, which the writer reads in order (an experiment against the
// chunked loads: BenchmarkIngestTo).
func ingestRanked(ctx context.Context, in *storage.Ingest, ks storage.KeyspaceID, t *table, sp *spans, x *keyIndex, ents []sortEnt, pace func()) error {
	buf := wordsByRank(x, ents)
	var ib [inlineBytes]byte
	for r, e := range ents {
		if err := step(ctx, r, pace); err != nil {
			return err
		}
		sh := x.shards[e.ref>>entShardShift]
		sw := &buf[r]
		v, st := t.versionAt(sh, sw, ^uint64(0))
		invariants.Check(st == verFound, "buffer: a sealed table's key has no version (%d)", st)
		if st != verFound {
			continue
		}
		var k string
		if sw.w0>>modeShift == modeLong {
			k, _ = sh.dir.Load().keyBytes(sw.w1&refMask, int(sw.w1>>longKeyLen))
		} else {
			k = unsafe.String((*byte)(unsafe.Pointer(&sw.w1)), int(sw.w0>>klenShift&lenMask))
		}
		if sp != nil && sp.hides(k, v.seq, ^uint64(0)) {
			continue
		}
		ingestPoint(in, ks, k, sw, &v, &ib)
	}
	return nil
}

// wordsByRank returns the slot words of ents in their order, reading the
// slots in slot order: the rank of each slot is scattered into a per-shard
// array, then each shard's slots are read in order and their words
// scattered to their rank.
func wordsByRank(x *keyIndex, ents []sortEnt) []slotWords {
	ranks := make([][]uint32, len(x.arrs))
	for r, e := range ents {
		s := e.ref >> entShardShift
		if ranks[s] == nil {
			ranks[s] = make([]uint32, len(x.arrs[s].s)/slotWordsN)
		}
		ranks[s][e.ref&entSlotMask] = uint32(r) + 1
	}
	buf := make([]slotWords, len(ents))
	for s, rk := range ranks {
		a := x.arrs[s]
		for i, r := range rk {
			if r != 0 {
				buf[r-1] = a.load(i)
			}
		}
	}
	return buf
}

// ingestChunk is the number of keys whose slots ingestTable loads ahead.
const ingestChunk = 32

// ingestPoint writes one key's change; ib is scratch for an inline value
// (the table writer copies it: one buffer serves every key).
func ingestPoint(in *storage.Ingest, ks storage.KeyspaceID, k string, sw *slotWords, v *version, ib *[inlineBytes]byte) {
	kb := unsafe.Slice(unsafe.StringData(k), len(k))
	switch {
	case v.del:
		in.Delete(ks, kb)
	case v.inline:
		in.Put(ks, kb, inlineValue(ib, sw, v))
	default:
		in.Put(ks, kb, v.ext)
	}
}

// mergeHead is one table's position in ingestMerged.
type mergeHead struct {
	x    *keyIndex
	ents []sortEnt
	i    int
}

func (h *mergeHead) key() (uint64, string) {
	e := h.ents[h.i]
	return e.prefix, h.x.key(e.ref)
}

// ingestMerged writes the points of several tables (oldest first) in key
// order, each key's change from the newest table that holds it, skipped if
// a tombstone of that table numbered above it, or any tombstone of a newer
// table, covers it. Tables are few (one per snapshot taken since the last
// flush, plus the active one), so each step scans every head.
func ingestMerged(ctx context.Context, in *storage.Ingest, ks storage.KeyspaceID, tables []*table, pace func()) error {
	var ib [inlineBytes]byte
	heads := make([]mergeHead, len(tables))
	spans := make([]*spans, len(tables))
	for i, t := range tables {
		x, ents := t.sortedKeys()
		heads[i] = mergeHead{x: x, ents: ents}
		spans[i] = t.rdel.Load()
	}
	for n := 0; ; n++ {
		if err := step(ctx, n, pace); err != nil {
			return err
		}
		// The smallest key among the heads, and the newest table holding it.
		best := -1
		var bp uint64
		var bk string
		for i := range heads {
			h := &heads[i]
			if h.i == len(h.ents) {
				continue
			}
			p, k := h.key()
			if best < 0 || p < bp || p == bp && strings.Compare(k, bk) <= 0 {
				// <= : a later (newer) table holding the same key wins.
				best, bp, bk = i, p, k
			}
		}
		if best < 0 {
			return nil
		}
		t := tables[best]
		h := &heads[best]
		sw, sh := h.x.words(h.ents[h.i].ref)
		v, st := t.versionAt(sh, &sw, ^uint64(0))
		invariants.Check(st == verFound, "buffer: a sealed table's key has no version (%d)", st)
		hidden := st != verFound || spans[best] != nil && spans[best].hides(bk, v.seq, ^uint64(0))
		for j := best + 1; !hidden && j < len(tables); j++ {
			hidden = spans[j] != nil && spans[j].hides(bk, 0, ^uint64(0))
		}
		if !hidden {
			ingestPoint(in, ks, bk, &sw, &v, &ib)
		}
		// Step past the key in every table that holds it.
		for i := range heads {
			hi := &heads[i]
			if hi.i < len(hi.ents) {
				if p, k := hi.key(); p == bp && k == bk {
					hi.i++
				}
			}
		}
	}
}
