// Package storage is kvbuf's durable key-value store: a thin layer over
// pebble (github.com/cockroachdb/pebble/v2) that adds what the buffer and
// the flusher need and pebble does not give directly.
//
//   - Separate key namespaces. User keys, named meta entries (SetMeta) and
//     the flush watermark live in one pebble keyspace but can never collide:
//     every stored key starts with one tag byte (0x00 system, 0x01 meta,
//     0x02 user). Iterators strip the tag. Any byte string, including the
//     empty string and keys full of 0x00 or 0xff, is a valid user key here
//     (the buffer above rejects empty keys; this layer does not need to).
//   - Receipts. A Batch carries an optional watermark (the host's highest
//     durable op number). Apply writes data and watermark in one synced
//     pebble batch, so after a crash the watermark is never ahead of the
//     data (contract 4). The persisted watermark never goes backwards.
//   - Use after Close is an error, not a panic. pebble panics on use of a
//     closed DB and on a second Close; every Store and Iter method here
//     returns ErrClosed instead, and calls racing with Close are safe.
//   - Typed errors: ErrNotFound, ErrClosed, ErrReadOnly, ErrLocked (the
//     directory is open elsewhere, in this process or another), ErrCorrupt
//     (pebble reported corruption), fs.ErrNotExist / fs.ErrExist for the
//     ErrorIfNotExists / ErrorIfExists / ReadOnly open modes. All work with
//     errors.Is and carry the directory or key involved.
//
// # Caveats
//
//   - Only what Apply commits is durable; it always syncs. There is no
//     unsynced write path.
//   - Watermark monotonicity is enforced by this Store instance: it remembers
//     the persisted value and never writes a lower one. Nothing stops a caller
//     from using raw pebble on the same directory to write a lower one.
//   - A Batch is not safe for concurrent use. Applying batches from several
//     goroutines is safe; batches carrying a watermark are committed one at a
//     time.
//   - Iterators still open when the Store is closed are closed by Close; their
//     methods then report ErrClosed (Error) and return false. Slices returned
//     by Iter.Key and Iter.Value are valid only until the next positioning
//     call, Iter.Close or Store.Close.
//   - Metrics.EstimatedKeys counts sstable entries (all namespaces, counting
//     overwritten versions, minus deletion tombstones); it does not see the
//     memtable. Flush first for a better estimate.
//   - A read-only open still takes pebble's LOCK file (creating it if it is
//     missing), so it fails with ErrLocked while another Store has the
//     directory open. It never writes anything else.
//   - Damage to the tail of the newest WAL looks like a torn write: pebble
//     drops the rest of that log at Open and reports no error. The watermark
//     travels in the same records, so it drops back with the data it covers
//     and the host replays its log from there (contract 4 still holds).
//     Damage pebble does detect (sstable checksums, MANIFEST, OPTIONS,
//     missing or truncated tables, unknown format version) gives ErrCorrupt.
//   - pebble's default reaction to a corrupt block is Logger.Fatalf (exit);
//     Store replaces that handler so the read returns ErrCorrupt instead.
//   - A fatal pebble error (its Logger.Fatalf: a failed WAL or MANIFEST
//     write) still terminates the process, as pebble assumes; the default
//     logger only silences informational and error messages.
package storage
