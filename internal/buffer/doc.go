// Package buffer holds pending changes in memory in front of durable
// storage: a key-value overlay per keyspace of a storage.Store (KV) and a bit
// overlay per bitslice.File (Bits). Writes land in an overlay and are visible
// to reads at once; a flusher moves them to storage generation by
// generation: Freeze seals the pending changes into a generation, the
// generation is written (KVGen.AddTo into a store batch, BitsGen.Write into
// the file), and Release drops it once durable. Snapshot gives reads as of
// one instant.
//
// The package is internal: the engine (package kvbuf) is its one importer,
// and its API changes with the engine's needs.
//
// # Views
//
// Each overlay publishes one immutable view — the active table, which takes
// writes, and the sealed tables, newest first — through one atomic pointer.
// A read loads the view, probes its tables newest first and falls through
// to storage; it re-loads the view afterwards and retries if it changed,
// because a table released by a flush may be cleared and reused (pooled)
// under the read. Release publishes the view without the table before it
// clears it, so a read that still sees the same view finished its probes
// first. Iterators and snapshots pin the tables they read, and a pinned table
// is never reused. A KV read also loads the visible sequence number, before
// the view (Get, Has), after it (GetMany) or after pinning the view's
// tables (iterators, snapshots): see KV.
//
// # Shared words
//
// Every word a lock-free reader may load while a writer stores it is read
// and written with sync/atomic in every build, so that `go test -race`
// checks the loads and stores users run. A word is stored plainly only
// where no reader can load it before an atomic store that is ordered after
// the plain one: a new key's words in a slot array never cleared (its
// control byte publishes them), a version record (the reference to it),
// a grown array (the array pointer). protocol.go numbers every publication
// order, the ones that cross packages included; the code that keeps each
// one cites its number.
//
// # Protocol
//
// Writes must not run concurrently with Freeze, Snapshot or Bits.Settle;
// the engine admits writes under the shared side of a write barrier and
// calls those with the barrier held exclusively. Generations are written and
// released in order. A generation whose write failed stays readable and is
// written again by a later attempt: writing is idempotent.
//
// Why the buffered-wrapper bugs of similar systems cannot happen here:
//
//   - Stale read between capturing a flusher and running it: nothing leaves
//     the readable state until Release, which runs only after the generation
//     is durable.
//   - Updates lost when a flush fails or never runs: Release runs only after
//     a successful write; a failed generation stays in the view and is
//     written again.
//   - A stale flusher of a dropped instance corrupting a new one: overlays
//     hold no shared registry or path-keyed state; their tables and files
//     belong to them, and a closed file or store rejects writes.
//   - A delete captured before a re-put deleting the new value: nothing
//     reconciles entries against a snapshot. A re-put after Freeze goes to a
//     newer table, which readers consult first and Release never touches.
//   - A cancelled flush leaving one component durably ahead of the receipt:
//     the engine writes bitslices before the store batch that carries the
//     watermark, and generations commit in order.
//
// # Errors
//
// The package returns the module's sentinels (package kvbuf exports them:
// errors.Is(err, kvbuf.ErrDropped)); it exports none of its own, since the
// engine is its only importer.
//
// # Caveats
//
//   - A pending KV table never shrinks (only a retained one's slot arrays
//     do, once, if they were sized for many more keys: tier rule T6, in
//     kv_tier.go). An overwrite of a value of up to 32 bytes
//     rewrites the key's older record in place while no iterator pins the
//     table (a key written again and again holds two records); while one
//     does, and for longer values, every overwrite adds a record until the
//     table is flushed and released (PendingBytes counts them). A snapshot
//     pins only tables it sealed, which take no more writes.
//   - A KV table's key order is built by readers: the first iterator over a
//     table nobody sorted yet (or its flush) sorts it, and an iterator over
//     an active table written since the last one sorts the new keys.
//   - Every KV write reserves a sequence number and waits, before it
//     returns, for every write reserved before it to be published: a writer
//     that stalls between Reserve and Publish stalls the writers after it.
//   - Bits.Count is exact for writes that returned; a write in progress may
//     or may not be counted yet.
//   - PendingBytes counts the memory the changes hold (a KV table's slot
//     arrays and arena chunks, a bits table's pages), not the key orders
//     iterators build nor a bits table's word filter (a 512th of the
//     file's bits, in bytes); a reused table's slot arrays (KV) and page
//     directory (Bits) are not counted again (Options.PoolBytes bounds
//     them) until a slot array grows: the larger one replacing it is
//     counted in full. The read tier counts a retained table's arrays
//     either way.
//   - Bits keeps a region summary of its file in memory (lines holding a
//     set bit, and the set bits of sparse pages), built by a scan at
//     NewBits: 12 bytes per 32768 bits, plus 2 bytes per set bit of the
//     pages holding at most 1024.
package buffer
