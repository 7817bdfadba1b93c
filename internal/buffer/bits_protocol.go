package buffer

// Bits publication order. Every word a lock-free reader of a Bits overlay
// loads is written with sync/atomic, in every build, but the file's words
// the flush writes with pwrite (B7). The rules below are
// what a reader may observe between two stores and why it is enough; the
// code cites them by number (B1 ... B14). They are publication order 11 of
// the engine's protocol (protocol.go), which lists every rule.
//
// B1. View. Everything a reader consults first (the direct-read limit, the
//     file's words and length, the active table, the sealed tables newest
//     first) is one immutable bitsView published by one atomic pointer
//     store (Bits.publish), under vmu. Views are never reused, so a reader
//     that loads the same pointer twice saw nothing change in between (no
//     ABA). The direct-read limit is the file's length in a direct view and
//     0 otherwise, so the direct path is one comparison.
//
// B2. Leaving the direct path. A writer that finds the view direct
//     publishes a view that is not (B1) before its first store to a table.
//     A write returns after its store, so a reader that starts after it
//     returned loads a view that is not direct and probes the tables.
//
// B3. Back to the direct path (Settle). Only with writers excluded, no
//     sealed table and an empty active table: the view it publishes is
//     direct. A direct view's words are the file's current ones (B7).
//     A sealed table with an empty active one (a Snapshot sealed it, no
//     generation in flight) keeps the view off the direct path
//     (TestBitsSettleKeepsSealed; mutation 632 ignores the sealed tables).
//
// B4. Table words. A set of bit v is one atomic OR of its mask and value
//     bits (v = 1), or an atomic OR of its mask bit followed, only if the
//     bit was pending as 1, by an atomic AND of its value bit (v = 0). A
//     value bit is never set without its mask bit, so one atomic load of a
//     packed word gives a pair a reader may use: a bit not pending (read
//     beneath), the old pending value, or the new one. SetMany's
//     coalescing path (bits_many.go) does the same per packed word for
//     all the bits of the word it changes: one atomic OR of their mask
//     bits and of the value bits set to 1, then, only if a bit set to 0
//     was pending as 1, one atomic AND of those value bits.
//
// B4a. Word filters. A writer marks the bitslice word of a bit (64 bits)
//     in its table's word filter, or sets the table unfiltered for a bit
//     past the filter, before it writes the packed word (B4). A lookup that
//     finds the word unmarked in the active table's filter and in the
//     union of the sealed tables' filters (built when the sealed tables
//     change, after their last write, into memory no view published
//     before: new, or the buffer Recycle prepared, taken once; mutation
//     440) reads the file alone: a write whose
//     mark it did not see had not stored its word, so it had not returned.
//     Marks are cleared only by reset (B8); a dense table marks every word
//     before it says it is dense. That read re-validates the view like a
//     fold (B8): a released table's filter is reset while older views still
//     point at it, and such a view's file words may end before the growth
//     that holds the bit.
//
// B5. Pages and directories. A page is zeroed (or copied from a shared
//     full page, or filled with SetMany's coalesced words for an entry
//     that was empty) before it is stored in a directory entry; a grown
//     directory is filled before it is stored in the table. Both stores
//     under the table's mutex, so no install is lost to a concurrent copy;
//     a fill that finds the entry taken meanwhile applies its words to the
//     page there (B4) and keeps its own page as dirty. A page a release
//     kept without zeroing (dirty) is reused only by a fill, which stores
//     every word of it, or zeroed first. Every store to a page that was
//     ever in a directory is atomic: a reader of an older view may still
//     load it (B8). A reader
//     sees a nil entry (nothing pending there) or a page whose words are
//     what B4 stored. The view holds the active table's directory (adir):
//     a grown directory of the active table is published in a new view
//     (B1; lock order: the table's mutex, then vmu) before any page is
//     installed in it, so a write that installed a page returned after a
//     view that reaches the page was published.
//
// B6. Count. Each atomic read-modify-write of B4 adds to the set-bit count
//     the exact change it made, from the old word it returned; a bit not
//     pending in the active table had the value beneath (sealed tables,
//     then the file), which does not change while writers run (Freeze
//     and Snapshot, which seal the active table, exclude them, and
//     applying a sealed table to the file does not change what any read
//     returns). A write of 0 that its OR finds
//     pending as 1 counts the clear from the word its AND returns, not
//     from the OR's: a concurrent write may have cleared the bit in
//     between (TestBitsCountRacingClear). SetMany adds its changes once,
//     before it returns.
//
// B7. Flush order (BitsGen.Write). Grow the file and publish a view with
//     its new words (B1); apply each sealed table's words, oldest first
//     (page by page: each page's new words, its pending bits over the
//     file's word, written with the pages next to it by one pwrite,
//     File.WriteWords; or through a list of word changes while an open
//     snapshot needs the old words, B10); update the region summary of
//     every line applied (B9); stage the watermark and sync (data, then
//     the header). After each run's pwrite the flush starts the run's
//     writeback (File.StartWriteback, on a helper goroutine the walk joins
//     before the sync), so the disk works during the rest of the walk; it makes nothing durable, and the sync after the walk
//     stays what does (the watermark is staged and synced after it). A pwrite is no atomic store: a reader of the mapping may
//     load a word torn between its old and new bytes. Only the bits the
//     flush changes differ between the two, every one of them is pending
//     in a table of every view until the Release (B8), and every read
//     folds the tables over the file's word (B4a: a word with a pending bit
//     is marked in the sealed union), so no read returns a torn bit; and
//     the flush is the file's only writer (wmu; the overlay never writes
//     the file elsewhere), so the file words it read to compute a page's
//     words are still the file's when it writes them. WriteLagged syncs once
//     instead (header written, then one fdatasync for it and the data),
//     so its header records only the watermark of the previous successful
//     sync, whose words are durable (bitslice rule L1, File.SyncLagged):
//     the owner's receipt, written after WriteLagged returns, covers this
//     one's. The generation's tables
//     stay in the view, so reads see the same values throughout, and a
//     failure at any step leaves them there for the next attempt.
//
// B8. Release. The view without the generation's tables is published
//     (B1) before any of them is reset (pages zeroed, kept for reuse), and
//     only unpinned ones are. Every read of the tables re-loads the view
//     after its probes and retries if it changed: a read that probed a
//     table being reset sees a new view.
//
// B8a. Load order of a fold. Between its two loads of the view (B8) a
//     read may load the file's word before or after the tables' words:
//     the lookups over a view without sealed tables (Get, GetMany) load
//     the file's word first, so that its cache miss and the table's
//     overlap. While the view stays published the file's words differ
//     from their values at the first load only in bits pending in a table
//     of that view (B7: the flush writes only those until the Release
//     publishes a view without the tables), and the fold takes those bits
//     from the tables, so either order gives a pair the reader may use.
//     A view with sealed tables takes the general fold (the tables newest
//     first, then the file), never the active-table-only path: a bit
//     pending in a sealed table is in the file only once its flush wrote
//     it.
//
// B9. Region summary. The flush brings the summary of every page it wrote
//     up to date (line bits in place, atomically; a new flat index,
//     published by one atomic pointer store after it is filled, or none
//     if every page written was and stays unindexed) after
//     applying the page's words and before the Release that drops the
//     tables (B8). A grown summary is filled from the old one (only the
//     flush writes it, under wmu) before it is published. Ones loads, for
//     each page, the view, then the summary and its index, then the view
//     again (B8: retrying the page if it changed): a page's pending bits
//     are either in a table of the view or already in the summary it
//     loaded, and the view's file words are current. Over a direct view
//     the second load is skipped: every bit written before that view was
//     published is in the file and in the summary loaded after it, and
//     later writes are concurrent with the iteration. (Ones and NextOnes
//     read pages a batch of bits at a time, onesCursor.fill, each page as
//     above; over a direct view the indexed pages that follow an indexed
//     one are read from the index loaded with it, fillIndexedRun, for the
//     same reason: mutation 601 reads them so over any view.)
//
// B10. Undo layers. A write that overwrites file words an open snapshot
//     still needs publishes the old words (a new layer list, one atomic
//     pointer store, under vmu) before it overwrites them. A snapshot
//     read loads the file word first, then the layers: it finds the old
//     word in a layer, or read the file before the write.
//
// B11. Pins. Snapshot pins the tables of the view under vmu; Release takes
//     tables out of the view under vmu and resets only unpinned ones, so a
//     table is never pinned after it left the view. (Pins and the
//     generation cut are the view core's, view.go, shared with KV.)
//
// B12. Close. MarkClosed publishes a view marked closed (B1) and every
//     view published after it carries the mark (publish, under vmu); a
//     closed view is never direct. Lookup reports closed from a closed
//     view it loaded. A lookup that loaded an open view reads the file's
//     words through the mapping that view holds, which stays a mapping of
//     the file while the view is reachable: bitslice's Close leaves it in
//     place (a runtime cleanup unmaps it once no View of it is reachable;
//     mutation 610 zeroes it under the views), so the word is the file's
//     and the read is linearizable before MarkClosed, whatever the owner
//     closes meanwhile. The direct path, Lookup, which kvbuf.Bits.Get
//     inlines, therefore loads the view once: the view, its limit, the
//     file's word (TestBitsLookupClosedBetweenLoads closes the overlay and
//     the file between the view's load and the word's, in the invariants
//     build, and wants the file's bit). "While the view is reachable"
//     holds for a read only if the read keeps it so: the address of a
//     word or byte of a mapping is not traced by the garbage collector,
//     so every read through a view's mapping keeps the view alive past
//     its last load (runtime.KeepAlive(v) after it, as bitslice's own
//     reads do; Lookup's is checked by TestBitsGetInlines, mutation 613).
//     The engine's Close marks every
//     bitslice closed before it stores its closing flag, so a Bits.Get
//     that starts after any read saw the flag reports ErrClosed, with no
//     load of the flag itself (mutation 460). A closed view's filter
//     bounds alim and flim are 0 (publish, B14): the lookups that are
//     not direct or fast decide from the filters first and test the
//     closed mark only past them (LookupSlow; mutation 560,
//     TestBitsLookupClosedFilterPath).
//     After the file's Close the owner publishes, with DropFile, a closed
//     view without the file's words, so that the overlay stops holding
//     the mappings (mutation 612): the reads that loaded an earlier view
//     finish on it, and a read of the view after it reads no file word
//     (the engine stores its closing flag before, so such a read reports
//     ErrClosed).
//
// B13. Fast views. A view is marked fast only by publish (B1), from what
//     the view holds when it is published: open (B12), not direct, no
//     sealed table, and its active table's dense flag already set (B4a:
//     every filter word marked). The writer whose markAll sets the flag
//     publishes a copy of the current view (densed, under vmu, after
//     t.mu if held), so the views published after it are fast until a
//     Freeze seals the table or MarkClosed closes the view. Lookup over
//     a fast view folds the active table's word over the file's (B8a)
//     and re-loads the view, loading neither the closed mark, the sealed
//     tables, the flag nor the filters: a fast view is never closed and
//     has no sealed table, so that fold is the general one (mutation 480
//     marks views with sealed tables fast, 481 closed ones), and a stale
//     flag costs only a probe (a table is reset only after a view without
//     it is published, B8, and the re-load sees that).
//
// B14. Filter bounds. publish sets a view's alim and flim from the
//     view's own immutable fields before its store (B1), so a lookup
//     that loaded the view reads bounds that hold for it. Both are bit
//     indexes. alim is min(nbits, the bits the active filter covers) in
//     a view without sealed tables (a direct one too, for the lookups
//     past its limit), else 0: a lookup of a bit below it decides from
//     the active filter's word alone (B4a with no sealed union to
//     consult: mutation 615 sets alim with sealed tables) and loads that
//     word and the file's with no other bounds check (mutation 616
//     bounds alim by the filter alone: a bit past the file's end loads
//     past its words). flim is min(nbits, the bits both filters cover)
//     in a view with sealed tables, else 0: below it a word of each
//     filter decides (mutation 619 bounds it by the filters alone). Both
//     are 0 in a closed view (B12), a fast one (B13) and, in tests, one
//     published while filterHook is on, which LookupSlow tells apart
//     past them. TestBitsLookupPastFileEnd reads every bit from the
//     file's last word to past the covers, in a file whose last word's
//     bits past its length and bytes past its data are set (bitslice
//     ignores both), so that 616 and 619 read them as bits, never a
//     fault; so would a read past the length through any other path (a
//     direct view's limit, the length checks of LookupSlow and GetMany,
//     fileWord's mask: mutation 614).
//
//     The reads below either bound re-validate the view as every read
//     does (B4a, B8). Below them a read without the re-load would still
//     return a value the bit had during the read (the bit is below the
//     view's length, and a filter is reset only after its table's flush
//     wrote the file, B8); the re-load reports a close that happened
//     meanwhile (B12) and keeps the view, and so its mapping, reachable
//     past the word's load (B12: a mapping's address is not traced).
//     Its loss is caught in the invariants build: below alim by
//     invariants/617 and TestBitsLookupAlimClosedBetweenLoads, below
//     flim by invariants/618 and TestBitsLookupFlimClosedBetweenLoads
//     (the overlay closed between the filters' load and the word's: the
//     read reports it); mutation 75 removes all three re-loads, and is
//     caught past both bounds, where filterHook sends the racing tests.
