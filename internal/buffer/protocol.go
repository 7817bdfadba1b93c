package buffer

// This file holds no code. It is the engine's concurrency protocol in one
// place (as pebble keeps its commit pipeline's in commit.go): every order
// in which a writer publishes what a lock-free reader loads, as a numbered
// rule. The code that keeps a rule cites it as "publication order N" (or
// B<n>, T<n>, ingest rule <n> for the rule sets other files keep, listed
// at the end); doc/design.md explains the designs and links here.
//
// Which order keeps a reader from seeing half a batch? Order 5 (a batch is
// published by one compare-and-swap of the visible sequence number after
// every one of its changes is stored), with order 7 (what each read loads
// first) and order 13 (a batch is published before it leaves the write
// barrier, so a freeze never seals part of one).
//
// # The buffer's KV overlay
//
//  1. A new key (writer, under the shard mutex; slotArray.place): the key
//     words (w1..w3), the head word (w0), the log entry and count, then the
//     control byte (an atomic store), then, after the batch, the visible
//     number (order 5). A reader reaches a slot's key words only through a
//     control word it loaded with the slot's byte set, so the byte's store
//     happens before its loads of them: the key words are plain stores in a
//     slot array that was never cleared. In a recycled array they are
//     atomic: a reader still probing the array's previous life holds a
//     control word of that life and may load them with no store of this
//     life ordered before (TestKVStaleReaderOfRecycledSlot; mutation 48).
//     The head word is atomic: reads load a key's preferred slot's head
//     together with the control word (to overlap the misses), before they
//     know whether the slot is full. The log entry and count are read under
//     the shard mutex only. A reader whose visible number is below the
//     change's ignores it.
//
//  2. A version record. Readers walk a key's chain without locks:
//
//     2a. Record before head (an overwrite): the version record is written
//     (plain stores into fresh arena words, which no reader reaches before
//     the reference to them), then the head word (an atomic store). A
//     reader sees the old head (the key's previous versions, intact) or the
//     new one (whose record was written first).
//
//     2b. Rewrite in place (shard.reuse; a seqlock): the old head's prev
//     link is cut (refCut), then the record below it is rewritten (its
//     number first, then value words, then word 0, all atomic), then the
//     head word points at it. A reader that reaches the cut, or a record
//     numbered at or above the one it came from, or a record whose number
//     changed while it read it, read its visible number before the old head
//     became visible and reads again (probeRetry); one that read the
//     record's old content whole (same number before and after) read a
//     change that was current at its visible number (mutation 46). Only in
//     a table no iterator or snapshot pins (order 10).
//
//     2c. Linking below the head (a change numbered below the key's head,
//     from a batch applied out of order): the record, then its
//     predecessor's link (atomic).
//
//     2d. Chunk publication: a record in a new arena chunk is stored after
//     the chunk is published in the shard's arena directory, and before
//     any reference to it, so a directory loaded after a reference resolves
//     it; a reader walking a chain loaded the directory after the head but
//     before the links it follows, and reloads it when a link falls
//     outside it (a link stored below the head during the walk; mutation
//     45).
//
//  3. Growth: the new slot array is filled privately (plain stores), then
//     published with one atomic pointer store, which orders those stores
//     before every reader's loads; the old one is not written again. A
//     reader of the old array sees every key and head it held at the
//     publication; every change applied after it went to the new array
//     only and was published after the reader loaded its visible number
//     (the reader loaded the old array after that number, when the old
//     array was still current), so it is ignored anyway (mutation 40).
//     The read tier's compaction of a retained table (tier rule T6)
//     publishes a smaller array the same way; the table is sealed, so no
//     change follows at all (mutation 643).
//
//  4. Key order: built and sorted privately, then published with one atomic
//     store (ordMu serialises builders); the keys it covers are fixed by
//     the log counts read under the shard mutexes before it was built
//     (mutation 41). An order sorted by several goroutines (a flush's
//     parallelSort) is stored only after every one of them finished (the
//     WaitGroup's Wait orders their writes before the store; mutation
//     190).
//
//  5. A batch (Seq, SeqRange): 5a. its range is reserved (Seq.Reserve: one
//     number per change, ranges handed out in order); every change is
//     stored with its number (orders 1, 2). 5b. The range is published by
//     one compare-and-swap of the visible number, after every earlier range
//     (a batch that finishes early records its range in a ring; the one
//     that publishes moves the number past every recorded range behind
//     it). Before that store no reader sees any of the batch; after it,
//     every reader that loads the number sees all of it. A change never
//     replaces a higher-numbered one, so concurrent batches over the same
//     keys end as their serial order by number leaves them (mutations 43,
//     44).
//
//  6. Release and re-validation: Release (and the read tier's Evict, T3)
//     publishes the view without the released tables (order 9), then
//     clears (pools) only those nothing pins: control words zeroed
//     (atomic stores: a reader of the previous life may still load them),
//     log count zeroed, slot words left as they are (order 1). Every point
//     read re-loads the view after its probes and reads again if it
//     changed, so a read that probed a table being cleared sees a new view
//     (mutations 03, 04, 06).
//
//  7. Reads' load orders. The three differ, and each is needed:
//
//     7a. Get, GetAppend and Has load the visible number, then the view:
//     every change numbered at or below it was stored before it was
//     published (order 5), so it is in the tables of any view loaded after,
//     or in the store if its table was released (order 18).
//
//     7b. GetMany loads the view, then the visible number: every table
//     sealed in the view was frozen with every change published (order
//     13), so nothing a flush may write into the store while it reads is
//     numbered above its number (in the other order a freeze between the
//     loads could move part of a later batch to the store; found by
//     TestBatchesSerialOrder).
//
//     7c. NewIter and Snapshot pin the view's tables under the view mutex
//     (no freeze or release meanwhile; order 10), then load the visible
//     number: a rewrite in place (2b) happens only in an unpinned table,
//     below a change visible before the writer checked the pins, so a
//     number loaded after the pins never needs what it removed (mutation
//     47).
//
//  8. Shared words: every word a lock-free reader may load while a writer
//     stores it is stored with sync/atomic, in every build: no build tag
//     makes the race detector check other stores than the ones that ship.
//     A plain store is kept only where a rule above names the atomic store
//     that orders it before every reader's load (key words in a fresh
//     array, 1; arena records, 2a/2d; a grown array, 3), and each is
//     checked under -race (mutations 48 and 49). One write is no Go store
//     at all: the bits flush writes a bitslice's pages with pwrite (the
//     kernel's copy into the page cache the mapping shares), which a
//     reader may see torn between old and new bytes; only the bits it
//     changes differ, and those are pending in the view's tables until the
//     Release (order 11, B7).
//
//  9. View publication: an overlay's view (active table, sealed tables
//     newest first, retained tables) is one immutable value published by
//     one atomic pointer store, under vmu. Views are never reused, so a
//     reader that loads the same pointer twice saw nothing change in
//     between (no ABA), and one load gives every table a read needs.
//
//  10. Pin/publish handshake: pins are taken under vmu on the tables of the
//     current view; Release takes tables out of the view under vmu and
//     publishes first (order 6), and the pool keeps only a table whose pin
//     count is zero after that (tablePool.put). So a table is never pinned
//     after it left the view, and a pinned table is never cleared or
//     rewritten in place (mutation 05).
//
//     The steps of orders 6 and 10 that the KV and Bits overlays take the
//     same way (finding a generation's tables in the sealed list, pinning
//     and unpinning) are written once, in view.go; each overlay publishes
//     its own view type.
//
//  11. Bits: the bit overlay's own rules B1-B14 (bits_protocol.go): its
//     view (B1), leaving and regaining the direct path (B2, B3), the packed
//     words' CAS/OR/AND (B4) and word filters (B4a), pages (B5), the count
//     (B6), the flush order (B7), release (B8, as order 6), the region
//     summary (B9), undo layers (B10) and pins (B11, as order 10), the
//     load order of a fold (B8a), Close (B12: the closed view, published
//     before the engine's closing flag and before the file is closed) and
//     fast views (B13: open, no sealed table, the active table dense) and
//     the filter bounds a view carries (B14).
//
//  12. The read tier: T1-T6 (kv_tier.go): retain publishes one view that
//     moves a generation from the pending list to the retained list (T1),
//     retained tables are a suffix of the flushed generations (T2), Evict
//     is order 6 (T3), point reads probe the tier after every pending
//     table and re-validate (T4), and a retained table's filter is built
//     once it is sealed and published with one store, ruling out a key
//     only for the table's slots, never its range tombstones (T5);
//     retain then compacts a table sized for more keys than it took
//     (unless the generation, compacted, is over the tier's budget), each
//     shard's smaller array filled privately and published as growth is
//     (T6, order 3).
//
// # Across packages
//
//  13. A write is published before it leaves the write barrier: DB.Apply
//     and the single writes reserve their numbers and publish them (order
//     5) before Ticket.End releases the shared side of the flusher's
//     barrier (batch.go: the deferred Publish runs before the deferred
//     End; DB.write: apply returns after Publish, then End). Bits.Set's
//     in-line path (Flusher.EnterWrite, without DB.write's closure) sets
//     its bit before it releases the stripe EnterWrite took. A freeze
//     takes the barrier exclusively, so it never seals part of a batch or a
//     change numbered above the visible number (mutation 42), nor a table
//     a Set is still writing.
//
//  14. Writers are excluded from Freeze, Snapshot and Bits.Settle: the
//     flusher calls them with the write barrier held exclusively
//     (flush.Flusher's freezeExclusive, Exclusive and settle), so no write
//     is in flight when a table is sealed, pinned by a snapshot or when a
//     bit view goes back to the direct path (mutation 18).
//
//  15. The op tracker (internal/flush/ops.go): BeginOp publishes head = (op,
//     explicit) before it appends op to the open list, both under its
//     mutex; ending an explicit op removes it from the list before it marks
//     head ended. The ops are changed under the shared barrier and read at
//     a freeze under the exclusive one, so a generation's watermark never
//     covers a write outside it (flush.Flusher's invariants 2 and 3;
//     mutations 10, 11, 25, 26).
//
//  16. Bitslices before the batch that carries the watermark: a
//     generation's bitslices are written and synced (one fdatasync each,
//     WriteLagged: their headers record the generation and the previous
//     write's watermark; B7) before the store batch with the keyspaces'
//     changes, the catalogs and the watermark is committed (kvbuf's
//     target.go), and generations commit in order. So the receipt is never
//     ahead of the data it covers (mutation 81).
//
//  17. An engine snapshot pins every overlay's tables first and takes the
//     store snapshot after (kvbuf's snapshot.go, under the exclusive
//     barrier): a table released before its pin is durable in the store by
//     then; one released after stays pinned.
//
//  18. Release after durability: the flusher releases a generation only
//     after its commit's wait returned (flush.Flusher's invariant 8), so a
//     read that falls through a released table to the store finds the
//     table's changes there (orders 6 and 7a). A bit overlay's Release
//     is in two parts: ReleaseView publishes the view without the tables
//     (B8) before the callers are woken, Recycle resets the table kept for
//     reuse after (flush.Recycler), so no caller waits for the reset.
//
// Further rule sets, kept where their code is: the store's ingestion
// (ingest rules 1-6, storage/ingest_commit.go) and the flusher's
// invariants (flush.Flusher).
