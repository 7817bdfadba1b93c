package kvbuf

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/buffer"
	"github.com/kvbuf/kvbuf/internal/enginedir"
)

// Bits is a named bit vector: a bitslice file in the engine directory behind
// a pending-changes overlay. It grows as bits past its length are set (the
// file grows at the next flush), up to Options.MaxBits. Get it from DB.Bits.
// Safe for concurrent use.
type Bits struct {
	ov      *buffer.Bits
	closing *atomic.Bool // the engine's: reads check it after reading
	db      *DB
	name    string
	file    *bitslice.File
}

// Bits returns the bitslice called name, creating an empty one (its file,
// durably, before it returns) on first use. Names follow the keyspace rules
// (ErrBadName otherwise). It returns ErrClosed after Close has begun.
func (db *DB) Bits(name string) (*Bits, error) {
	if err := enginedir.CheckName("bitslice", name); err != nil {
		return nil, err
	}
	t, err := db.flusher.Enter()
	if err != nil {
		return nil, err
	}
	defer t.End()
	db.mu.Lock()
	defer db.mu.Unlock()
	if b, ok := db.bits[name]; ok {
		return b, nil
	}
	return db.openBits(name, true)
}

// openBits opens (or, with create, creates) the bitslice file called name
// and its overlay. db.mu held (or Open).
func (db *DB) openBits(name string, create bool) (*Bits, error) {
	path := db.dir.BitsPath(name)
	f, err := bitslice.Open(path)
	if create && errors.Is(err, fs.ErrNotExist) {
		f, err = bitslice.Create(path, 0)
		if err == nil {
			if serr := db.dir.SyncBitsDir(); serr != nil {
				_ = f.Close()
				err = fmt.Errorf("kvbuf: bitslice %q: %w", name, serr)
			}
		}
	}
	if err != nil {
		return nil, wrapOpenErr(err)
	}
	ov, err := buffer.NewBits(f, &db.acct, db.bopts)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	b := &Bits{db: db, name: name, file: f, ov: ov, closing: &db.closing}
	db.bits[name] = b
	db.addTarget(nil, b)
	return b, nil
}

// Name returns the bitslice's name.
func (b *Bits) Name() string { return b.name }

func (b *Bits) wrap(err error) error {
	return fmt.Errorf("kvbuf: bitslice %q: %w", b.name, err)
}

// Set sets bit i to v, as a write of op (see "Ops and the watermark"; 0 if
// the host does not track ops). It may wait for a flush to make room when
// pending memory is over its bound. Errors: ErrOutOfRange (i at or past
// Options.MaxBits), ErrStaleOp, ErrClosed, ctx.Err().
func (b *Bits) Set(ctx context.Context, i uint64, v bool, op uint64) error {
	if err := b.ov.CheckSet(i); err != nil {
		return b.wrap(err)
	}
	t, err := b.db.flusher.BeginWrite(ctx, op, false)
	if err != nil {
		return err
	}
	if t.Skipped() {
		return nil
	}
	err = b.ov.Set(i, v)
	t.End()
	if err != nil {
		return b.wrap(err)
	}
	return nil
}

// SetRange sets every bit i with lo <= i < hi to v, as one write of op. A
// range covering whole runs of 32768 bits that hold no pending change costs
// a pointer per run. Errors: ErrBadRange (lo > hi), ErrOutOfRange (hi past
// Options.MaxBits), and as Set.
func (b *Bits) SetRange(ctx context.Context, lo, hi uint64, v bool, op uint64) error {
	if err := b.ov.CheckRange(lo, hi); err != nil {
		return b.wrap(err)
	}
	t, err := b.db.flusher.BeginWrite(ctx, op, false)
	if err != nil {
		return err
	}
	if t.Skipped() {
		return nil
	}
	err = b.ov.SetRange(lo, hi, v)
	t.End()
	if err != nil {
		return b.wrap(err)
	}
	return nil
}

// Get returns bit i: the pending value if there is one, else the stored
// one; false at or past Len. It returns ErrClosed once Close has begun.
func (b *Bits) Get(i uint64) (v bool, err error) {
	// Small enough to inline: one call to the overlay, then the closing
	// check (after the read: see "Reads and Close").
	v, closed := b.ov.GetCheck(i, b.closing)
	if closed {
		v, err = false, ErrClosed
	}
	return v, err
}

// GetMany sets out[j] to bit idx[j] for every j, overlapping the cache
// misses of independent indexes: the values a loop of Get would return,
// read at some instant during the call. len(out) must be at least len(idx).
// It allocates nothing. It returns ErrClosed once Close has begun.
func (b *Bits) GetMany(idx []uint64, out []bool) error {
	if len(out) < len(idx) {
		return b.wrap(fmt.Errorf("GetMany: %d indexes but room for %d: %w", len(idx), len(out), ErrBadRange))
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
// engine closes; use a Snapshot for a point-in-time sequence.
func (b *Bits) Ones(from uint64) iter.Seq[uint64] {
	seq := b.ov.Ones(from)
	return func(yield func(uint64) bool) {
		for i := range seq {
			if b.db.closing.Load() || !yield(i) {
				return
			}
		}
	}
}
