package kvbuf

// Benchmarks of flush by ingestion and of the read tier, each comparing
// designs (or kvbuf and pebble) within one run, in rotating order, with
// ratios reported as metrics. doc/design.md ("Flush by ingestion", "The
// read tier") quotes them with the commands that produced the figures.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"

	"github.com/kvbuf/kvbuf/storage"
)

// w6Keys returns n distinct 8-byte big-endian keys drawn from [0, 4n) in
// random order (W6's keys at n = 1M), and their stored forms in keyspace 1
// sorted.
func w6Keys(n int, seed uint64) (keys [][]byte, stored [][]byte) {
	rng := rand.New(rand.NewPCG(seed, 6))
	seen := make(map[uint64]bool, n)
	for len(keys) < n {
		k := rng.Uint64N(4 * uint64(n))
		if !seen[k] {
			seen[k] = true
			keys = append(keys, binary.BigEndian.AppendUint64(nil, k))
		}
	}
	for _, k := range keys {
		stored = append(stored, append([]byte{2, 0, 0, 0, 1}, k...)) // storage's user key layout, keyspace 1
	}
	slices.SortFunc(stored, func(a, b []byte) int { return slices.Compare(a, b) })
	return keys, stored
}

// settle waits until the store (pebble) has no flush or compaction left.
func settle(lsm func() (storage.LSMStats, error)) {
	for {
		st, err := lsm()
		if err != nil || st.BackgroundJobs == 0 {
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// pebbleLSM reads the LSMStats fields a benchmark uses from a raw pebble.
func pebbleLSM(db *pebble.DB) func() (storage.LSMStats, error) {
	return func() (storage.LSMStats, error) {
		return storage.PebbleLSMStats(db.Metrics()), nil
	}
}

// w6Pending is the pending budget of the W6 engines (everything stays
// pending until the Flush) and the memtable of the pebble rows (the same
// memory).
const w6Pending = 128 << 20

// BenchmarkFlushW6 is W6's KV row through the engine, one round per op:
// 1M puts of 16-byte values to W6's keys (new values every round), made
// durable, by each row in rotating order:
//
//   - kvbuf/puts: 1M KV.Put calls, then DB.Flush, with the default
//     Options.IngestThreshold (the generation is ingested);
//   - kvbuf/batches: the same puts in Batches of 1000 (DB.Apply, op 0);
//   - kvbuf-batch-path/puts: 1M Puts and Flush, IngestThreshold -1 (the
//     generation goes through the WAL as one batch: the design before);
//   - pebble/batch-sync: one pebble batch of the puts in arrival order,
//     committed with Sync (the store's options, a memtable as large as the
//     engines' pending budget);
//   - pebble/batch-sync-sorted: the same with the keys sorted (not timed);
//   - kvbuf-all-procs/puts: kvbuf/puts with the flush's sort and tables
//     on one goroutine per processor (buffer.Options.IngestWriters
//     GOMAXPROCS; the default leaves one processor out, so on two cores
//     it is the flusher's goroutine alone);
//   - kvbuf-rowblocks/puts, kvbuf-rowblocks/batches: as kvbuf/puts and
//     kvbuf/batches, with the store's IngestTableFormat set to the
//     row-block sstable.TableFormatPebblev4 (the store's other options as
//     the engine's).
//
// Metrics per row: ns/put (to durability), flush-ns/put (kvbuf: the Flush
// alone), cpu-ns/put (user+sys of the process over the timed span),
// settle-cpu-ns/put (the same up to the moment the store has no flush or
// compaction left: background work the row caused) and wamp (bytes the
// store wrote up to then, per byte of user key and value); speedup-puts and
// speedup-batches are pebble/batch-sync's time over the kvbuf row's (the
// same input, arrival order), speedup-flush-vs-sorted-batch the sorted
// pebble batch's time over kvbuf's Flush alone, speedup-flush-vs-batch-
// path the batch path's Flush over the ingesting one's, cpu-puts/pebble
// kvbuf/puts's CPU over pebble/batch-sync's (settle-cpu with the
// background work); speedup-flush-rowblocks and speedup-cpu-rowblocks
// kvbuf/puts's Flush time and CPU over kvbuf-rowblocks/puts',
// speedup-rowblocks-batches pebble/batch-sync's time over
// kvbuf-rowblocks/batches'; speedup-flush-all-procs kvbuf/puts' Flush
// over kvbuf-all-procs/puts', cpu-all-procs/puts the CPU of
// kvbuf-all-procs/puts over kvbuf/puts', and the all-procs row's
// speedup-flush-...-vs-sorted-batch and speedup-puts-... as kvbuf/puts'
// above.
func BenchmarkFlushW6(b *testing.B) {
	const n = 1_000_000
	keys, stored := w6Keys(n, 1)
	val := make([]byte, 16)
	type row struct {
		name  string
		run   func(round uint64) (flush time.Duration, err error)
		lsm   func() (storage.LSMStats, error)
		total time.Duration
		flush time.Duration
		cpu   time.Duration
		scpu  time.Duration
		bytes uint64
	}
	engine := func(name string, ingest int64, batch bool, ingestFormat sstable.TableFormat, writers ...int) *row {
		opts := &Options{FlushInterval: -1, MaxPendingBytes: w6Pending, IngestThreshold: ingest}
		if len(writers) > 0 {
			opts.ingestWriters = writers[0]
		}
		if ingestFormat != 0 {
			so := opts.storageOptions()
			so.IngestTableFormat = ingestFormat
			opts.storeTune = so
		}
		db, err := Open(b.TempDir(), opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		kv, err := db.KV("w6")
		if err != nil {
			b.Fatal(err)
		}
		r := &row{name: name, lsm: db.store.LSM}
		r.run = func(round uint64) (time.Duration, error) {
			binary.BigEndian.PutUint64(val, round)
			if err := w6Write(ctx, db, kv, keys, val, batch); err != nil {
				return 0, err
			}
			t0 := time.Now()
			err := db.Flush(ctx)
			return time.Since(t0), err
		}
		return r
	}
	raw := func(name string, order [][]byte) *row {
		db := w6Pebble(b)
		r := &row{name: name, lsm: pebbleLSM(db)}
		r.run = func(round uint64) (time.Duration, error) {
			binary.BigEndian.PutUint64(val, round)
			err := w6PebbleBatch(db, order, val)
			return 0, err
		}
		return r
	}
	arrival := w6Arrival(keys)
	rows := []*row{
		engine("kvbuf/puts", 0, false, 0),
		engine("kvbuf/batches", 0, true, 0),
		engine("kvbuf-batch-path/puts", -1, false, 0),
		raw("pebble/batch-sync", arrival),
		raw("pebble/batch-sync-sorted", stored),
		engine("kvbuf-rowblocks/puts", 0, false, sstable.TableFormatPebblev4),
		engine("kvbuf-rowblocks/batches", 0, true, sstable.TableFormatPebblev4),
		engine("kvbuf-all-procs/puts", 0, false, 0, runtime.GOMAXPROCS(0)),
	}
	round := uint64(0)
	for b.Loop() {
		round++
		for j := range rows {
			r := rows[(j+int(round))%len(rows)]
			before, _ := r.lsm()
			c0 := processCPU()
			t0 := time.Now()
			fl, err := r.run(round)
			if err != nil {
				b.Fatalf("%s: %v", r.name, err)
			}
			r.total += time.Since(t0)
			r.flush += fl
			r.cpu += processCPU() - c0
			settle(r.lsm)
			r.scpu += processCPU() - c0
			after, _ := r.lsm()
			r.bytes += after.BytesWritten - before.BytesWritten
		}
	}
	puts := float64(round) * n
	for _, r := range rows {
		b.ReportMetric(float64(r.total.Nanoseconds())/puts, r.name+"-ns/put")
		if r.flush > 0 {
			b.ReportMetric(float64(r.flush.Nanoseconds())/puts, r.name+"-flush-ns/put")
		}
		b.ReportMetric(float64(r.cpu.Nanoseconds())/puts, r.name+"-cpu-ns/put")
		b.ReportMetric(float64(r.scpu.Nanoseconds())/puts, r.name+"-settle-cpu-ns/put")
		b.ReportMetric(float64(r.bytes)/puts/24, r.name+"-wamp")
	}
	// End to end the rows take the same input, in arrival order: the
	// pebble row with sorted keys gets them sorted for free, and is the
	// comparison for the Flush alone (which starts from sorted tables).
	b.ReportMetric(float64(rows[3].total)/float64(rows[0].total), "speedup-puts")
	b.ReportMetric(float64(rows[3].total)/float64(rows[1].total), "speedup-batches")
	b.ReportMetric(float64(rows[0].cpu)/float64(rows[3].cpu), "cpu-puts/pebble")
	b.ReportMetric(float64(rows[0].scpu)/float64(rows[3].scpu), "settle-cpu-puts/pebble")
	b.ReportMetric(float64(rows[4].total)/float64(rows[0].flush), "speedup-flush-vs-sorted-batch")
	b.ReportMetric(float64(rows[2].flush)/float64(rows[0].flush), "speedup-flush-vs-batch-path")
	b.ReportMetric(float64(rows[0].flush)/float64(rows[5].flush), "speedup-flush-rowblocks")
	b.ReportMetric(float64(rows[0].cpu)/float64(rows[5].cpu), "speedup-cpu-rowblocks")
	b.ReportMetric(float64(rows[3].total)/float64(rows[6].total), "speedup-rowblocks-batches")
	b.ReportMetric(float64(rows[0].flush)/float64(rows[7].flush), "speedup-flush-all-procs")
	b.ReportMetric(float64(rows[7].cpu)/float64(rows[0].cpu), "cpu-all-procs/puts")
	b.ReportMetric(float64(rows[4].total)/float64(rows[7].flush), "speedup-flush-all-procs-vs-sorted-batch")
	b.ReportMetric(float64(rows[3].total)/float64(rows[7].total), "speedup-puts-all-procs")
}

// sink keeps benchmark reads alive.
var sinkBytes []byte

// BenchmarkMissRead measures a read the buffer cannot answer (the key is
// neither pending nor in the read tier) against a plain pebble Get on a
// store of the same shape and cache: 1M W6 keys (16-byte values) compacted
// to the last level, then 64k other keys flushed on top (in the engine:
// ingested and kept by the read tier, unless the tier is off; in pebble:
// flushed; no op is an untimed warm-up), both stores with the engine's
// store options and cache size. pebble's cache is not given the engine's
// read tier, as the baselines of the workloads are: this row measures
// the cost of the miss path on equal stores (issue 25: "a plain pebble
// Get on a store of the same shape and cache"), and the tier holds only
// the 64k keys no op reads. One op is 1000
// Gets of stored keys, in random order, on every row in rotating order:
// kvbuf (tier on, with its filters), kvbuf-tier-no-filter (tier rule T5's
// filters off), kvbuf-no-tier, pebble (DB.Get), pebble-iter (one iterator
// kept open, SeekPrefixGE: what the engine's store does for point reads;
// on a store of its own, loaded like the pebble row's). keys=hot reads
// 16k keys adjacent
// in key order (their blocks stay in the block cache: the per-read
// overhead), keys=all any of the 1M (most reads miss the cache). Metrics:
// ns/get per row and each kvbuf row's time over pebble's (the target is at
// most 1.05): the median, min and max of the ratios of groups of 100 ops,
// and kvbuf/pebble over the whole run; kvbuf/pebble-iter and
// pebble-iter/pebble the same against the kept iterator.
func BenchmarkMissRead(b *testing.B) {
	for _, hot := range []bool{true, false} {
		name := "keys=all"
		if hot {
			name = "keys=hot"
		}
		b.Run(name, func(b *testing.B) { benchMissRead(b, hot) })
	}
}

func benchMissRead(b *testing.B, hot bool) {
	const n, extra, reads = 1 << 20, 1 << 16, 1000
	keys, _ := w6Keys(n+extra, 7)
	val := make([]byte, 16)
	type row struct {
		name   string
		get    func(k []byte) error
		t      time.Duration
		rounds []time.Duration // per op, for the per-round ratios
	}
	engine := func(name string, tier int64, noFilters bool) *row {
		dir := b.TempDir()
		opts := &Options{FlushInterval: -1, MaxPendingBytes: w6Pending, ReadTierBytes: tier}
		db, err := Open(dir, opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		kv, err := db.KV("w6")
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range keys[:n] {
			if err := kv.Put(ctx, k, val, 0); err != nil {
				b.Fatal(err)
			}
		}
		if err := db.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		if err := db.Compact(ctx); err != nil {
			b.Fatal(err)
		}
		// The 64k-key generation after the 1M-key one is given slot
		// arrays for 1M keys (45 MB; the next active table is sized for
		// the last one's keys) and kept only because the tier compacts
		// them as it retains it (tier rule T6; doc/design.md, "The read
		// tier"): the check below fails without it.
		db.tier.noFilters = noFilters // before the extra keys' flush retains them
		for _, k := range keys[n:] {
			if err := kv.Put(ctx, k, val, 0); err != nil {
				b.Fatal(err)
			}
		}
		if err := db.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		settle(db.store.LSM)
		if m := db.Metrics(); (m.ReadTierGenerations > 0) != (tier > 0) || m.PendingBytes != 0 {
			b.Fatalf("%s: %d generations in the read tier, %d bytes pending", name, m.ReadTierGenerations, m.PendingBytes)
		}
		var buf []byte
		return &row{name: name, get: func(k []byte) error {
			var err error
			buf, err = kv.GetAppend(buf[:0], k)
			return err
		}}
	}
	// The engine's own store options: the same L0 thresholds, so the two
	// stores settle to the same shape.
	stored := func(k []byte) []byte { return append([]byte{2, 0, 0, 0, 1}, k...) }
	// openPebble opens and loads a raw pebble store like the engines'.
	// The pebble and pebble-iter rows read stores of their own, so that
	// neither reads blocks (and CPU cache lines) the other warmed.
	openPebble := func() *pebble.DB {
		po := storage.PebbleOptions((&Options{}).EnsureDefaults().storageOptions())
		pdb, err := pebble.Open(b.TempDir(), po)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = pdb.Close() })
		bt := pdb.NewBatch()
		for _, k := range keys[:n] {
			_ = bt.Set(stored(k), val, nil)
		}
		if err := bt.Commit(pebble.Sync); err != nil {
			b.Fatal(err)
		}
		if err := pdb.Compact(ctx, []byte{2}, []byte{3}, true); err != nil {
			b.Fatal(err)
		}
		bt = pdb.NewBatch()
		for _, k := range keys[n:] {
			_ = bt.Set(stored(k), val, nil)
		}
		if err := bt.Commit(pebble.Sync); err != nil {
			b.Fatal(err)
		}
		if err := pdb.Flush(); err != nil {
			b.Fatal(err)
		}
		settle(pebbleLSM(pdb))
		return pdb
	}
	pdb, pdbIter := openPebble(), openPebble()
	pk := make([]byte, 0, 16)
	// pebble's own answer to DB.Get's per-call cost: one iterator kept open
	// and repositioned with SeekPrefixGE (valid here: nothing is written
	// while the rows read), what the engine's store does for its point
	// reads (storage/pointread.go).
	pit, err := pdbIter.NewIter(nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pit.Close() })
	rows := []*row{
		engine("kvbuf", DefaultReadTierBytes, false),
		engine("kvbuf-tier-no-filter", DefaultReadTierBytes, true),
		engine("kvbuf-no-tier", -1, false),
		{name: "pebble", get: func(k []byte) error {
			pk = append(append(pk[:0], 2, 0, 0, 0, 1), k...)
			v, c, err := pdb.Get(pk)
			if err == nil {
				sinkBytes = append(sinkBytes[:0], v...)
				err = c.Close()
			}
			return err
		}},
		{name: "pebble-iter", get: func(k []byte) error {
			pk = append(append(pk[:0], 2, 0, 0, 0, 1), k...)
			if !pit.SeekPrefixGE(pk) || !bytes.Equal(pit.Key(), pk) {
				return fmt.Errorf("key %x not found: %w", k, pit.Error())
			}
			v, err := pit.ValueAndErr()
			sinkBytes = append(sinkBytes[:0], v...)
			return err
		}},
	}
	rng := rand.New(rand.NewPCG(8, 9))
	pool := keys[:n]
	if hot {
		pool = slices.Clone(pool)
		slices.SortFunc(pool, func(a, b []byte) int { return slices.Compare(a, b) })
		pool = pool[n/2 : n/2+1<<14]
	}
	batch := make([][]byte, reads)
	i := 0
	for b.Loop() {
		for j := range batch {
			batch[j] = pool[rng.IntN(len(pool))]
		}
		for r := range rows {
			row := rows[(r+i)%len(rows)]
			t0 := time.Now()
			for _, k := range batch {
				if err := row.get(k); err != nil {
					b.Fatalf("%s: %v", row.name, err)
				}
			}
			d := time.Since(t0)
			row.t += d
			row.rounds = append(row.rounds, d)
		}
		i++
	}
	gets := float64(i) * reads
	for _, r := range rows {
		b.ReportMetric(float64(r.t.Nanoseconds())/gets, r.name+"-ns/get")
	}
	// Each kvbuf row over pebble: the median of the per-op ratios (both
	// timed on the same 1000 keys in the same op) and their spread, over
	// ops grouped by 100 (a single op's 1000 reads are too few to say
	// much on a busy machine).
	peb, pebIter := rows[len(rows)-2], rows[len(rows)-1]
	ratio := func(r, base *row, name string) {
		var ratios []float64
		for j := 0; j < len(r.rounds); j += 100 {
			e := min(j+100, len(r.rounds))
			var num, den time.Duration
			for q := j; q < e; q++ {
				num += r.rounds[q]
				den += base.rounds[q]
			}
			ratios = append(ratios, float64(num)/float64(den))
		}
		slices.Sort(ratios)
		b.ReportMetric(ratios[len(ratios)/2], name+"-median")
		b.ReportMetric(ratios[0], name+"-min")
		b.ReportMetric(ratios[len(ratios)-1], name+"-max")
	}
	for _, r := range rows[:len(rows)-2] {
		ratio(r, peb, r.name+"/pebble")
	}
	ratio(rows[0], pebIter, "kvbuf/pebble-iter")
	ratio(pebIter, peb, "pebble-iter/pebble")
	b.ReportMetric(float64(rows[0].t)/float64(peb.t), "kvbuf/pebble")
}

// BenchmarkSustainedWrites writes as fast as it can (Batches of 64 puts of
// 100-byte values to random keys of a space of 1M, op 0, the flusher working
// on its own: interval and size triggers) for KVBUF_SUSTAIN (default 3s) per
// configuration and op, the configurations in rotating order, each on an
// engine kept open across ops (and its store's compactions waited out after
// each op), while one reader Gets random keys and a sampler reads the
// store's LSM shape every 10ms. It reports, per configuration: writes/s; the
// store's L0 files, L0 sublevels and read amplification (mean and max of the
// samples); per op the generations frozen, the store's ingestions (and the
// mean size of an ingested table), flushable ingests, memtable flushes,
// compactions and the megabytes they wrote, and the ingestions that waited
// for L0; bytes written per byte of user data; read p50/p99; the stall time
// per write; and the process's CPU per write over the op (its end-of-op
// Flush included, the settling compactions not). Configurations: ingest (the
// defaults); pebble, pebble alone at the same write rate's shape (the
// store's options with a memtable of kvbuf's pending budget, 64 MiB;
// unsynced batches and a synced log every second, kvbuf's default loss
// window); batch-path (IngestThreshold -1: every generation through the
// WAL); the store set-ups tried for a buffer in front of pebble
// (doc/design.md, "The store under a buffer"): ingest-l0c2 an L0 compaction
// threshold of 2 (compaction from one sublevel; the engine's, pebble's, is
// 4), ingest-l0c8 one of 8, ingest-mem64m a 64 MiB memtable, ingest-compact2
// two concurrent compactions (pebble's default of one more per 10
// sublevels); and the designs tried for L0 under this load (doc/design.md,
// "L0 under a sustained write load"): ingest-nol0wait ingestions that do not
// wait for the store's L0 (storage.Store.WaitL0; the engine's default waits
// at 12 sublevels), ingest-stop8 ingestions that wait at 8, ingest-cc2 and
// ingest-cc3 up to two and three concurrent compactions, one more per two L0
// sublevels (storage.Options.L0CompactionConcurrency; pebble's default of 10
// sublevels per extra compaction leaves a second one idle), ingest-fb56m
// generations frozen at 56 MiB of the 64 MiB pending budget instead of 32
// (fewer, larger ingestions), and ingest-pend128m a pending budget of 128
// MiB (generations twice as large, for twice the memory).
// KVBUF_SUSTAIN_ROWS, a comma-separated list of row names, runs only those.
func BenchmarkSustainedWrites(b *testing.B) {
	d := 3 * time.Second
	if v, err := time.ParseDuration(getenv("KVBUF_SUSTAIN")); err == nil && v > 0 {
		d = v
	}
	store := func(cc, l0cc int) *storage.Options {
		return &storage.Options{L0CompactionThreshold: storeL0CompactionThreshold,
			L0StopWritesThreshold: storeL0StopWritesThreshold, MaxConcurrentCompactions: cc, L0CompactionConcurrency: l0cc}
	}
	type config struct {
		name   string
		opts   Options
		pebble bool
	}
	stop8 := store(0, 0)
	stop8.L0StopWritesThreshold = 8
	configs := []config{
		{name: "ingest"},
		{name: "pebble", pebble: true},
		{name: "batch-path", opts: Options{IngestThreshold: -1}},
		{name: "ingest-l0c2", opts: Options{storeTune: &storage.Options{L0CompactionThreshold: 2}}},
		{name: "ingest-l0c8", opts: Options{storeTune: &storage.Options{L0CompactionThreshold: 8}}},
		{name: "ingest-mem64m", opts: Options{storeTune: &storage.Options{L0CompactionThreshold: storeL0CompactionThreshold, MemTableSize: 64 << 20}}},
		{name: "ingest-compact2", opts: Options{storeTune: store(2, 0)}},
		{name: "ingest-nol0wait", opts: Options{noL0Wait: true}},
		{name: "ingest-stop8", opts: Options{storeTune: stop8}},
		{name: "ingest-cc2", opts: Options{storeTune: store(2, 2)}},
		{name: "ingest-cc3", opts: Options{storeTune: store(3, 2)}},
		{name: "ingest-fb56m", opts: Options{flushBytes: 56 << 20}},
		{name: "ingest-pend128m", opts: Options{MaxPendingBytes: 128 << 20}},
	}
	if only := getenv("KVBUF_SUSTAIN_ROWS"); only != "" {
		configs = slices.DeleteFunc(configs, func(c config) bool {
			return !slices.Contains(strings.Split(only, ","), c.name)
		})
	}
	type stats struct {
		writes                  int64
		el, cpu                 time.Duration
		l0Sum, slSum, raSum, n  int64
		l0Max, slMax, raMax     int64
		gens, flushes, compacts int64
		waits                   int64
		ingests, flushable      uint64
		ingested, compacted     uint64
		bytes, user             uint64
		stall                   time.Duration
		lat                     []time.Duration
	}
	// engine is one configuration's store under test: kvbuf or pebble.
	type engine struct {
		apply func(keys [][]byte, val []byte) error
		get   func(buf, k []byte) []byte
		sync  func() error // the end of an op: everything written durable
		lsm   func() (storage.LSMStats, error)
		gens  func() int64
		waits func() int64 // ingestions that waited for L0
		stall func() time.Duration
		bg    func(stop <-chan struct{}) // background work during an op
	}
	engines := make([]engine, len(configs))
	st := make([]stats, len(configs))
	pebbleKey := func(k []byte) []byte { return append([]byte{2, 0, 0, 0, 1}, k...) }
	for i, c := range configs {
		if c.pebble {
			// The default engine's memory: its pending budget as the
			// memtable, its cache plus its read tier as the block cache.
			eo := (&Options{}).EnsureDefaults()
			pdb, err := pebble.Open(b.TempDir(), storage.PebbleOptions(&storage.Options{MemTableSize: uint64(eo.MaxPendingBytes),
				CacheSize:             eo.CacheSize + max(eo.ReadTierBytes, 0),
				L0CompactionThreshold: storeL0CompactionThreshold, L0StopWritesThreshold: storeL0StopWritesThreshold}))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = pdb.Close() })
			syncLog := func() error { return pdb.LogData(nil, pebble.Sync) }
			engines[i] = engine{
				apply: func(keys [][]byte, val []byte) error {
					bt := pdb.NewBatch()
					for _, k := range keys {
						if err := bt.Set(pebbleKey(k), val, nil); err != nil {
							return err
						}
					}
					return bt.Commit(pebble.NoSync)
				},
				get: func(buf, k []byte) []byte {
					v, cl, err := pdb.Get(pebbleKey(k))
					if err == nil {
						buf = append(buf, v...)
						_ = cl.Close()
					}
					return buf
				},
				sync:  syncLog,
				lsm:   pebbleLSM(pdb),
				gens:  func() int64 { return 0 },
				waits: func() int64 { return 0 },
				stall: func() time.Duration { return 0 },
				bg: func(stop <-chan struct{}) { // a synced log every second
					t := time.NewTicker(time.Second)
					defer t.Stop()
					for {
						select {
						case <-stop:
							return
						case <-t.C:
							_ = syncLog()
						}
					}
				},
			}
			continue
		}
		o := c.opts
		db, err := Open(b.TempDir(), &o)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		kv, err := db.KV("w")
		if err != nil {
			b.Fatal(err)
		}
		bt := db.NewBatch()
		engines[i] = engine{
			apply: func(keys [][]byte, val []byte) error {
				bt.Reset()
				for _, k := range keys {
					bt.Put(kv, k, val)
				}
				return db.Apply(ctx, bt, 0)
			},
			get: func(buf, k []byte) []byte {
				buf, _ = kv.GetAppend(buf, k)
				return buf
			},
			sync:  func() error { return db.Flush(ctx) },
			lsm:   db.store.LSM,
			gens:  func() int64 { return db.Metrics().Generations },
			waits: func() int64 { return db.Metrics().StoreL0Waits },
			stall: func() time.Duration { return db.Metrics().StallTime },
			bg:    func(<-chan struct{}) {},
		}
	}
	const space = 1 << 20
	val := make([]byte, 100)
	keys := make([][]byte, 64)
	for j := range keys {
		keys[j] = make([]byte, 8)
	}
	round := 0
	for b.Loop() {
		for j := range configs {
			i := (j + round) % len(configs)
			e, s := &engines[i], &st[i]
			before, _ := e.lsm()
			g0, w0, stall0, cpu0 := e.gens(), e.waits(), e.stall(), processCPU()
			stop := make(chan struct{})
			done := make(chan struct{}, 3)
			go func() { // reader
				rng := rand.New(rand.NewPCG(uint64(round), 1))
				var buf []byte
				k := make([]byte, 8)
				for {
					select {
					case <-stop:
						done <- struct{}{}
						return
					default:
					}
					binary.BigEndian.PutUint64(k, rng.Uint64N(space))
					t0 := time.Now()
					buf = e.get(buf[:0], k)
					s.lat = append(s.lat, time.Since(t0))
				}
			}()
			go func() { // sampler
				t := time.NewTicker(10 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-stop:
						done <- struct{}{}
						return
					case <-t.C:
					}
					m, err := e.lsm()
					if err != nil {
						continue
					}
					ra := int64(m.ReadAmp)
					sl := int64(m.L0Sublevels)
					s.l0Sum += m.L0Files
					s.slSum += sl
					s.raSum += ra
					s.n++
					s.l0Max = max(s.l0Max, m.L0Files)
					s.slMax = max(s.slMax, sl)
					s.raMax = max(s.raMax, ra)
				}
			}()
			go func() {
				e.bg(stop)
				done <- struct{}{}
			}()
			rng := rand.New(rand.NewPCG(uint64(round), 2))
			t0 := time.Now()
			for time.Since(t0) < d {
				for _, k := range keys {
					binary.BigEndian.PutUint64(k, rng.Uint64N(space))
				}
				binary.BigEndian.PutUint64(val, rng.Uint64())
				if err := e.apply(keys, val); err != nil {
					b.Fatal(err)
				}
				s.writes += 64
				s.user += 64 * (8 + 100)
			}
			if err := e.sync(); err != nil {
				b.Fatal(err)
			}
			s.el += time.Since(t0)
			s.cpu += processCPU() - cpu0
			close(stop)
			<-done
			<-done
			<-done
			after, _ := e.lsm()
			s.gens += e.gens() - g0
			s.waits += e.waits() - w0
			s.flushes += after.Flushes - before.Flushes
			s.compacts += after.Compactions - before.Compactions
			s.ingests += after.Ingests - before.Ingests
			s.flushable += after.FlushableIngests - before.FlushableIngests
			s.ingested += after.IngestedBytes - before.IngestedBytes
			s.compacted += after.CompactedBytes - before.CompactedBytes
			s.bytes += after.BytesWritten - before.BytesWritten
			s.stall += e.stall() - stall0
			settle(e.lsm)
		}
		round++
	}
	for i, c := range configs {
		s := &st[i]
		slices.Sort(s.lat)
		q := func(f float64) float64 {
			if len(s.lat) == 0 {
				return 0
			}
			return float64(s.lat[int(f*float64(len(s.lat)-1))].Microseconds())
		}
		p := c.name + "-"
		n, r := float64(max(s.n, 1)), float64(round)
		b.ReportMetric(float64(s.writes)/s.el.Seconds(), p+"writes/s")
		b.ReportMetric(float64(s.l0Sum)/n, p+"l0-files-mean")
		b.ReportMetric(float64(s.l0Max), p+"l0-files-max")
		b.ReportMetric(float64(s.slSum)/n, p+"l0-sublevels-mean")
		b.ReportMetric(float64(s.slMax), p+"l0-sublevels-max")
		b.ReportMetric(float64(s.raSum)/n, p+"read-amp-mean")
		b.ReportMetric(float64(s.raMax), p+"read-amp-max")
		b.ReportMetric(float64(s.gens)/r, p+"gens/op")
		b.ReportMetric(float64(s.ingests)/r, p+"ingests/op")
		b.ReportMetric(float64(s.waits)/r, p+"l0-waits/op")
		b.ReportMetric(float64(s.ingested)/float64(max(s.ingests, 1))/(1<<20), p+"MB/ingest")
		b.ReportMetric(float64(s.flushable)/r, p+"flushable-ingests/op")
		b.ReportMetric(float64(s.flushes)/r, p+"memtable-flushes/op")
		b.ReportMetric(float64(s.compacts)/r, p+"compactions/op")
		b.ReportMetric(float64(s.compacted)/r/(1<<20), p+"compacted-MB/op")
		b.ReportMetric(float64(s.bytes)/float64(s.user), p+"wamp")
		b.ReportMetric(q(0.5), p+"read-p50-us")
		b.ReportMetric(q(0.99), p+"read-p99-us")
		b.ReportMetric(float64(s.stall.Nanoseconds())/float64(s.writes), p+"stall-ns/write")
		b.ReportMetric(float64(s.cpu.Nanoseconds())/float64(s.writes), p+"cpu-ns/write")
	}
}

func getenv(k string) string { return os.Getenv(k) }

// w6Write writes W6's keys with value val through the engine: one Put
// each, or (batch) Batches of 1,000 applied with DB.Apply.
func w6Write(ctx context.Context, db *DB, kv *KV, keys [][]byte, val []byte, batch bool) error {
	if !batch {
		for _, k := range keys {
			if err := kv.Put(ctx, k, val, 0); err != nil {
				return err
			}
		}
		return nil
	}
	bt := db.NewBatch()
	for i, k := range keys {
		bt.Put(kv, k, val)
		if i%1000 == 999 || i == len(keys)-1 {
			if err := db.Apply(ctx, bt, 0); err != nil {
				return err
			}
			bt.Reset()
		}
	}
	return nil
}

// w6Pebble opens W6's pebble baseline (the store's options, a memtable of
// W6's pending budget), closed at the end of b.
func w6Pebble(b *testing.B) *pebble.DB {
	db, err := pebble.Open(b.TempDir(), storage.PebbleOptions(&storage.Options{MemTableSize: w6Pending}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	return db
}

// w6PebbleBatch writes keys in the given order with value val as one
// synced pebble batch.
func w6PebbleBatch(db *pebble.DB, order [][]byte, val []byte) error {
	bt := db.NewBatch()
	defer func() { _ = bt.Close() }()
	for _, k := range order {
		if err := bt.Set(k, val, nil); err != nil {
			return err
		}
	}
	return bt.Commit(pebble.Sync)
}

// w6Arrival returns W6's keys in arrival order as the engine stores them in
// pebble (its keyspace prefix first), for the pebble rows.
func w6Arrival(keys [][]byte) [][]byte {
	arrival := make([][]byte, len(keys))
	for i, k := range keys {
		arrival[i] = append([]byte{2, 0, 0, 0, 1}, k...)
	}
	return arrival
}
