package storage

import (
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// Iter iterates over user keys in [lower, upper) in key order. Keys are
// returned without the internal namespace tag. An Iter is not safe for
// concurrent use, but Store.Close may run concurrently with it: Close
// closes the iterator, after which its methods return false and Error
// returns ErrClosed.
type Iter struct {
	s *Store
	// mu excludes Store.Close from the iterator's own calls. It is per
	// iterator, so iterators never contend with each other or with Get.
	mu     sync.Mutex
	it     *pebble.Iterator
	closed bool // by Iter.Close or Store.Close
	err    error

	lower, upper []byte // tagged bounds; pebble requires them to stay put
	seek         []byte // scratch for the tagged SeekGE key
}

// NewIter returns an iterator over user keys k with lower <= k < upper. A
// nil lower or upper means unbounded on that side (an empty non-nil lower is
// the empty key, the smallest one). The iterator is unpositioned: call First
// or SeekGE. Close it when done.
func (s *Store) NewIter(lower, upper []byte) (*Iter, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	it := &Iter{s: s}
	// lower nil and empty both tag to {tagUser}: the empty key is the
	// smallest user key, so they mean the same thing.
	it.lower = appendKey(nil, tagUser, lower)
	if upper == nil {
		it.upper = []byte{tagUser + 1}
	} else {
		it.upper = appendKey(nil, tagUser, upper)
	}
	pit, err := s.db.NewIter(&pebble.IterOptions{LowerBound: it.lower, UpperBound: it.upper})
	if err != nil {
		return nil, s.wrapErr("new iterator", err)
	}
	it.it = pit
	s.itersMu.Lock()
	s.iters[it] = struct{}{}
	s.itersMu.Unlock()
	return it, nil
}

// First moves to the first key in range and reports whether there is one.
func (it *Iter) First() bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed {
		return false
	}
	return it.it.First()
}

// Next moves to the next key and reports whether there is one.
func (it *Iter) Next() bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed {
		return false
	}
	return it.it.Next()
}

// SeekGE moves to the first key >= key in range and reports whether there
// is one. A key below the lower bound seeks to the lower bound.
func (it *Iter) SeekGE(key []byte) bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed {
		return false
	}
	it.seek = appendKey(it.seek[:0], tagUser, key)
	return it.it.SeekGE(it.seek)
}

// Valid reports whether the iterator is positioned at a key.
func (it *Iter) Valid() bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	return !it.closed && it.it.Valid()
}

// Key returns the current user key, or nil when not positioned. It is valid
// until the next positioning call or Close; copy it to keep it.
func (it *Iter) Key() []byte {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed || !it.it.Valid() {
		return nil
	}
	return it.it.Key()[1:]
}

// Value returns the current value, or nil when not positioned or when
// reading it failed (see Error). It is valid until the next positioning
// call or Close; copy it to keep it.
func (it *Iter) Value() []byte {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed || !it.it.Valid() {
		return nil
	}
	v, err := it.it.ValueAndErr()
	if err != nil {
		it.err = it.s.wrapKeyErr("iterate", string(it.it.Key()[1:]), err)
		return nil
	}
	return v
}

// Error returns the first error the iterator met (corruption wraps
// ErrCorrupt), or ErrClosed after Store.Close closed it.
func (it *Iter) Error() error {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.err != nil {
		return it.err
	}
	if it.closed {
		return nil
	}
	if err := it.it.Error(); err != nil {
		return it.s.wrapErr("iterate", err)
	}
	return nil
}

// Close releases the iterator and returns its error, if any. It is
// idempotent; after Store.Close closed the iterator it returns ErrClosed.
func (it *Iter) Close() error {
	it.mu.Lock()
	if it.closed {
		err := it.err
		it.mu.Unlock()
		return err
	}
	it.closed = true
	cerr := it.it.Close()
	if it.err == nil && cerr != nil {
		it.err = it.s.wrapErr("close iterator", cerr)
	}
	err := it.err
	it.mu.Unlock()

	it.s.itersMu.Lock()
	delete(it.s.iters, it)
	it.s.itersMu.Unlock()
	return err
}

// closeByStore is Store.Close closing an iterator its owner left open.
func (it *Iter) closeByStore() error {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed {
		return nil
	}
	it.closed = true
	cerr := it.it.Close()
	if it.err == nil {
		it.err = fmt.Errorf("storage: iterator closed by Store.Close of %q: %w", it.s.dir, ErrClosed)
	}
	if cerr != nil {
		return it.s.wrapErr("close iterator", cerr)
	}
	return nil
}
