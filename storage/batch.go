package storage

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
)

// maxBatchBytes is pebble's limit on a batch's encoded size; growing a
// pebble batch past it panics, so Batch checks first.
const maxBatchBytes = math.MaxUint32

// recordOverhead bounds the bytes pebble adds to each record besides key
// and value: a kind byte and two 32-bit varints.
const recordOverhead = 1 + 2*binary.MaxVarintLen32

// Batch collects user puts and deletes, meta entries and a watermark, which
// Store.Apply commits atomically. The zero value is not usable; get one from
// Store.NewBatch. A Batch is not safe for concurrent use. It needs no Close:
// dropping it is enough.
type Batch struct {
	s  *Store
	pb *pebble.Batch
	n  int

	wm    uint64
	hasWM bool

	// err is sticky: the first operation that would have overflowed the
	// batch; Apply returns it.
	err error
	// limit is maxBatchBytes; a field so tests can lower it.
	limit uint64
}

// NewBatch returns an empty batch for s. It works on a closed store too;
// Apply then reports ErrClosed.
func (s *Store) NewBatch() *Batch {
	return &Batch{s: s, pb: s.db.NewBatch(), limit: maxBatchBytes}
}

// fits reports whether a record with a keyLen-byte key and a valueLen-byte
// value fits in the batch and no earlier operation failed to fit.
func (b *Batch) fits(keyLen, valueLen int) bool {
	return b.err == nil &&
		uint64(b.pb.Len())+recordOverhead+uint64(keyLen)+uint64(valueLen) < b.limit
}

// tooLarge records the sticky ErrBatchTooLarge for key (unless an earlier
// operation already failed). key is a string copy so that callers' slices do
// not escape.
func (b *Batch) tooLarge(key string, valueLen int) {
	if b.err == nil {
		b.err = fmt.Errorf("storage: batch of %d bytes adding key %q with a %d-byte value: %w",
			b.pb.Len(), key, valueLen, ErrBatchTooLarge)
	}
}

// Put sets the user key to value. Both are copied; any byte string,
// including the empty one, is a valid key.
func (b *Batch) Put(key, value []byte) {
	if !b.fits(len(key)+1, len(value)) {
		b.tooLarge(string(key), len(value))
		return
	}
	op := b.pb.SetDeferred(len(key)+1, len(value))
	op.Key[0] = tagUser
	copy(op.Key[1:], key)
	copy(op.Value, value)
	_ = op.Finish() // only fails for indexed batches
	b.n++
}

// Delete removes the user key.
func (b *Batch) Delete(key []byte) {
	if !b.fits(len(key)+1, 0) {
		b.tooLarge(string(key), 0)
		return
	}
	op := b.pb.DeleteDeferred(len(key) + 1)
	op.Key[0] = tagUser
	copy(op.Key[1:], key)
	_ = op.Finish()
	b.n++
}

// SetMeta sets the named meta entry (for example a catalog record). Meta
// entries live in their own namespace: no user key can read or overwrite
// them, and user iterators never see them.
func (b *Batch) SetMeta(name string, value []byte) {
	if !b.fits(len(name)+1, len(value)) {
		b.tooLarge(name, len(value))
		return
	}
	op := b.pb.SetDeferred(len(name)+1, len(value))
	op.Key[0] = tagMeta
	copy(op.Key[1:], name)
	copy(op.Value, value)
	_ = op.Finish()
	b.n++
}

// SetWatermark records op as the watermark this batch makes durable. Called
// more than once, the highest value wins.
func (b *Batch) SetWatermark(op uint64) {
	if !b.hasWM || op > b.wm {
		b.wm = op
	}
	b.hasWM = true
}

// Len returns the number of Put, Delete and SetMeta operations in the batch
// (the watermark is not counted).
func (b *Batch) Len() int { return b.n }

// Reset empties the batch for reuse, keeping its buffer when it is small.
func (b *Batch) Reset() {
	b.pb.Reset()
	b.n = 0
	b.wm, b.hasWM = 0, false
	b.err = nil
}

// Apply commits b as one synced pebble batch: when it returns nil, every
// operation in b and its watermark are durable, atomically (contract 4).
//
// The persisted watermark never goes backwards: if b's watermark is not
// above the persisted one, it is left out and the higher one stays. A batch
// with no operations and no new watermark is a no-op (no sync).
//
// Apply empties b whether or not it succeeds; when it fails, nothing of b
// was applied. Errors: ErrClosed, ErrReadOnly, ErrBatchTooLarge,
// ErrForeignBatch.
func (s *Store) Apply(b *Batch) error {
	defer b.Reset()
	if b.s != s {
		return fmt.Errorf("storage: apply to %q: %w", s.dir, ErrForeignBatch)
	}
	if b.err != nil {
		return b.err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if s.readOnly {
		return fmt.Errorf("storage: apply to %q: %w", s.dir, ErrReadOnly)
	}
	writeWM := false
	if b.hasWM {
		// Serialise watermark batches so that two of them cannot commit in
		// the opposite order to their max() decisions.
		s.applyMu.Lock()
		defer s.applyMu.Unlock()
		if b.wm > s.wm.Load() {
			writeWM = true
			op := b.pb.SetDeferred(len(watermarkKey), 8)
			copy(op.Key, watermarkKey)
			binary.BigEndian.PutUint64(op.Value, b.wm)
			_ = op.Finish()
		}
	}
	if b.pb.Empty() {
		return nil
	}
	if err := s.db.Apply(b.pb, pebble.Sync); err != nil {
		return s.wrapErr("apply", err)
	}
	if writeWM {
		s.wm.Store(b.wm)
	}
	return nil
}
