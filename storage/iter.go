package storage

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Iter iterates over the user keys of one keyspace in [lower, upper), in
// either direction. Keys are returned without the stored tag and keyspace
// ID. An Iter from Store.NewIter reads the store as of its creation; one
// from Snapshot.NewIter reads the snapshot.
//
// An Iter is not safe for concurrent use, but Store.Close may run
// concurrently with it: Close closes the iterator, after which its methods
// return false and Error returns kvbuf.ErrClosed. Key and Value return the
// iterator's own copies, never pebble's buffers (which Store.Close
// releases), so what they returned stays readable until the owner's next
// call, whenever Store.Close runs.
//
// Positioning: First, Last, SeekGE and SeekLT position the iterator. Next
// and Prev on an iterator never positioned return false. An iterator that
// ran off one end can turn back: Prev after Next (or SeekGE) returned false
// moves to the last key, Next after Prev (or SeekLT) returned false to the
// first.
type Iter struct {
	s  *Store
	ks KeyspaceID
	// mu excludes Store.Close from the iterator's own calls. It is per
	// iterator, so iterators never contend with each other or with Get.
	mu sync.Mutex
	// it is nil when the range is empty (lower >= upper): pebble is never
	// given inverted bounds, and every positioning call returns false.
	it         *pebble.Iterator
	closed     bool // by Iter.Close or Store.Close
	positioned bool // a First, Last or Seek call ran
	err        error

	bounds  []byte // stored lower then upper bound; pebble requires them to stay put
	seekKey []byte // scratch for stored seek keys

	// key and val are the iterator's own copies of the current key and
	// value, made under mu by Key and Value: pebble's buffers are released
	// when Store.Close closes the iterator, which may happen between a
	// call and the caller's use of its result, so nothing of pebble's is
	// returned. Only the owner's next call overwrites them.
	key, val []byte
}

// NewIter returns an iterator over the keys k of keyspace ks with
// lower <= k < upper. A nil lower or upper means unbounded on that side (an
// empty non-nil lower is the empty key, the smallest one, so it means the
// same). lower >= upper gives an empty iterator. The iterator reads the
// store as of this call and is unpositioned. Close it when done.
//
// Errors: kvbuf.ErrInvalidKeyspace, kvbuf.ErrClosed.
func (s *Store) NewIter(ks KeyspaceID, lower, upper []byte) (*Iter, error) {
	if ks == 0 {
		return nil, errKeyspace("new iterator")
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, kverr.ErrClosed
	}
	return s.newIter(s.db, ks, lower, upper)
}

// newIter opens an iterator on r (the db or a snapshot) and registers it
// for Store.Close. The caller holds the lock that keeps r open.
func (s *Store) newIter(r pebble.Reader, ks KeyspaceID, lower, upper []byte) (*Iter, error) {
	it := &Iter{s: s, ks: ks}
	it.bounds = make([]byte, 0, 2*userPrefixLen+len(lower)+len(upper))
	it.bounds = appendUserKey(it.bounds, ks, lower)
	lo := it.bounds
	if upper == nil {
		it.bounds = keyspaceEnd(it.bounds, ks)
	} else {
		it.bounds = appendUserKey(it.bounds, ks, upper)
	}
	hi := it.bounds[len(lo):]
	lo = lo[:len(lo):len(lo)]
	if bytes.Compare(lo, hi) < 0 {
		pit, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return nil, s.wrapErr("new iterator", err)
		}
		it.it = pit
	}
	s.openMu.Lock()
	s.iters[it] = struct{}{}
	s.openMu.Unlock()
	return it, nil
}

// usable reports whether positioning calls may reach pebble. Callers hold
// it.mu.
func (it *Iter) usable() bool { return !it.closed && it.it != nil }

// move runs step under it.mu, on a usable iterator only; a step that
// positions (First, Last) may come first, the others (Next, Prev) only
// after one that positioned.
func (it *Iter) move(positions bool, step func(*pebble.Iterator) bool) bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	if !it.usable() || !positions && !it.positioned {
		return false
	}
	it.positioned = true
	return step(it.it)
}

// seek is move for the seeks, to the stored key of key in the keyspace.
func (it *Iter) seek(key []byte, step func(*pebble.Iterator, []byte) bool) bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	if !it.usable() {
		return false
	}
	it.positioned = true
	it.seekKey = appendUserKey(it.seekKey[:0], it.ks, key)
	return step(it.it, it.seekKey)
}

// First moves to the first key in range and reports whether there is one.
func (it *Iter) First() bool { return it.move(true, (*pebble.Iterator).First) }

// Last moves to the last key in range and reports whether there is one.
func (it *Iter) Last() bool { return it.move(true, (*pebble.Iterator).Last) }

// Next moves to the next key and reports whether there is one.
func (it *Iter) Next() bool { return it.move(false, (*pebble.Iterator).Next) }

// Prev moves to the previous key and reports whether there is one.
func (it *Iter) Prev() bool { return it.move(false, (*pebble.Iterator).Prev) }

// SeekGE moves to the first key >= key in range and reports whether there
// is one. A key below the lower bound seeks to the lower bound.
func (it *Iter) SeekGE(key []byte) bool { return it.seek(key, (*pebble.Iterator).SeekGE) }

// SeekLT moves to the last key < key in range and reports whether there is
// one. A key above the upper bound seeks to the upper bound.
func (it *Iter) SeekLT(key []byte) bool { return it.seek(key, (*pebble.Iterator).SeekLT) }

// Valid reports whether the iterator is positioned at a key.
func (it *Iter) Valid() bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	return it.usable() && it.it.Valid()
}

// Key returns the current user key, or nil when not positioned at one
// (and after Store.Close closed the iterator). The slice is the
// iterator's own copy: valid until the next call of Key or of a
// positioning method, or Close, also if Store.Close closes the iterator
// meanwhile; copy it to keep it.
func (it *Iter) Key() []byte {
	it.mu.Lock()
	defer it.mu.Unlock()
	if !it.usable() || !it.it.Valid() {
		return nil
	}
	it.key = appendOwned(it.key, it.it.Key()[userPrefixLen:])
	return it.key
}

// Value returns the current value, or nil when not positioned at a key,
// when reading it failed (see Error), and after Store.Close closed the
// iterator. As Key's, the slice is the iterator's own copy, valid until
// the next call of Value or of a positioning method, or Close, whatever
// Store.Close does meanwhile; copy it to keep it.
func (it *Iter) Value() []byte {
	it.mu.Lock()
	defer it.mu.Unlock()
	if !it.usable() || !it.it.Valid() {
		return nil
	}
	v, err := it.it.ValueAndErr()
	if err != nil {
		it.err = it.s.wrapErr(fmt.Sprintf("iterate keyspace %d key %q", it.ks, it.it.Key()[userPrefixLen:]), err)
		return nil
	}
	it.val = appendOwned(it.val, v)
	return it.val
}

// appendOwned copies p into buf's memory, returning a non-nil slice (an
// empty value is not the nil of "no value").
func appendOwned(buf, p []byte) []byte {
	if buf == nil {
		buf = make([]byte, 0, max(len(p), 16))
	}
	return append(buf[:0], p...)
}

// Error returns the first error the iterator met (corruption wraps
// kvbuf.ErrCorruptBlock), or kvbuf.ErrClosed after Store.Close closed it.
func (it *Iter) Error() error {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.err != nil {
		return it.err
	}
	if !it.usable() {
		return nil
	}
	if err := it.it.Error(); err != nil {
		return it.s.wrapErr("iterate", err)
	}
	return nil
}

// Close releases the iterator and returns its error, if any. It is
// idempotent; after Store.Close closed the iterator it returns kvbuf.ErrClosed.
func (it *Iter) Close() error {
	err := it.close(nil)
	untrack(it.s, it.s.iters, it)
	return err
}

// closeByStore is Store.Close closing an iterator its owner left open.
func (it *Iter) closeByStore() error {
	return it.close(kverr.Errorf("iterator closed by Store.Close of %q: %w", it.s.dir, kverr.ErrClosed))
}

// close closes the iterator if it is open. For its owner (byStore nil) it
// returns the iterator's error, pebble's Close error included, on every
// call. For Store.Close, byStore is the error the iterator's calls return
// from then on (unless it failed before), and close returns pebble's Close
// error, or nil if the owner closed it first.
func (it *Iter) close(byStore error) error {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed {
		if byStore != nil {
			return nil
		}
		return it.err
	}
	it.closed = true
	if it.err == nil {
		it.err = byStore
	}
	var cerr error
	if it.it != nil {
		if cerr = it.it.Close(); cerr != nil {
			cerr = it.s.wrapErr("close iterator", cerr)
		}
	}
	if byStore != nil {
		return cerr
	}
	if it.err == nil {
		it.err = cerr
	}
	return it.err
}
