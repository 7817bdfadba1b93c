// Package kvbuf is an embedded storage engine that puts a pending-changes
// buffer in front of durable storage: mmap-backed bit vectors (package
// bitslice) and a pebble-backed key-value store (package storage).
//
// A host database embeds one engine per shard or segment. Hot writes cost a
// hash-table insert instead of a disk write, reads see those writes at once,
// and a background flusher (package flush) moves them to disk in coalesced,
// synced generations (a large one written straight into sstables and
// ingested, a small one as one write-ahead-log batch), with an op-number
// watermark that tells the host where to replay its own log from after a
// crash. The newest flushed generations stay readable in memory (the read
// tier, Options.ReadTierBytes) for reads of records flushed a moment ago.
//
// An engine (DB) holds named keyspaces (KV: ordered byte keys and values)
// and named bitslices (Bits: bit vectors), all flushed together under one
// watermark. Writes go one call at a time or in a Batch (one op, applied
// together: readers see all of its KV changes or none); Snapshot reads every
// keyspace and bitslice as of one instant.
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
//     work with errors.Is, whose text starts with "kvbuf: " once and names
//     the keyspace, bitslice or path involved (see the Errors in errors.go).
//  7. Nothing silently lost: every bitslice is recorded in the engine's
//     catalog with the engine's id, its length and the generation of its
//     last flush, so that a missing, older or foreign bitslice file fails
//     Open with ErrCorruptDir (which matches ErrCorrupt); only DB.Bits
//     creates a bitslice. A directory with the engine's store/ and bits/ but
//     a damaged or missing manifest is ErrCorruptDir too, not ErrNotEngine.
//
// # Ops and the watermark
//
// Every write carries the host's op number (0 if the host does not track
// them; at most MaxOp). The watermark a flush persists is the contiguous
// prefix of complete ops: the highest n such that every op <= n has ended.
// After a crash the host replays its log from Watermark()+1.
//
// An op is begun, written and ended. A host that finishes op n before it
// starts op n+1 (as a log-replaying host does) needs no extra call: the
// first write of an op above every op begun begins it, and it ends when a
// later op begins (or DB.EndOp ends it, so that the watermark covers the
// last op without waiting for the next). A Batch applied with DB.Apply is
// one whole op, begun and ended in one call; an empty Batch records an op
// that has no writes. A host with concurrent writers numbers its ops under
// its log's lock and calls DB.BeginOp there, in log order; each writer
// then writes its op (single calls or a Batch) and ends it with EndOp, in
// any order, as Kafka's high watermark or a closed timestamp advance. An op
// begun and not ended is open: every write of it is admitted, and no
// watermark reaches it however many later ops end.
//
// Numbers a host skips (a log that feeds several engines) are complete as
// soon as a later op begins. A write of a complete op above the persisted
// watermark is a host bug (a late write of an op already ended, or of an
// implicitly begun op after a later one began): it is refused with
// ErrStaleOp, so the watermark never covers a write that was not flushed.
// EndOp of an op above every op seen, BeginOp out of order and ops above
// MaxOp are ErrBadOp.
//
// Redelivered ops are no-ops: a write, a Batch, BeginOp or EndOp whose op is
// at or below the persisted watermark (DB.Watermark) returns nil, changes
// nothing and is counted in Metrics.Redelivered, because every write of
// that op is durable already. A host need not filter what its log replays,
// and a raft host that restarts with Applied = min(Watermark(),
// HardState.Commit) may apply the entries raft redelivers as they come, as
// etcd skips entries at or below its consistent index.
//
// Log before data: a host that group-commits its own log acknowledges op n
// only once its log is durable, while an interval or size-triggered flush
// may be ready to persist watermark n earlier. With Options.LogBeforeData
// the host reports its durable log position with DB.LogDurable and no
// watermark above it is ever persisted.
//
// DB.WatermarkNotify and DB.WaitWatermark tell the host when the watermark
// advances, without polling: it may then truncate its log up to it (raft
// log compaction), never further. The watermark never goes backwards, and
// an engine reopens at the last one persisted. Snapshot.Op is the op a
// snapshot reflects (every op at or below it is wholly in it), and
// Metrics.HighestOp, CompletedOp, OpenOps and ReceiptLag follow the ops in
// every mode.
//
// # Memory budget
//
// Each engine bounds its own pending memory (Options.MaxPendingBytes); a
// host with many engines in one process shares one MemoryBudget among them
// (Options.MemoryBudget) so that their pending bytes together stay under
// one size. Past the budget's high mark (90% by default, as RocksDB's
// WriteBufferManager) it flushes the engines with the oldest pending
// changes first (BudgetOptions.Policy; or the largest), in the background. Past half the high
// mark, writes of every engine go in rounds, one write per waiting writer
// and at most 64 a round, so no engine starves; at its size they wait,
// with their context. The total passes the size by at most the writes of
// one round and the table growth they cause (a growth step of each engine
// a write of the round grows).
// A write waiting for the budget returns ctx.Err() as it is, or ErrClosed
// if its engine closes. Closing an engine releases its share; close the
// budget after its engines. See doc/design.md, "Memory budget".
//
// # Change feed
//
// DB.Watch subscribes to the engine's changes, for secondary indexes,
// caches and replicas downstream: a watch chooses keyspaces (each with a
// key prefix) and bitslices, and a start (now, or an op), and Watch.Next
// (or NextMany, or NextEvents, which lends a batch's changes without
// building an event for each) returns every change of every op from the
// start on, in op order, each with its op, and resolved marks: a mark N
// says every change of every op up to N has been delivered. In visible mode changes come once readers
// see them (within a few milliseconds of their op's end); in durable mode
// once they are durable, each mark carrying the persisted watermark that
// covers it. The engine holds changes in a bounded buffer
// (Options.WatchBufferBytes): a watch that falls behind it ends with
// ErrLagged, and a watch from an op the buffer no longer holds fails with
// ErrCompacted; both match ErrResync. A subscriber resyncs with a Snapshot
// and a watch from its Op()+1: that pair never skips or repeats a change.
// Without retention changes are held in memory only: a watch resumes across
// a restart of the subscriber, from its last mark + 1, only while the
// engine stays open. With Options.WatchRetain the engine also keeps the
// changes (of every keyspace and bitslice, or of those named) in its store,
// written in the same flush as the data and the watermark they belong to,
// and trimmed by bytes (WatchRetention.MaxBytes, 64 MiB by default) or by
// ops (MaxOps): a watch from any retained op, after a restart or a crash of
// either side, gets exactly the changes of the durable ops after it, then
// the live feed; a start below the oldest op retained is ErrCompacted.
// "kvtool watch DIR" prints an engine's retained changes.
//
// # Backups
//
// DB.Checkpoint writes a consistent copy of the engine (pebble's checkpoint
// of the store and the bitslices as of the same instant) into a directory
// that opens as an engine of its own, with its own watermark and engine id.
// Snapshot.Op ties a snapshot to the host's log without a host lock.
//
// # Reads and Close
//
// Reads take no lock and enter no gate: they read, then check whether Close
// has begun. A read that starts after Close began returns ErrClosed; one
// that overlaps Close returns the right value or ErrClosed, never torn data.
// An iterator's positioning call is such a read: an iterator racing Close
// yields keys that are in the data, or stops with ErrClosed (not valid,
// the error carried), and a key and value it returned stay readable until
// its next positioning call, whatever Close does meanwhile.
//
// See DB for the caveats.
package kvbuf
