package kvbuf

import (
	"context"
	"errors"
	"io/fs"
	"iter"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/buffer"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Bits is a named bit vector: a bitslice file in the engine directory behind
// a pending-changes overlay. It grows as bits past its length are set (the
// file grows at the next flush), up to Options.MaxBits. Get it from DB.Bits.
// Safe for concurrent use.
type Bits struct {
	// The overlay by value, first: Get calls it at the handle's own
	// address, with no load of a pointer to it before the call.
	ov      buffer.Bits
	closing *atomic.Bool // the engine's: Ones checks it (Get asks the overlay, B12)
	db      *DB
	name    string
	file    *bitslice.File
}

// Bits returns the bitslice called name, creating an empty one (its file,
// durably, before it returns) on first use: the only way a bitslice is
// made (a missing file of one the engine recorded fails Open with
// ErrCorruptDir instead). It is recorded in the engine's bitslice catalog with
// the next flush. Names follow the keyspace rules (ErrBadName otherwise).
// It returns ErrClosed after Close has begun.
func (db *DB) Bits(name string) (*Bits, error) {
	return handle(db, "bitslice", name, db.bits, db.createBits)
}

// createBits creates the bitslice called name. db.mu held.
func (db *DB) createBits(name string) (*Bits, error) { return db.openBits(name, true) }

// openBits opens (or, with create, creates, stamped with the engine id)
// the bitslice file called name and its overlay. db.mu held (or Open).
func (db *DB) openBits(name string, create bool) (*Bits, error) {
	path := db.dir.BitsPath(name)
	var f *bitslice.File
	var err error
	if create {
		f, err = bitslice.CreateOwned(path, 0, db.engineID)
		if err == nil {
			if serr := db.dir.SyncBitsDir(); serr != nil {
				_ = f.Close()
				err = kverr.Errorf("bitslice %q: %w", name, serr)
			}
		}
		if errors.Is(err, fs.ErrExist) {
			// Open opened every bitslice file: this is something else
			// (a directory, a symlink), or a file that appeared behind
			// the engine's back.
			if f, err = bitslice.Open(path); err == nil {
				_ = f.Close()
				err = kverr.Errorf("bitslice %q: %s appeared while the engine was open (reopen the engine to check it): %w", name, path, ErrCorruptDir)
			}
			return nil, err
		}
	} else {
		f, err = bitslice.Open(path)
	}
	if err != nil {
		return nil, err
	}
	b := &Bits{db: db, name: name, file: f, closing: &db.closing}
	if err := buffer.InitBits(&b.ov, f, &db.acct, db.bopts); err != nil {
		_ = f.Close()
		return nil, err
	}
	if db.closing.Load() {
		// A handle entered before Close began, made after it marked the
		// others (db.mu orders the two): closed like them (B12).
		b.ov.MarkClosed()
	}
	db.bits[name] = b
	db.addTarget(nil, b)
	if create {
		db.bitsAdded[name] = enginedir.BitsEntry{}
		db.markCatalog()
	}
	return b, nil
}

// Name returns the bitslice's name.
func (b *Bits) Name() string { return b.name }

func (b *Bits) wrap(err error) error {
	return kverr.Errorf("bitslice %q: %w", b.name, err)
}

// Set sets bit i to v, as a write of op (see "Ops and the watermark"; 0 if
// the host does not track ops). It may wait for a flush to make room when
// pending memory is over its bound. Errors: ErrOutOfRange (i at or past
// Options.MaxBits), ErrStaleOp, ErrClosed, ctx.Err().
func (b *Bits) Set(ctx context.Context, i uint64, v bool, op uint64) error {
	// The common case in line (an index in range, no memory budget,
	// pending bytes at or below FlushBytes, an op not redelivered):
	// DB.write's and Flusher.Write's steps in their order, without the
	// closure and its calls. The set is published before the stripe is
	// released (publication order 13).
	if b.ov.InRange(i) && b.db.share == nil {
		w, err := b.db.flusher.EnterWrite(ctx, op)
		if w != nil {
			b.setAdmitted(i, v, op)
			w.RUnlock()
			return nil
		}
		if err != nil {
			return writeErr(err, "bitslice", b.name)
		}
	}
	return b.db.write(ctx, op, "bitslice", b.name, b.ov.CheckSet(i), func() error {
		b.setAdmitted(i, v, op)
		return nil
	})
}

// setAdmitted is Set's change, admitted (i in range, the barrier held):
// the overlay's set, then the change feed's record of it.
func (b *Bits) setAdmitted(i uint64, v bool, op uint64) {
	b.ov.SetInRange(i, v)
	if b.db.feed.on.Load() {
		b.db.feed.setBits(op, b.name, i, i+1, v)
	}
}

// SetMany sets bit idx[j] to vals[j] for every j, in order (a later change
// of the same bit wins), as one write of op: one admission for the whole
// slice, so that a host applying many changes at once (the deletes of one
// log entry, a bulk load) pays per bit only the overlay's own work. Every
// index is checked before any bit is set. A concurrent reader may see part
// of the changes (as with a Batch). Errors: ErrBadRange (len(vals) !=
// len(idx)), ErrOutOfRange (an index at or past Options.MaxBits), and as
// Set.
func (b *Bits) SetMany(ctx context.Context, idx []uint64, vals []bool, op uint64) error {
	// Checked once, before admission (the overlay does not check again).
	m, err := b.ov.CheckMany(idx, vals)
	return b.db.write(ctx, op, "bitslice", b.name, err, func() error {
		b.ov.SetChecked(m)
		if b.db.feed.on.Load() {
			b.db.feed.setMany(op, b.name, idx, vals)
		}
		return nil
	})
}

// SetRange sets every bit i with lo <= i < hi to v, as one write of op. A
// range covering whole runs of 32768 bits that hold no pending change costs
// a pointer per run. Errors: ErrBadRange (lo > hi), ErrOutOfRange (hi past
// Options.MaxBits), and as Set.
func (b *Bits) SetRange(ctx context.Context, lo, hi uint64, v bool, op uint64) error {
	return b.db.write(ctx, op, "bitslice", b.name, b.ov.CheckRange(lo, hi), func() error {
		err := b.ov.SetRange(lo, hi, v)
		if err == nil && lo < hi && b.db.feed.on.Load() {
			b.db.feed.setBits(op, b.name, lo, hi, v)
		}
		return err
	})
}

// Get returns bit i: the pending value if there is one, else the stored
// one; false at or past Len. It returns ErrClosed once Close has begun.
func (b *Bits) Get(i uint64) (v bool, err error) {
	// Small enough to inline, with the overlay's direct path (Lookup)
	// inlined in it: a lookup with nothing pending makes no call. The
	// overlay reports Close from the view it loads anyway (DB.Close marks
	// the overlay closed before it stores the closing flag, and a view
	// loaded before reads the file's words, whose mapping the file's
	// Close leaves in place: B12, "Reads and Close").
	// Assigned to the named results, not returned: the inliner charges
	// the return of a call's two results more (83 against 77 with
	// Lookup's KeepAlive, TestBitsGetInlines).
	v, err = b.ov.Lookup(i, (*buffer.Bits).LookupSlowErr)
	return
}

// GetMany sets out[j] to bit idx[j] for every j, overlapping the cache
// misses of independent indexes: the values a loop of Get would return,
// read at some instant during the call. len(out) must be at least len(idx).
// It allocates nothing. It returns ErrClosed once Close has begun.
func (b *Bits) GetMany(idx []uint64, out []bool) error {
	if len(out) < len(idx) {
		return b.wrap(kverr.Errorf("GetMany: %d indexes but room for %d: %w", len(idx), len(out), ErrBadRange))
	}
	b.ov.GetMany(idx, out)
	return b.db.closed()
}

// Len returns the bitslice's length including pending growth: the highest
// index ever set plus one, or the file's length if larger.
func (b *Bits) Len() (uint64, error) {
	n := b.ov.Len()
	return n, b.db.closed()
}

// Count returns the number of set bits, pending changes included. It is
// maintained by every write, not computed by a scan. It is exact for writes
// that have returned; a write in progress may or may not be counted yet.
func (b *Bits) Count() (uint64, error) {
	n := b.ov.Count()
	return n, b.db.closed()
}

// Ones returns the indexes of the set bits at or after from, in increasing
// order, pending changes included, read live (a write concurrent with the
// iteration may or may not be seen). It ends early, without error, if the
// engine closes (checked every 32768 bits); use a Snapshot for a
// point-in-time sequence.
func (b *Bits) Ones(from uint64) iter.Seq[uint64] { return b.ov.OnesUntil(from, b.closing) }

// NextOnes is Ones a batch at a time, as roaring's NextMany: it fills dst
// with the indexes of the set bits at or after from, in increasing order,
// pending changes included, and returns how many (n) and where to continue
// (next: above the last one read, with no set bit between them as read).
// It allocates nothing. A loop
//
//	for n, next, err := b.NextOnes(0, buf); n > 0 && err == nil; n, next, err = b.NextOnes(next, buf) {
//		for _, i := range buf[:n] { ... }
//	}
//
// reads what ranging over Ones(0) would. It reads live, as Ones does: a
// write that returned before the call began is seen, one concurrent with
// the call may or may not be, and each call reads the bitslice as it is
// then (a bit set behind next by a later write is not read again). n is
// len(dst) unless the end was reached: n < len(dst) means no set bit below
// the length at the call's start was left unread (next is then that
// length; from, if from was at or past it, with n 0). An empty dst returns
// 0, from and an error wrapping ErrBadRange. Once Close has begun it
// returns 0, from and ErrClosed (dst's contents are then undefined).
func (b *Bits) NextOnes(from uint64, dst []uint64) (n int, next uint64, err error) {
	if len(dst) == 0 {
		return 0, from, b.wrap(kverr.Errorf("NextOnes: an empty dst: %w", ErrBadRange))
	}
	n, next = b.ov.NextOnes(from, dst, b.closing)
	// The closing flag is stored after every bitslice is marked closed
	// and before any overlay drops its file (B12, DropFile): a read that
	// finds it clear after its loads of the file read the file's words.
	if err := b.db.closed(); err != nil {
		return 0, from, err
	}
	return n, next, nil
}

// BitsReader is the read side of a bitslice, live (*Bits) or as of a
// snapshot (*SnapshotBits). The methods are documented on *Bits.
type BitsReader interface {
	Get(i uint64) (bool, error)
	GetMany(idx []uint64, out []bool) error
	Len() (uint64, error)
	Count() (uint64, error)
	Ones(from uint64) iter.Seq[uint64]
	NextOnes(from uint64, dst []uint64) (n int, next uint64, err error)
}
