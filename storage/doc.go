// Package storage is kvbuf's durable key-value store: a thin layer over
// pebble (github.com/cockroachdb/pebble/v2) that adds what the buffer and
// the flusher need and pebble does not give directly. It is usable on its
// own, without the engine (as pebble's sstable and vfs are without a DB).
// Its errors are the module's sentinels, which only the root package
// exports: test them with errors.Is against kvbuf.ErrNotFound,
// kvbuf.ErrClosed and so on (see Errors).
//
//   - Keyspaces and namespaces. User keys live in numbered keyspaces
//     (KeyspaceID); named meta entries (SetMeta) and the flush watermark
//     live beside them in the same pebble keyspace, and none can collide
//     (see Key layout). Any byte string, including the empty string and keys
//     full of 0x00 or 0xff, is a valid user key here (the buffer above
//     rejects empty keys; this layer does not need to).
//   - Receipts. A Batch carries an optional watermark (the host's highest
//     durable op number), written in the same pebble batch as the data, so
//     after a crash the watermark is never ahead of the data (contract 4).
//     The watermark never goes backwards.
//   - Ordered group commits. Commit hands a batch to pebble (or, while an
//     earlier batch awaits its WAL sync, merges it into the next group) and
//     returns before the sync; Commit.Wait waits for it. The flusher builds
//     and commits generation N+1 while N's sync is in flight.
//   - Reads: Get, GetAppend, iterators in both directions (NewIter), and
//     snapshots (NewSnapshot) that keep reading the store as it was.
//   - Use after Close is an error, not a panic. pebble panics on use of a
//     closed DB, iterator or snapshot; every method here returns kvbuf.ErrClosed
//     instead, and calls racing with Close are safe.
//   - Typed errors: every error wraps one of the module's sentinels and
//     carries the directory or key involved, except kvbuf.ErrNotFound from
//     a user-key Get, returned bare so that a miss does not allocate (see
//     Errors).
//
// # Errors
//
// The package exports no error names. Every error it returns is, or wraps,
// one of the module's sentinels, exported by the root package
// github.com/kvbuf/kvbuf; test them with errors.Is against the root's
// names. Their texts start with "kvbuf: " once.
//
//   - kvbuf.ErrNotFound: Get, GetAppend and GetMeta (of a Store or a
//     Snapshot) for an absent key, returned bare from a user-key read.
//   - kvbuf.ErrClosed: every Store method after Store.Close, Snapshot
//     methods after Snapshot.Close or Store.Close, iterators and snapshots
//     that Store.Close closed, and an Ingest used after CommitIngest or
//     Abort.
//   - kvbuf.ErrLocked: Open, when another Store (in this process or
//     another) has the directory open.
//   - kvbuf.ErrCorruptBlock (which matches kvbuf.ErrCorrupt): Open and
//     reads when pebble reports corruption (pebble.ErrCorruption), and a
//     stored watermark that does not parse.
//   - kvbuf.ErrBadOptions: Open and Options.Validate, for an option out of
//     range.
//   - kvbuf.ErrReadOnly: Commit, Apply, Flush, Checkpoint and CommitIngest
//     on a store opened with Options.ReadOnly.
//   - kvbuf.ErrInvalidKeyspace: keyspace ID 0, from Get, GetAppend and
//     NewIter directly, and from Commit and Apply for a batch that received
//     an operation on it (the operation was dropped; nothing of the batch
//     is applied).
//   - kvbuf.ErrBatchTooLarge: Commit and Apply, when an operation would
//     have grown the batch past pebble's 4 GiB batch limit (the operation
//     was dropped; nothing of the batch is applied).
//   - kvbuf.ErrForeignBatch: Commit, Apply and CommitIngest, for a batch or
//     ingest made by another Store.
//   - kvbuf.ErrSyncFailed: Commit.Wait when pebble failed to write or sync
//     the write-ahead log, and from then on every Commit, Apply and Flush:
//     pebble cannot write to a log that failed, so the store accepts no
//     more writes until it is closed and reopened. Reads still work. The
//     error wraps pebble's too.
//   - kvbuf.ErrBadRange: CommitIngest, for an Ingest built out of order
//     (see Ingest).
//   - kvbuf.ErrStaleOp: CommitIngest, for an Ingest whose watermark is
//     below one committed after it was built (watermarks only increase in
//     commit order).
//   - fs.ErrNotExist and fs.ErrExist: Open, for the ErrorIfNotExists,
//     ErrorIfExists and ReadOnly open modes.
//
// # Key layout
//
// Every pebble key starts with a tag byte naming its namespace:
//
//	[0x00]"wm"                              the watermark: 8 bytes, big-endian
//	[0x01][name]                            meta entry name (Batch.SetMeta)
//	[0x02][keyspace ID, 4 bytes big-endian][user key]
//
// Keys with different tags or keyspace IDs differ within their first five
// bytes, so no user key can read, overwrite or range-delete another
// keyspace's keys or an internal key. A keyspace's keys are contiguous and
// ordered by user key; the end of keyspace ks is the prefix of ks+1 (for
// the last ID, the one-byte key 0x03). This is the layout the engine used
// before keyspaces moved into this package (it prepended the ID, storage
// the tag), so existing directories read unchanged.
//
// # Commit ordering
//
// If a commit is durable, every earlier commit is. At most one pebble batch
// awaits its WAL sync at any time: Store.Commit applies a batch to pebble
// (ApplyNoSyncWait) only when nothing is in flight, and otherwise merges it
// into the pending group, which the syncer applies as one batch once the
// batch in flight is durable. Both happen under one mutex, from the
// watermark decision on, so the order of Commit calls is the order in which
// batches enter pebble's commit pipeline. Why never two: pebble learns of a
// failed WAL write only when it syncs, and a commit that reaches it after
// the failure may make it switch to a new WAL file, which panics with its
// mutex unlocked (a fatal error the process cannot recover from). Keeping
// one batch in flight means the failure is always known before the next
// batch is handed over, at the cost of applying the next group after the
// sync rather than during it (syncs still coalesce: everything that arrives
// during one sync goes into the next). pebble assigns
// sequence numbers and appends each batch to the WAL under its own commit
// mutex, in that order. The WAL is written sequentially (no WAL failover is
// configured) and a sync makes every byte written before it durable. pebble
// completes sync waiters in queue order and keeps the first write or sync
// error for every later one. When the memtable fills, pebble moves to a new
// WAL file under the same commit mutex, and closing the old file first
// syncs it and completes its waiters. So a commit is reported synced only
// when every earlier one is. After a crash pebble replays the WAL files in
// order and stops at the first damaged record of the last one, so recovery
// keeps a prefix of the commits, never a later one without an earlier.
//
// The store's syncer goroutine waits for each group's sync in commit order
// and records its result for every commit of the group; Commit.Wait
// returns it. A nil result therefore means the commit
// and all earlier ones are durable, and Wait raises the watermark to the
// highest watermark committed up to that commit (which it or an earlier
// commit carried). Whether a batch writes its watermark at all is decided
// against the highest watermark committed so far, under the same mutex,
// so watermarks in the WAL only increase, even when several commits are in
// flight.
//
// # Caveats
//
//   - Reads see a commit once its group is applied to pebble: when Commit
//     returns if nothing was in flight, else once the group before it is
//     durable. A crash can lose a commit that was read before its sync
//     completed.
//   - Store.Watermark is the persisted watermark as known through Wait: it
//     advances only when a Wait returns nil, even if the sync finished
//     earlier. After reopening, the watermark of the last durable commit is
//     read back.
//   - Watermark monotonicity is enforced by this Store instance. Nothing
//     stops a caller from using raw pebble on the same directory to write a
//     lower one.
//   - A failed WAL write or sync (kvbuf.ErrSyncFailed) fails that commit and
//     every commit behind it, and the store refuses writes and Flush from
//     then on, because pebble's log cannot be written again (its commit
//     path panics, its WAL rotation panics). No commit reaches pebble after
//     the failed one (see Commit ordering). Other write failures are fatal
//     in pebble: a failed MANIFEST write or commit pipeline calls
//     Logger.Fatalf (the default logger keeps pebble's exit and only
//     silences informational and error messages), and failing to create a
//     new WAL file panics.
//   - Reads keep working after kvbuf.ErrSyncFailed; they may return data that is
//     not durable.
//   - A Batch is not safe for concurrent use. Committing batches from
//     several goroutines is safe; commits are serialised while they enter
//     pebble (not while they sync).
//   - Iterators and snapshots still open when the Store is closed are
//     closed by Close; their methods then report kvbuf.ErrClosed (or return
//     false). Slices returned by Iter.Key and Iter.Value are valid only
//     until the next positioning call, Iter.Close or Store.Close. An
//     iterator opened from a snapshot stays usable after Snapshot.Close.
//   - Metrics.EstimatedKeys counts sstable entries (all namespaces, counting
//     overwritten versions, minus deletion tombstones); it does not see the
//     memtable, nor what range deletions hide. Flush first for a better
//     estimate.
//   - A read-only open of an existing store still takes pebble's LOCK file
//     (creating it if it is missing), so it fails with kvbuf.ErrLocked while
//     another Store has the directory open. It never writes anything else.
//     A ReadOnly or ErrorIfNotExists open of a directory without a store
//     fails before taking the lock and leaves the directory as it was.
//   - Damage to the tail of the newest WAL looks like a torn write: pebble
//     drops the rest of that log at Open and reports no error. The watermark
//     travels in the same records, so it drops back with the data it covers
//     and the host replays its log from there (contract 4 still holds).
//     Damage pebble does detect (sstable checksums, MANIFEST, OPTIONS,
//     missing or truncated tables, unknown format version) gives kvbuf.ErrCorruptBlock.
//   - pebble's default reaction to a corrupt block is Logger.Fatalf (exit);
//     the store replaces that handler so the read returns kvbuf.ErrCorruptBlock
//     instead (PebbleOptions).
package storage
