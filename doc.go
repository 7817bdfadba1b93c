// Package kvbuf is an embedded storage engine that puts a pending-changes
// buffer in front of durable storage: mmap-backed bit vectors (package
// bitslice) and a pebble-backed key-value store (package storage).
//
// A host database embeds one engine per shard or segment. Hot writes cost a
// hash-table insert instead of a disk write, reads see those writes at once,
// and a background flusher (package flush) moves them to disk in coalesced,
// synced batches, with an op-number watermark that tells the host where to
// replay its own log from after a crash.
//
// An engine (DB) holds named keyspaces (KV: ordered byte keys and values)
// and named bitslices (Bits: bit vectors), all flushed together under one
// watermark. Writes go one call at a time or in a Batch (one op, applied
// together); Snapshot reads every keyspace and bitslice as of one instant.
//
// # Contracts
//
//  1. Read-your-writes: after a write returns, every read from any goroutine
//     sees it (or a later value), before, during and after any flush.
//  2. Flush coverage: Flush returns nil only once every write that completed
//     before the call is durable; concurrent callers share physical flushes.
//  3. Nothing lost: a failed flush keeps every pending change readable and is
//     retried; writes that arrive during a flush belong to a later one.
//  4. Watermark as receipt: the persisted watermark is written after the data
//     it covers and covers only whole ops, so after a crash the host replays
//     its log from Watermark()+1 and never misses half an op.
//  5. Orderly shutdown: Close refuses new writes, drains in-flight ones, runs
//     a final flush and closes storage; no goroutine outlives it.
//  6. Bad input is an error, never a crash: corrupt files, bad indexes and
//     names, oversize keys and locked directories return typed errors that
//     work with errors.Is.
//
// # Ops and the watermark
//
// Every write carries the host's op number (0 if the host does not track
// them). A Batch applied with DB.Apply is one whole op. Single calls
// (KV.Put, Bits.Set, ...) may make up an op over several calls: the engine
// counts op n as complete once a write of a later op has been admitted, or
// once the host calls DB.EndOp(n). A flush persists, as the watermark, the
// highest op it knows to be complete; a write whose op number is at or below
// that claim and above the persisted watermark is refused with ErrStaleOp
// (a host bug: the op was already complete), so the watermark never covers
// a write that was not flushed. A host that finishes op n before starting
// op n+1 (as a log-replaying host does) never sees ErrStaleOp.
//
// Redelivered ops are no-ops: a write, a Batch applied with DB.Apply, or
// DB.EndOp whose op is at or below the persisted watermark (DB.Watermark)
// returns nil, changes nothing and is counted in Metrics.Redelivered,
// because every write of that op is durable already. A host need not
// filter what its log replays, and a raft host that restarts with
// Applied = min(Watermark(), HardState.Commit) may apply the entries raft
// redelivers as they come, as etcd skips entries at or below its
// consistent index.
//
// DB.WatermarkNotify and DB.WaitWatermark tell the host when the watermark
// advances, without polling: it may then truncate its log up to it (raft
// log compaction), never further. The watermark never goes backwards, and
// an engine reopens at the last one persisted.
//
// # Reads and Close
//
// Reads take no lock and enter no gate: they read, then check whether Close
// has begun. A read that starts after Close began returns ErrClosed; one
// that overlaps Close returns the right value or ErrClosed, never torn data.
//
// See DB for the caveats.
package kvbuf
