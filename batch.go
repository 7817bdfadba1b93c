package kvbuf

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvbuf/kvbuf/internal/buffer"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Batch collects changes to any keyspaces and bitslices of one engine, to be
// applied as one op with DB.Apply: one admission for all of them, all in
// the same flush, and the watermark covers all of them or none. Adding a
// change copies its key and value. A Batch is not safe for concurrent use;
// it may be reused after Reset (or after Apply, which does not reset it).
//
// A Batch records the first problem with a change (a bad key, a handle of
// another engine) and Apply reports it before applying anything.
type Batch struct {
	db   *DB
	ops  []batchOp
	data []byte // keys and values, referenced by offset
	err  error
}

type batchKind uint8

const (
	opPut batchKind = iota
	opDelete
	opDeleteRange
	opSet
	opSetRange
)

type batchOp struct {
	kind   batchKind
	v      bool
	k      *KV
	b      *Bits
	a0, a1 int // key / lower bound offsets in data ([a0, a1))
	b0, b1 int // value / upper bound offsets; b0 < 0 for an open upper bound
	lo, hi uint64
}

// NewBatch returns an empty batch for db.
func (db *DB) NewBatch() *Batch { return &Batch{db: db} }

func (b *Batch) bytes(p []byte) (int, int) {
	if b.data == nil {
		// Appending nothing to nil stays nil, and a view of nil data
		// is nil: an empty bound, the first bytes of a fresh batch,
		// would read as an open one (DeleteRange(k, nil, "") deleting
		// everything). []byte{} does not allocate.
		b.data = []byte{}
	}
	start := len(b.data)
	b.data = append(b.data, p...)
	return start, len(b.data)
}

func (b *Batch) view(a, z int) []byte { return b.data[a:z:z] }

func (b *Batch) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

func (b *Batch) checkKV(k *KV) bool {
	if k == nil || k.db != b.db {
		b.fail(kverr.Errorf("batch: keyspace handle: %w", ErrForeign))
		return false
	}
	return true
}

func (b *Batch) checkBits(s *Bits) bool {
	if s == nil || s.db != b.db {
		b.fail(kverr.Errorf("batch: bitslice handle: %w", ErrForeign))
		return false
	}
	return true
}

// Put adds key = value in keyspace k.
func (b *Batch) Put(k *KV, key, value []byte) {
	if !b.checkKV(k) {
		return
	}
	if err := k.ov.CheckPut(key, value); err != nil {
		b.fail(k.wrap(err))
		return
	}
	a0, a1 := b.bytes(key)
	b0, b1 := b.bytes(value)
	b.ops = append(b.ops, batchOp{kind: opPut, k: k, a0: a0, a1: a1, b0: b0, b1: b1})
}

// Delete adds the deletion of key in keyspace k.
func (b *Batch) Delete(k *KV, key []byte) {
	if !b.checkKV(k) {
		return
	}
	if err := k.ov.CheckKey(key); err != nil {
		b.fail(k.wrap(err))
		return
	}
	a0, a1 := b.bytes(key)
	b.ops = append(b.ops, batchOp{kind: opDelete, k: k, a0: a0, a1: a1})
}

// DeleteRange adds the deletion of every key in [lower, upper) of keyspace k
// (nil = open on that side).
func (b *Batch) DeleteRange(k *KV, lower, upper []byte) {
	if !b.checkKV(k) {
		return
	}
	if lower != nil && upper != nil && string(lower) > string(upper) {
		b.fail(k.wrap(kverr.Errorf("[%q, %q): %w", lower, upper, ErrBadRange)))
		return
	}
	op := batchOp{kind: opDeleteRange, k: k, a0: -1, b0: -1}
	if lower != nil {
		op.a0, op.a1 = b.bytes(lower)
	}
	if upper != nil {
		op.b0, op.b1 = b.bytes(upper)
	}
	b.ops = append(b.ops, op)
}

// Set adds bit i = v of bitslice s.
func (b *Batch) Set(s *Bits, i uint64, v bool) {
	if !b.checkBits(s) {
		return
	}
	if err := s.ov.CheckSet(i); err != nil {
		b.fail(s.wrap(err))
		return
	}
	b.ops = append(b.ops, batchOp{kind: opSet, b: s, lo: i, v: v})
}

// SetRange adds bits [lo, hi) = v of bitslice s.
func (b *Batch) SetRange(s *Bits, lo, hi uint64, v bool) {
	if !b.checkBits(s) {
		return
	}
	if err := s.ov.CheckRange(lo, hi); err != nil {
		b.fail(s.wrap(err))
		return
	}
	b.ops = append(b.ops, batchOp{kind: opSetRange, b: s, lo: lo, hi: hi, v: v})
}

// Len returns the number of changes in the batch.
func (b *Batch) Len() int { return len(b.ops) }

// Err returns the first problem recorded while adding changes, which Apply
// will return.
func (b *Batch) Err() error { return b.err }

// Reset empties the batch, keeping its memory.
func (b *Batch) Reset() {
	clear(b.ops)
	b.ops, b.data, b.err = b.ops[:0], b.data[:0], nil
}

// applyRun is how many changes of a run to one keyspace Apply hands to the
// overlay at once, from a fixed scratch array: building the whole run
// first grew a slice of it, and a 1M-put batch spent more time growing
// that slice than in the overlay (W6's kvbuf-one-batch row).
const applyRun = 256

// Apply applies every change of b as op (the host's op number; 0 if the host
// does not track ops): one admission, so they land in the same flush, and op
// counts as complete (the next flush may cover it; no EndOp needed).
//
// The batch's KV changes are atomic: a reader (Get, GetMany, an iterator,
// a Snapshot) sees all of them or none, and batches applied concurrently
// over the same keys leave the state of some serial order of them (each
// batch takes one range of sequence numbers, and a change never replaces
// one with a higher number). Bit changes are applied one by one: a
// concurrent reader of a bitslice may see part of them (a Snapshot never
// does). Changes to a keyspace dropped concurrently are discarded, as if
// the batch had come first.
//
// Errors (nothing applied): the first problem recorded while adding changes
// (ErrEmptyKey, ErrKeyTooLarge, ErrValueTooLarge, ErrBadRange,
// ErrOutOfRange, ErrForeign), ErrDropped for a keyspace dropped before the
// call, ErrStaleOp, ErrClosed, ctx.Err(). A nil b, or a batch of another
// engine's NewBatch, is ErrForeign.
func (db *DB) Apply(ctx context.Context, b *Batch, op uint64) error {
	if b == nil || b.db != db {
		return kverr.Errorf("apply: batch: %w", ErrForeign)
	}
	if b.err != nil {
		return b.err
	}
	for i := range b.ops {
		if k := b.ops[i].k; k != nil && k.ov.Dropped() {
			return k.wrap(ErrDropped)
		}
	}
	if db.share != nil {
		granted, err := db.budgetAdmit(ctx)
		if err != nil {
			return err
		}
		defer db.budgetDone(granted)
	}
	t, err := db.flusher.BeginWrite(ctx, op, true)
	if err != nil || t.Skipped() {
		return err // nil if redelivered: see \"Ops and the watermark\"
	}
	defer t.End()
	// The batch's KV changes are numbered from one range and published
	// together (before End, so a freeze never sees part of the batch;
	// publication order 13 in internal/buffer/protocol.go):
	// readers see all of them or none, and a concurrent batch over the
	// same keys is ordered wholly before or after this one.
	seqs := db.acct.Seq().Reserve(b.kvOps())
	defer seqs.Publish()
	var scratch [applyRun]buffer.Change
	var skip []bool // changes not applied (a keyspace dropped meanwhile)
	for i := 0; i < len(b.ops); {
		o := &b.ops[i]
		if o.k != nil {
			// A run of changes to one keyspace goes to its overlay
			// applyRun at a time (grouped by shard there), numbered
			// from one range taken for the whole run.
			j := i
			for j < len(b.ops) && b.ops[j].k == o.k {
				j++
			}
			first := seqs.Take(j - i)
			var err error
			for c := i; c < j && err == nil; c += applyRun {
				changes := scratch[:0]
				for k := c; k < min(c+applyRun, j); k++ {
					changes = append(changes, b.change(&b.ops[k]))
				}
				err = o.k.ov.ApplyAt(first+uint64(c-i), changes)
			}
			if err != nil && !errors.Is(err, ErrDropped) {
				// Every change was checked once, when it was added
				// to the batch (ApplyAt does not check again): this
				// is a bug, not bad input, and the batch is half
				// applied.
				panic(fmt.Sprintf("kvbuf: batch changes %d-%d failed after validation: %v", i, j-1, err))
			}
			if err != nil && db.feed.on.Load() {
				skip = skipOps(skip, len(b.ops), i, j)
			}
			i = j
			continue
		}
		var err error
		switch o.kind {
		case opSet:
			err = o.b.ov.Set(o.lo, o.v)
		case opSetRange:
			err = o.b.ov.SetRange(o.lo, o.hi, o.v)
		}
		if err != nil && !errors.Is(err, ErrDropped) {
			panic(fmt.Sprintf("kvbuf: batch change %d failed after validation: %v", i, err))
		}
		if (err != nil || o.kind == opSetRange && o.lo >= o.hi) && db.feed.on.Load() {
			skip = skipOps(skip, len(b.ops), i, i+1)
		}
		i++
	}
	if db.feed.on.Load() {
		db.feed.batch(op, b, skip) // watch.go: before End, as every record
	}
	return nil
}

// skipOps marks changes [i, j) of a batch of n as not applied.
func skipOps(skip []bool, n, i, j int) []bool {
	if skip == nil {
		skip = make([]bool, n)
	}
	for ; i < j; i++ {
		skip[i] = true
	}
	return skip
}

// change returns the overlay's form of KV change o.
func (b *Batch) change(o *batchOp) buffer.Change {
	switch o.kind {
	case opPut:
		return buffer.Change{Kind: buffer.ChangePut, Key: b.view(o.a0, o.a1), Value: b.view(o.b0, o.b1)}
	case opDelete:
		return buffer.Change{Kind: buffer.ChangeDelete, Key: b.view(o.a0, o.a1)}
	}
	c := buffer.Change{Kind: buffer.ChangeDeleteRange}
	if o.a0 >= 0 {
		c.Key = b.view(o.a0, o.a1)
	}
	if o.b0 >= 0 {
		c.Value = b.view(o.b0, o.b1)
	}
	return c
}

// kvOps returns the number of KV changes in the batch.
func (b *Batch) kvOps() int {
	n := 0
	for i := range b.ops {
		if b.ops[i].k != nil {
			n++
		}
	}
	return n
}

// Update builds a batch with fn and applies it as op if fn returns nil (see
// Apply). fn's error is returned as is, with nothing applied; a nil fn is
// ErrNilArgument.
func (db *DB) Update(ctx context.Context, op uint64, fn func(b *Batch) error) error {
	if fn == nil {
		return kverr.Errorf("update: fn: %w", ErrNilArgument)
	}
	b := db.NewBatch()
	if err := fn(b); err != nil {
		return err
	}
	return db.Apply(ctx, b, op)
}

// write is the one body of the single-call writes (KV.Put, KV.Delete,
// KV.DeleteRange, Bits.Set, Bits.SetRange). bad is the input check's
// result, taken before admission so that a bad write neither waits for room
// nor changes anything. Then it admits the write of op (waiting for room if
// pending memory is over its bound), skips it if op is redelivered (see
// "Ops and the watermark"), applies it and ends it. Errors carry the
// handle's kind and name (mapErr), except the context's, returned as
// ctx.Err() is.
//
// apply must not be kept: the closures the callers pass then stay on their
// stack, and a write allocates nothing here.
func (db *DB) write(ctx context.Context, op uint64, kind, name string, bad error, apply func() error) error {
	if bad != nil {
		return mapErr(bad, kind, name)
	}
	if db.share != nil {
		granted, err := db.budgetAdmit(ctx)
		if err != nil {
			return err
		}
		defer db.budgetDone(granted)
	}
	// One call, no Ticket: apply runs under the write barrier (and
	// publishes its change before the barrier is left, publication
	// order 13); a redelivered op returns nil without it.
	return writeErr(db.flusher.Write(ctx, op, apply), kind, name)
}

// writeErr is a single write's error as its caller returns it: a context's
// error as it is, the others mapped (mapErr).
func writeErr(err error, kind, name string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return mapErr(err, kind, name)
}
