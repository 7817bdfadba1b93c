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
//     in order under a lock, as a host replaying its log does. Properties:
//     kvbuf.flush_interval, kvbuf.max_pending_bytes, kvbuf.cache_size,
//     kvbuf.pool_bytes, kvbuf.pipeline_depth, kvbuf.ingest_threshold,
//     kvbuf.read_tier_bytes, kvbuf.flush_quantum, kvbuf.flush_cpu_percent
//     (Options' fields; unset: Options' defaults), kvbuf.ops (false).
//   - pebble: pebble v2 opened with storage.PebbleOptions, as kvbuf's store
//     is (same format, memtable size and block cache; pebble.cache_size, by
//     default storage.DefaultCacheSize), every write with pebble.NoSync. A
//     record's key is table ":" key.
//   - badger: badger v4 with its default options, SyncWrites off and no
//     logger (badger.sync_writes, badger.block_cache_size). Writes are
//     DB.Update transactions; an update reads and writes in one transaction,
//     retried on ErrConflict.
//   - bbolt: bbolt with its default options (bbolt.nosync: false), a
//     bucket per table. Writes use DB.Batch when the client runs more than
//     one thread and DB.Update with one (Batch would wait 10 ms per call for
//     companions).
//
// Every binding was checked against the same conformance test (insert,
// read with and without field lists, update merging fields, scan order and
// count, delete, missing keys, batches, concurrent threads, reopen).
//
// # What each engine promises on a crash, as configured here
//
// YCSB compares throughput; these settings do not make the same promise, so
// read the figures with them:
//
//   - kvbuf: a write is in memory when it returns and durable after the
//     next flush (every FlushInterval, default 1 s; when pending memory
//     passes half of MaxPendingBytes; on Flush and Close). A crash loses the
//     writes since the last flush. The watermark (DB.Watermark) says which
//     ops are durable: a host that numbers its ops (kvbuf.ops=true) replays
//     its own log from Watermark()+1 and loses nothing; with op 0, as in
//     these runs by default, the lost writes are simply gone.
//   - pebble with NoSync: a write is in the write-ahead log's memory buffer
//     when it returns; a background goroutine writes it to the log file soon
//     after, and nothing fsyncs it until a synced write or a memtable flush.
//     A process crash may lose the last writes not yet written out; a
//     machine crash or power loss those not yet synced. Recovery replays the
//     log, so what survives is a prefix of the writes.
//   - badger with SyncWrites off: a write is in the memory-mapped log when
//     it returns, which survives a process crash; a machine crash or power
//     loss may lose what was not yet synced (badger syncs when it rotates
//     its memtable and value-log files).
//   - bbolt: every write transaction is fsynced before Update or Batch
//     returns; nothing acknowledged is lost, at the price of a sync per
//     transaction (per batch of concurrent calls with Batch).
//
// # Driver
//
// Workload is YCSB's core workload configured from the usual properties;
// Load inserts the records, Run runs the operations, both on any go-ycsb
// DB with any number of threads, timing each operation into HDR histograms
// (github.com/HdrHistogram/hdrhistogram-go, as go-ycsb's measurement
// does). Bench loads every engine once and runs each workload at each
// thread count in rounds that visit the engines in rotating order,
// reopening an engine for each run.
//
// # Caveats
//
//   - The maps and byte slices Read, BatchRead and Scan return are reused by
//     the thread's next call (see DB).
//   - Update is a read then a write on kvbuf and pebble, not atomic: two
//     threads updating one record at once may lose one's fields.
//   - Reads during flushes (OpReadInFlush) are detected by sampling: pebble
//     reports its memtable flushes through its event listener, kvbuf's
//     generation flushes are sampled from Metrics every millisecond, and the
//     flushes of kvbuf's own store are not seen. badger and bbolt report
//     none.
//   - The key chooser of a zipfian run covers the records a run may insert
//     and redraws keys not inserted yet (as Java YCSB; go-ycsb reads them).
package ycsb
