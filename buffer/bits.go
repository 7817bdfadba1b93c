package buffer

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/bitslice"
)

// DefaultMaxBits is the default Options.MaxBits: 2^32 bits, a 512 MiB
// bitslice, whose pending-table directory costs at most 1 MiB.
const DefaultMaxBits = 1 << 32

// bitsFile is the part of *bitslice.File the flush path of Bits uses. It is an
// interface only so that tests can inject I/O failures around a real file;
// reads go straight to the *bitslice.File.
type bitsFile interface {
	Len() uint64
	Grow(nbits uint64) error
	ApplyWords(changes []bitslice.WordChange) error
	SetWatermark(op uint64)
	Watermark() uint64
	Sync() error
}

// Bits is a read-your-writes overlay over a bitslice: Set records a pending
// change in memory, Get sees it at once, and the flush protocol (Freeze,
// Apply, Release; the methods of flush.Target) moves the changes to the file.
//
// Pending changes live in two tables: the active one, which takes writes, and
// the frozen one, which holds the generation being flushed. Get consults
// active, then frozen, then the file. Reads take no lock: they load an atomic
// state word (a generation counter plus "active has writes" and "frozen
// exists" flags), probe the tables with atomic loads and re-check the counter;
// if nothing is pending one load decides and the read goes to the file.
// Writers share a lock that Freeze takes exclusively, so no write lands in a
// table that is being applied.
//
// How the bugs of qdrant's buffered bitslice are excluded:
//
//   - Stale read between capturing and running a flusher: Freeze does not take
//     the changes away; the frozen table stays readable (between active and
//     the file) until Release, which runs only after Apply wrote and synced
//     them. Every completed write is always in active, frozen or the file.
//   - Updates lost when a flush fails or never runs: Release does nothing
//     unless the last Apply succeeded; a failed or cancelled Apply keeps the
//     frozen table, and the next Freeze merges the newer writes over it.
//   - A stale flusher of a dropped instance corrupting a new one: the frozen
//     table and the file handle belong to this Bits; Apply writes only through
//     its own *bitslice.File, which fails with bitslice.ErrClosed once closed,
//     and bitslice's file lock keeps a second instance off the same file while
//     this one is open. There is no global registry a stale flusher could hit.
//   - A change captured before a re-set overwriting the newer value: writes
//     after Freeze go to a fresh table that Get reads first, and Release drops
//     the frozen table whole; nothing reconciles entries of the active table,
//     so a flush can never remove or override a newer write. Merging after a
//     failure puts the newer table over the older one, never the reverse.
//   - A cancelled flush leaving data ahead of the receipt or the receipt ahead
//     of data: Apply stages the watermark only after all word changes are
//     applied, and bitslice.Sync msyncs data before the header, so a cancelled
//     or failed Apply never persists a watermark it does not cover.
//
// Tables are recycled (one spare, bounded by Options.PoolBytes) so a steady
// flush cycle allocates nothing. A reader that loaded a table just before it
// was released may probe it while it is reset; the generation counter is
// bumped before any reset, so such a reader sees the change and retries.
//
// # Caveats
//
//   - Op numbers are tracked per generation: Freeze returns the highest op of
//     the changes it froze (merged with a failed generation), not of all time;
//     keeping the watermark monotonic is the flusher's job (bitslice ignores a
//     lower one).
//   - A Set concurrent with Freeze lands in either generation; only Sets that
//     returned before Freeze was called are guaranteed to be frozen by it.
//   - The file must not be written except through the overlay while changes
//     are pending, and Len never shrinks. Reads after the file is closed
//     return false for every bit without a pending change.
//   - A released table and up to Options.PoolBytes of its chunks stay
//     allocated for the next generation. The directory costs 8 bytes per
//     32768 bits up to the highest index set, so Options.MaxBits also bounds
//     the memory one stray Set can cost.
//   - A Get racing with a flush's table swap may retry (rarely, and without
//     blocking on writers); Get never blocks on a lock.
type Bits struct {
	// Read-mostly fields, kept apart from the writer lock so that readers do
	// not share a cache line with the RLock counter that every writer bumps.
	state  atomic.Uint64 // gen<<2 | stateFrozen | stateActive
	active atomic.Pointer[bitsTable]
	frozen atomic.Pointer[bitsTable]
	file   *bitslice.File
	fio    bitsFile
	hi     atomic.Uint64 // highest index ever set + 1 (never decreases)
	max    uint64
	keep   int64
	_      [64]byte

	wmu sync.RWMutex // writers RLock; Freeze locks

	fmu     sync.Mutex // serializes Freeze, Apply and Release
	applied bool       // the last Apply of the frozen table succeeded
	spare   *bitsTable // a reset table for the next Freeze
	scratch []bitslice.WordChange
}

const (
	stateActive = 1 << 0 // the active table may hold writes
	stateFrozen = 1 << 1 // a frozen table exists
	stateGen    = 1 << 2 // one generation step
	statePend   = stateActive | stateFrozen
)

// applyBatch bounds the word changes applied between context checks.
const applyBatch = 1 << 16

// NewBits returns an overlay over f. The overlay does not own f: the caller
// closes it after the last flush. f must not be written through other paths
// while the overlay has pending changes.
func NewBits(f *bitslice.File, opts *Options) *Bits {
	return newBits(f, f, opts)
}

func newBits(f *bitslice.File, fio bitsFile, opts *Options) *Bits {
	b := &Bits{file: f, fio: fio, max: DefaultMaxBits, keep: opts.poolBytes()}
	if opts != nil && opts.MaxBits > 0 {
		b.max = min(opts.MaxBits, bitslice.MaxBits)
	}
	b.active.Store(newBitsTable())
	return b
}

// Set records bit i = v as pending, with the host's operation number op (0 if
// the host does not track them). Indexes at or beyond the file's length are
// accepted and grow the file at the next flush; an index at or beyond
// Options.MaxBits is an error wrapping bitslice.ErrOutOfRange.
func (b *Bits) Set(i uint64, v bool, op uint64) error {
	if i >= b.max {
		return fmt.Errorf("buffer: bit %d (max %d): %w", i, b.max, bitslice.ErrOutOfRange)
	}
	b.wmu.RLock()
	b.active.Load().set(i, v, op)
	atomicMax(&b.hi, i+1)
	if b.state.Load()&stateActive == 0 {
		b.state.Or(stateActive)
	}
	b.wmu.RUnlock()
	return nil
}

// Get returns bit i: the newest pending value if there is one, else the
// file's (false at or beyond the file's length).
func (b *Bits) Get(i uint64) bool {
	// Kept small enough to inline: with nothing pending, one atomic load
	// decides and the read goes straight to the file.
	if b.state.Load()&statePend != 0 {
		return b.getPending(i)
	}
	return b.file.Get(i)
}

// getPending reads bit i when something may be pending. It loads the pending
// words of both tables and the file's word without branching on whether the
// bit is pending, so the (likely cache-missing) loads overlap and a lookup
// pays no branch mispredictions, then merges them: active over frozen over
// file.
func (b *Bits) getPending(i uint64) bool {
	w := i >> 6
	s := b.state.Load()
	for {
		m, v := b.active.Load().word(w)
		if s&stateFrozen != 0 {
			if f := b.frozen.Load(); f != nil {
				fm, fv := f.word(w)
				v = v&m | fv&^m
				m |= fm
			}
		}
		fw := b.file.Word(w)
		s2 := b.state.Load()
		if s2&^statePend == s&^statePend {
			return (fw&^m|v&m)>>(i&63)&1 != 0
		}
		// A table we probed may have been recycled meanwhile: retry.
		if s = s2; s&statePend == 0 {
			return b.file.Get(i)
		}
		runtime.Gosched()
	}
}

// Len returns the overlay's length in bits: the larger of the file's length
// and the highest index ever set plus one.
func (b *Bits) Len() uint64 {
	return max(b.file.Len(), b.hi.Load())
}

// Freeze moves the pending changes into the frozen set, merging them over a
// frozen set kept from a failed Apply, and returns the highest op number in
// the frozen set (0 if none). Writes that start after Freeze returns go to the
// next generation. It waits for in-flight Sets to finish.
func (b *Bits) Freeze() uint64 {
	b.fmu.Lock()
	defer b.fmu.Unlock()
	b.wmu.Lock()
	defer b.wmu.Unlock()

	s := b.state.Load()
	f := b.frozen.Load()
	if s&stateActive == 0 {
		if f == nil {
			return 0
		}
		return f.maxOp.Load()
	}
	a := b.active.Load()
	next := b.spare
	b.spare = nil
	if next == nil {
		next = newBitsTable()
	}
	if f == nil {
		// Order matters for lock-free readers, which load active then
		// frozen: publish frozen first so a reader that sees the new active
		// also sees a's changes as frozen.
		b.frozen.Store(a)
		b.active.Store(next)
		b.state.Store((s&^statePend + stateGen) | stateFrozen)
		b.applied = false
		return a.maxOp.Load()
	}
	// A previous Apply failed: merge the newer changes over the frozen set
	// (readers still see a first), then retire a.
	f.mergeFrom(a)
	b.active.Store(next)
	b.state.Store((s&^statePend + stateGen) | stateFrozen)
	b.applied = false
	a.reset(b.keep) // after the generation bump: stragglers retry
	if b.keep > 0 {
		b.spare = a
	}
	return f.maxOp.Load()
}

// Apply writes the frozen changes to the file (growing it first if a change
// lies beyond its end), stages wm as the file's watermark and syncs: data
// first, then the header holding the watermark. With nothing frozen it only
// persists wm if it is ahead of the file's. On error the frozen set stays,
// readable, for the next Freeze to merge and a later Apply to retry.
func (b *Bits) Apply(ctx context.Context, wm uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.fmu.Lock()
	defer b.fmu.Unlock()
	f := b.frozen.Load()
	if f == nil {
		if wm == 0 || wm <= b.fio.Watermark() {
			return nil
		}
		b.fio.SetWatermark(wm)
		if err := b.fio.Sync(); err != nil {
			return fmt.Errorf("buffer: sync bits watermark: %w", err)
		}
		return nil
	}
	if hi := f.hi.Load(); hi > b.fio.Len() {
		if err := b.fio.Grow(hi); err != nil {
			return fmt.Errorf("buffer: grow bitslice to %d bits: %w", hi, err)
		}
	}
	words := f.appendWords(b.scratch[:0])
	b.scratch = words[:0]
	for len(words) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(len(words), applyBatch)
		if err := b.fio.ApplyWords(words[:n]); err != nil {
			return fmt.Errorf("buffer: apply %d bit words: %w", n, err)
		}
		words = words[n:]
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.fio.SetWatermark(wm)
	if err := b.fio.Sync(); err != nil {
		return fmt.Errorf("buffer: sync bits: %w", err)
	}
	b.applied = true
	return nil
}

// Release drops the frozen set after a successful Apply. Without one (no
// Apply, or the last one failed) it does nothing, so no change is lost.
func (b *Bits) Release() {
	b.fmu.Lock()
	defer b.fmu.Unlock()
	f := b.frozen.Load()
	if f == nil || !b.applied {
		return
	}
	b.applied = false
	b.frozen.Store(nil)
	b.state.Add(stateGen - stateFrozen) // bump the generation, clear the flag
	f.reset(b.keep)                     // after the bump: stragglers retry
	if b.keep > 0 {
		b.spare = f
	}
}

// PendingBytes returns the memory held by pending and frozen changes.
func (b *Bits) PendingBytes() int64 {
	n := b.active.Load().bytes()
	if f := b.frozen.Load(); f != nil {
		n += f.bytes()
	}
	return n
}
