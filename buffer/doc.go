// Package buffer holds pending changes in memory in front of durable storage:
// a generic sharded hash table (Table), a key-value overlay over a
// storage.Store (KV) and a bit overlay over a bitslice.File (Bits). Writes
// land in the overlay and are visible to reads at once; a flusher moves them
// to storage with the Freeze / Apply / Release protocol (flush.Target,
// implemented here without importing package flush).
//
// # Table
//
// Table[K, V] shards keys by the top bits of their hash (xxh3 for string
// keys, the murmur3 fmix64 finalizer for integer keys) and keeps each shard
// as an open-addressing slot array of atomic pointers to immutable entries.
// Writers serialise on the shard mutex and publish entries (and grown slot
// arrays) with atomic stores; readers do atomic loads only and never write a
// shared cache line (no RWMutex reader count), and Get allocates nothing.
// Removing an entry drops the table's reference to its value at once. Shard
// storage is allocated on the first insert into the shard: an empty table is
// one 64-byte allocation; with one entry it holds 496 bytes in 6 allocations
// (W3 construct; a mutex+map is 208 bytes, xsync.Map 3,040).
//
// The default shard count (DefaultShards = 8) is fixed, not GOMAXPROCS x k:
// reads take no lock, so shards only spread writers, and W3 miss_churn-64
// showed no measurable difference between 1 and 64 shards on the 2-core
// development machine. Options.Shards overrides it.
//
// A KV entry is one allocation holding the entry header (40 bytes: key,
// value as pointer+length, index node), the key bytes and a value of up to
// 64 bytes, sized to a Go size class: with W2's 8-byte keys and 16-byte
// values it is one 64-byte, cache-line-aligned object. The slot keeps the
// full hash beside the pointer, so a pending hit costs two dependent cache
// misses (slot, entry) and a probe rarely touches another key's entry.
// BenchmarkW2 get-pending-hit, back-to-back runs: with entry, key and
// value in separate objects a hit was 11.5x faster than pebble db.Get; with
// the inline entry 18.7x (tombstones 23.5x -> 57.5x). KV.GetAppend returns
// the value without the copy's allocation.
//
// Ordered tables (NewOrderedTable, used by KV) also link each key into a
// per-shard skip list (single writer under the shard mutex, lock-free
// readers), so scans and flushes visit keys in order by a k-way merge of the
// shards instead of sorting.
//
// # Flush protocol and the qdrant bugs
//
// Each overlay has an active table (takes writes) and at most one frozen
// table (being flushed, or kept after a failed flush). Readers consult
// active, then frozen, then storage; changes only ever move in that
// direction, and Freeze publishes the frozen pointer before the new active
// one, so a reader never misses a change that completed before it started.
// Freeze seals the old active table: it waits for writers inside it and
// makes later writes to it fail, so they retry on the new active table. A
// write never lands in a table that is being applied.
//
//   - Stale read between capturing a flusher and running it: nothing is taken
//     out of the readable state. The frozen table stays readable until
//     Release, which runs only after Apply made its contents durable.
//   - Updates lost when a flush fails or never runs: Release does nothing
//     unless Apply succeeded since the last Freeze. After a failure the frozen
//     table stays; the next Freeze merges it under the newer writes (newer
//     values win) and the next Apply writes both.
//   - A stale flusher of a dropped instance corrupting a new one: there is no
//     shared registry or path-keyed state; an overlay's tables and store
//     handle belong to it, and a closed store rejects Apply (ErrClosed).
//   - A delete captured before a re-put deleting the new value: nothing
//     reconciles entries against a snapshot. A re-put after Freeze goes to the
//     new active table, which readers consult first and Release never touches.
//   - A cancelled flush leaving other components ahead of the receipt: KV
//     writes its changes and the watermark in one synced storage batch, so
//     the receipt is never ahead of the KV data; cancellation before the
//     commit leaves the frozen set in place.
//
// # Pooling
//
// Released tables are cleared (no reference to any key or value survives)
// and kept by size class for the next generation, bounded by
// Options.PoolBytes and a depth per class, so steady write/flush cycles stop
// growing fresh slot arrays. A table pinned by an open iterator is not
// recycled. A recycled table stays sealed until Freeze has published it as
// the new active table, so a writer still holding its pointer from an
// earlier generation retries instead of writing where no reader looks yet. Build with -tags kvbuf_nopool to disable pooling.
//
// # Caveats
//
//   - Each write allocates: an immutable entry with its own copy of the key
//     (and of a value up to 64 bytes; larger values are a second
//     allocation), and for a new KV key a skip-list node. Writes cost more
//     than in a mutex+map (W3 miss_churn); reads are what the design
//     optimises.
//   - A KV key's skip-list node shares the key bytes of the entry that first
//     inserted the key, so that entry (at most 256 bytes; its value at most
//     64) stays allocated after overwrites until the key is removed or its
//     table released.
//   - A new KV key costs a skip-list insert, O(log n) comparisons.
//   - A KV scan is not a point-in-time snapshot: the store side is a pebble
//     snapshot taken at NewIter, the pending side is read live, so a write
//     concurrent with the scan may or may not be seen (see Iter).
//   - PendingBytes charges a fixed per-entry overhead; it is an estimate of
//     the memory held, not an exact heap measurement. A recycled table's
//     empty capacity is not counted (it is bounded by PoolBytes).
//   - Table.Set on a sealed table returns false and stores nothing; a caller
//     using Seal itself must publish the replacement table inside Seal's fn
//     (as KV does), or retries would spin.
//   - Slot arrays never shrink while a table is live; a table that once held
//     many keys keeps its capacity until released.
package buffer
