// Package kvbuf is an embedded storage engine that puts a pending-changes
// buffer in front of durable storage: mmap-backed bit vectors (package
// bitslice) and a pebble-backed key-value store (package storage).
//
// A host database embeds one engine per shard or segment. Hot writes cost a
// hash-table insert instead of a disk write, reads see those writes at once,
// and a background flusher (package flush) moves them to disk in coalesced,
// synced batches.
//
// # Contracts
//
//  1. Read-your-writes: after a write returns, every read from any goroutine
//     sees it (or a later value), before, during and after any flush.
//  2. Flush coverage: Flush returns nil only once every write that completed
//     before the call is durable; concurrent callers share one physical flush.
//  3. Nothing lost: a failed flush keeps every pending change and is retried;
//     writes that arrive during a flush belong to the next one.
//  4. Watermark as receipt: the persisted op-number watermark is written after
//     the data it covers, so after a crash it is never ahead of the data.
//  5. Orderly shutdown: Close refuses new operations, drains in-flight ones,
//     runs a final flush and closes storage; no goroutine outlives it.
//  6. Bad input is an error, never a crash: corrupt files, bad indexes and
//     locked directories return typed errors that work with errors.Is.
package kvbuf
