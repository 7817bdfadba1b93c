package kvbuf

import (
	"github.com/kvbuf/kvbuf/internal/buffer"
	"iter"
)

// Iter iterates over a keyspace in key order, forwards and backwards,
// merging pending changes with the store; deleted and range-deleted keys are
// skipped. It is not safe for concurrent use; Close it when done.
//
// What a scan of a live keyspace sees: the keyspace as it was at one
// instant during NewIter, pending changes and store alike: every change
// that completed before NewIter was called, none that started after it
// returned, never part of a Batch. Changes made during the scan, and
// flushes, change nothing it returns. An iterator from a Snapshot sees
// exactly the snapshot.
//
// Close of the engine: a positioning call reads, then checks whether Close
// has begun; once it has, the call returns false, Valid is false and Key
// and Value are nil from then on, and Error (and Close) return an error
// matching ErrClosed. What a call that returned true positioned the
// iterator at (Valid, Key, Value) does not change until the next
// positioning call or Close of the iterator, whatever the engine's Close
// does meanwhile: the key and value are the iterator's own or its pinned
// tables' memory, never the store's buffers, which the engine's Close
// releases. So an iterator racing Close yields keys that are in the data,
// or stops with ErrClosed.
type Iter struct {
	db   *DB
	name string       // the keyspace's, for errors
	it   *buffer.Iter // nil: an empty keyspace (a snapshot's, that did not exist then)
	err  error
}

// step checks, after a positioning call, that the engine is still open.
func (it *Iter) step(ok bool) bool {
	if it.err != nil {
		return false
	}
	if err := it.db.closed(); err != nil {
		it.err = err
		return false
	}
	if !ok {
		if err := it.it.Error(); err != nil {
			it.err = it.mapErr(err)
		}
	}
	return ok
}

func (it *Iter) mapErr(err error) error { return mapErr(err, "keyspace", it.name) }

// First moves to the first key and reports whether there is one.
func (it *Iter) First() bool { return it.err == nil && it.it != nil && it.step(it.it.First()) }

// Last moves to the last key and reports whether there is one.
func (it *Iter) Last() bool { return it.err == nil && it.it != nil && it.step(it.it.Last()) }

// Next moves to the next key and reports whether there is one. Unpositioned
// or at the end it returns false.
func (it *Iter) Next() bool { return it.err == nil && it.it != nil && it.step(it.it.Next()) }

// Prev moves to the previous key and reports whether there is one.
func (it *Iter) Prev() bool { return it.err == nil && it.it != nil && it.step(it.it.Prev()) }

// SeekGE moves to the first key at or after key (within the bounds).
func (it *Iter) SeekGE(key []byte) bool {
	return it.err == nil && it.it != nil && it.step(it.it.SeekGE(key))
}

// SeekLT moves to the last key before key (within the bounds).
func (it *Iter) SeekLT(key []byte) bool {
	return it.err == nil && it.it != nil && it.step(it.it.SeekLT(key))
}

// Valid reports whether the iterator is positioned at a key: whether the
// last positioning call returned true (see Iter for Close of the engine).
func (it *Iter) Valid() bool {
	// No check of the engine's closing flag here: the positioning call
	// checked it after its read, and an answer that changed between the
	// move and the read of the key would be a position not in the data.
	return it.err == nil && it.it != nil && it.it.Valid()
}

// Key returns the current key, or nil when not positioned. It is valid until
// the next positioning call; copy it to keep it, and do not modify it.
func (it *Iter) Key() []byte {
	if !it.Valid() {
		return nil
	}
	return it.it.Key()
}

// Value returns the current value, or nil when not positioned. It is valid
// until the next positioning call; copy it to keep it, and do not modify it.
func (it *Iter) Value() []byte {
	if !it.Valid() {
		return nil
	}
	return it.it.Value()
}

// Error returns the error that stopped the iteration, if any: once the
// engine has closed, ErrClosed (even while the iterator still holds the
// position of a call that returned true before).
func (it *Iter) Error() error {
	if it.err != nil {
		return it.err
	}
	if it.it == nil {
		return it.db.closed()
	}
	if err := it.it.Error(); err != nil {
		return it.mapErr(err)
	}
	return it.db.closed()
}

// Close releases the iterator. It returns the error that stopped the
// iteration, if any (ErrClosed once the engine has closed). It is
// idempotent.
func (it *Iter) Close() error {
	var cerr error
	if it.it != nil {
		cerr = it.it.Close()
	}
	switch {
	case it.err != nil:
		return it.err
	case cerr != nil:
		it.err = it.mapErr(cerr)
		return it.err
	}
	return it.db.closed()
}

// All returns the iterator's keys and values from the first one (First) to
// the last, in increasing order. It ends early, without error, when the
// loop stops or an error stops the iterator: check Error after the loop.
// The key and value are valid only until the loop body returns (see
// Iter.Key). The iterator is left where the loop stopped; it stays open.
func (it *Iter) All() iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		for ok := it.First(); ok; ok = it.Next() {
			if !yield(it.Key(), it.Value()) {
				return
			}
		}
	}
}

// allOf is the sequence of KV.All and SnapshotKV.All: the keys and values
// of the iterator newIter opens with o, closed when the loop ends; an
// error opening it ends the sequence at once.
func allOf(newIter func(*IterOptions) (*Iter, error), o *IterOptions) iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		it, err := newIter(o)
		if err != nil {
			return
		}
		defer it.Close()
		it.All()(yield)
	}
}
