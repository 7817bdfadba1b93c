package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// maxBatchBytes is pebble's limit on a batch's encoded size; growing a
// pebble batch past it panics, so Batch checks first.
const maxBatchBytes = math.MaxUint32

// recordOverhead bounds the bytes pebble adds to each record besides key
// and value: a kind byte and two 32-bit varints.
const recordOverhead = 1 + 2*binary.MaxVarintLen32

// Batch collects user puts, deletes and range deletions, meta entries and a
// watermark, which Store.Commit (or Store.Apply) commits atomically. The
// zero value is not usable; get one from Store.NewBatch. A Batch is not
// safe for concurrent use. It needs no Close: dropping it is enough.
//
// An operation that cannot be committed (keyspace ID 0, or growing the
// batch past pebble's 4 GiB limit) is dropped and makes the batch fail:
// every later operation is dropped too, and Commit returns the error and
// commits nothing.
type Batch struct {
	s  *Store
	pb *pebble.Batch
	n  int

	wm    uint64
	hasWM bool

	// err is sticky: the first operation that could not be added; Commit
	// returns it.
	err error
	// limit is maxBatchBytes; a field so tests can lower it.
	limit uint64
}

// NewBatch returns an empty batch for s. It works on a closed store too;
// Commit then reports kvbuf.ErrClosed.
func (s *Store) NewBatch() *Batch {
	return &Batch{s: s, pb: s.db.NewBatch(), limit: maxBatchBytes}
}

// fits reports whether a record with a keyLen-byte key and a valueLen-byte
// value (both as stored) fits in the batch.
func (b *Batch) fits(keyLen, valueLen int) bool {
	return uint64(b.pb.Len())+recordOverhead+uint64(keyLen)+uint64(valueLen) < b.limit
}

// fail records the sticky error for an operation that could not be added
// (callers check that no earlier one did): keyspace 0 if badKeyspace, else
// too large. what names the operation; callers build it from a copy of the
// key (string(key)) so that their key slices do not escape.
func (b *Batch) fail(what string, badKeyspace bool, valueLen int) {
	if badKeyspace {
		b.err = kverr.Errorf("batch: %s: keyspace 0: %w", what, kverr.ErrInvalidKeyspace)
	} else {
		b.err = kverr.Errorf("batch of %d bytes adding %s with a %d-byte value: %w",
			b.pb.Len(), what, valueLen, kverr.ErrBatchTooLarge)
	}
}

// Put sets key to value in keyspace ks. Both are copied; any byte string,
// including the empty one, is a valid key.
func (b *Batch) Put(ks KeyspaceID, key, value []byte) {
	if b.err != nil {
		return
	}
	if ks == 0 || !b.fits(userPrefixLen+len(key), len(value)) {
		b.fail(fmt.Sprintf("key %q", string(key)), ks == 0, len(value))
		return
	}
	op := b.pb.SetDeferred(userPrefixLen+len(key), len(value))
	putUserKey(op.Key, ks, key)
	copy(op.Value, value)
	_ = op.Finish() // only fails for indexed batches
	b.n++
}

// Delete removes key from keyspace ks.
func (b *Batch) Delete(ks KeyspaceID, key []byte) {
	if b.err != nil {
		return
	}
	if ks == 0 || !b.fits(userPrefixLen+len(key), 0) {
		b.fail(fmt.Sprintf("key %q", string(key)), ks == 0, 0)
		return
	}
	op := b.pb.DeleteDeferred(userPrefixLen + len(key))
	putUserKey(op.Key, ks, key)
	_ = op.Finish()
	b.n++
}

// DeleteRange removes every key k of keyspace ks with lower <= k < upper.
// A nil lower means the start of the keyspace and a nil upper its end, so
// DeleteRange(ks, nil, nil) drops the whole keyspace. An empty range
// (lower >= upper) adds nothing. It hides only what was written before it:
// a key put later in the same batch, or in a later batch, stays.
func (b *Batch) DeleteRange(ks KeyspaceID, lower, upper []byte) {
	if b.err != nil {
		return
	}
	endLen := userPrefixLen + len(upper)
	if upper == nil && ks == math.MaxUint32 {
		endLen = 1 // keyspaceEnd: {tagUser + 1}
	}
	if ks != 0 && upper != nil && bytes.Compare(lower, upper) >= 0 {
		return
	}
	if ks == 0 || !b.fits(userPrefixLen+len(lower), endLen) {
		b.fail(fmt.Sprintf("range deletion [%q, %q)", string(lower), string(upper)), ks == 0, endLen)
		return
	}
	op := b.pb.DeleteRangeDeferred(userPrefixLen+len(lower), endLen)
	putUserKey(op.Key, ks, lower)
	if upper != nil {
		putUserKey(op.Value, ks, upper)
	} else {
		keyspaceEnd(op.Value[:0], ks)
	}
	_ = op.Finish()
	b.n++
}

// SetMeta sets the named meta entry (for example a catalog record). Meta
// entries live in their own namespace: no user key can read or overwrite
// them, and user iterators never see them.
func (b *Batch) SetMeta(name string, value []byte) {
	if b.err != nil {
		return
	}
	if !b.fits(1+len(name), len(value)) {
		b.fail(fmt.Sprintf("meta %q", name), false, len(value))
		return
	}
	op := b.pb.SetDeferred(1+len(name), len(value))
	appendMetaKey(op.Key[:0], name)
	copy(op.Value, value)
	_ = op.Finish()
	b.n++
}

// DeleteMeta removes the named meta entry.
func (b *Batch) DeleteMeta(name string) {
	if b.err != nil {
		return
	}
	if !b.fits(1+len(name), 0) {
		b.fail(fmt.Sprintf("meta %q", name), false, 0)
		return
	}
	op := b.pb.DeleteDeferred(1 + len(name))
	appendMetaKey(op.Key[:0], name)
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

// Len returns the number of operations in the batch: Put, Delete,
// DeleteRange, SetMeta and DeleteMeta calls that were added (the watermark
// is not counted, nor are empty ranges and dropped operations).
func (b *Batch) Len() int { return b.n }

// Reset empties the batch for reuse, keeping its buffer when it is small.
func (b *Batch) Reset() {
	b.pb.Reset()
	b.n = 0
	b.wm, b.hasWM = 0, false
	b.err = nil
}

// addWatermark appends the watermark record to the pebble batch.
func (b *Batch) addWatermark(wm uint64) {
	op := b.pb.SetDeferred(len(watermarkKey), 8)
	copy(op.Key, watermarkKey)
	binary.BigEndian.PutUint64(op.Value, wm)
	_ = op.Finish()
}
