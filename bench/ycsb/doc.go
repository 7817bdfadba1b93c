// Package ycsb holds go-ycsb bindings for kvbuf and for the engines a user
// would pick instead (pebble v2, badger v4, bbolt), a YCSB core-workload
// driver, and Bench, the comparison behind "kvtool ycsb".
//
// # Bindings
//
// DB implements go-ycsb's ycsb.DB and ycsb.BatchDB
// (github.com/pingcap/go-ycsb/pkg/ycsb; only go-ycsb's pkg/... packages are
// imported, so no database driver comes with them). Open returns one; the
// bindings are also registered in go-ycsb's registry (ycsb.GetDBCreator) as
// "kvbuf", "pebble", "badger4" and "bbolt", taking their directory from the
// property <engine>.dir, so a go-ycsb main that imports this package runs
// them. A record is one value in go-ycsb's row format (field index and
// bytes per field); Update reads the record, merges the new fields into it
// and writes it back, as go-ycsb's own bindings do.
//
//   - kvbuf: the public API only. A table is a keyspace; Read is
//     KV.GetAppend into the thread's buffer, BatchRead is KV.GetMany,
//     BatchInsert and BatchDelete are one Batch applied as one op, Scan is a
//     KV iterator. Writes carry op 0 (a host that does not track ops);
//     kvbuf.ops=true numbers them instead, assigning and admitting each op
//     in order under a lock, as a host replaying its log does.
//     kvbuf.host_log=true (implies kvbuf.ops) makes the binding a host with
//     its own log: every write op is first appended to an append-only file
//     beside the engine's directory (one write system call, the op's keys
//     and rows), which a goroutine syncs every FlushInterval, or every
//     kvbuf.host_log_interval if set (the window mode's loss window; with
//     kvbuf.flush_interval=-1s the log alone keeps it and kvbuf flushes
//     only when its pending budget fills).
//     kvbuf.flush_writes=true follows every write op with DB.Flush, so that
//     it is durable when it returns (concurrent threads share flushes).
//     Properties: kvbuf.flush_interval, kvbuf.max_pending_bytes,
//     kvbuf.cache_size, kvbuf.pool_bytes, kvbuf.pipeline_depth,
//     kvbuf.ingest_threshold, kvbuf.read_tier_bytes, kvbuf.flush_quantum,
//     kvbuf.flush_cpu_percent (Options' fields; unset: Options' defaults),
//     kvbuf.ops, kvbuf.host_log, kvbuf.flush_writes (false),
//     kvbuf.host_log_interval.
//   - pebble: pebble v2 opened with storage.PebbleOptions, as kvbuf's store
//     is (same format and Bloom filters), with pebble.cache_size (default
//     storage.DefaultCacheSize) and pebble.memtable_size (default the
//     store's). Writes use pebble.NoSync, plus a synced LogData every
//     pebble.sync_interval if set, or pebble.Sync with pebble.sync_writes.
//     A record's key is table ":" key.
//   - badger: badger v4 with its default options, SyncWrites off and no
//     logger (badger.sync_writes, badger.sync_interval: DB.Sync every
//     interval, badger.block_cache_size, badger.memtable_size,
//     badger.num_memtables). Writes are DB.Update transactions; an update
//     reads and writes in one transaction, retried on ErrConflict.
//   - bbolt: bbolt with its default options (bbolt.nosync: false), a
//     bucket per table. Writes use DB.Batch when the client runs more than
//     one thread and DB.Update with one (Batch would wait 10 ms per call for
//     companions).
//
// Every binding was checked against the same conformance test (insert,
// read with and without field lists, update merging fields, scan order and
// count, delete, missing keys, batches, concurrent threads, reopen).
//
// # What each engine promises on a crash
//
// Bench compares the engines in durability modes that make them promise
// the same thing (DurabilityWindow, DurabilityAcked), with the memory
// kvbuf has (pebble's and badger's memtables are kvbuf's MaxPendingBytes,
// their block caches its CacheSize plus its ReadTierBytes), and times every run until its writes
// are durable and through Close, so that what a run wrote is durable when
// its clock stops; between the two, off the clock, it settles the engine
// (memtables to sstables, flushes and compactions waited out), so that
// each run's disk figure counts its own background work only. Opened with Open
// and no such properties, the bindings promise different things:
//
//   - kvbuf: a write is in memory when it returns and durable after the
//     next flush (every FlushInterval, default 1 s; when pending memory
//     passes half of MaxPendingBytes; on Flush and Close). A crash loses the
//     writes since the last flush. The watermark (DB.Watermark) says which
//     ops are durable: a host that numbers its ops and logs them
//     (kvbuf.host_log) replays its own log from Watermark()+1 and loses no
//     more than its log's sync interval; with op 0 the lost writes are
//     simply gone.
//   - pebble with NoSync: a write is in the write-ahead log's memory buffer
//     when it returns; a background goroutine writes it to the log file soon
//     after, and nothing fsyncs it until a synced write, a LogData with
//     Sync (pebble.sync_interval) or a memtable flush. Recovery replays the
//     log, so what survives is a prefix of the writes.
//   - badger with SyncWrites off: a write is in the memory-mapped log when
//     it returns, which survives a process crash; a machine crash or power
//     loss may lose what was not yet synced (DB.Sync, badger.sync_interval;
//     badger also syncs when it rotates files).
//   - bbolt: every write transaction is fsynced before Update or Batch
//     returns; nothing acknowledged is lost, at the price of a sync per
//     transaction (per batch of concurrent calls with Batch). It has no
//     loss window to match, so it runs in DurabilityAcked only.
//
// # Driver
//
// Workload is YCSB's core workload configured from the usual properties;
// Load inserts the records, Run runs the operations, both on any go-ycsb
// DB with any number of threads, timing each operation into HDR histograms
// (github.com/HdrHistogram/hdrhistogram-go, as go-ycsb's measurement
// does). Bench loads every engine once per durability mode and runs each
// workload at each thread count in rounds that visit the engines in
// rotating order, reopening an engine for each run and timing it through
// its Close.
//
// # Caveats
//
//   - The maps and byte slices Read, BatchRead and Scan return are reused by
//     the thread's next call (see DB).
//   - Update is a read then a write on kvbuf and pebble, not atomic: two
//     threads updating one record at once may lose one's fields.
//   - Reads and scans during flushes (OpReadInFlush, OpScanInFlush) are
//     detected by sampling: pebble reports its memtable flushes through its
//     event listener, kvbuf's generation flushes are sampled from
//     DB.InFlight every millisecond (two atomic loads: Metrics, which reads
//     pebble's metrics too, cost kvbuf's side 3-8% of a core until
//     2026-12-07), and the flushes of kvbuf's own store are not seen.
//     badger and bbolt report none.
//   - The key chooser of a zipfian run covers the records a run may insert
//     and redraws keys not inserted yet (as Java YCSB; go-ycsb reads them).
package ycsb
