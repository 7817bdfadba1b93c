package buffer

import (
	"github.com/kvbuf/kvbuf/storage"
)

// Iter is an ordered iterator over a KV: it merges pending changes (active
// and frozen sets, newest wins) with stored keys in key order; tombstones
// hide keys. An Iter is not safe for concurrent use; Close it when done.
//
// What a scan concurrent with writes sees: the store side is a pebble
// snapshot taken at NewIter; the pending side is read live. A key written
// (or deleted) while the scan runs may or may not be seen, and if seen shows
// its value at the moment the iterator reached it; every change that
// completed before NewIter is seen (or a later one). The scan is therefore
// not a point-in-time snapshot across keys. Each key is returned at most
// once, in increasing order. A flush running during the scan changes
// nothing it returns: the tables it read are kept intact until Close.
type Iter struct {
	kv           *KV
	lower, upper []byte // user bounds (no prefix); nil = unbounded
	pinned       [2]*kvTable
	cur          mergeCursor[string, kvVal]
	st           *storage.Iter
	sValid       bool // st positioned at a key in range

	valid     bool
	fromPend  bool // current key came from the pending side
	fromStore bool // current key is also the store's current key
	key, val  []byte
	err       error
	closed    bool
	seekBuf   []byte
}

// NewIter returns an iterator over keys k with lower <= k < upper (nil means
// unbounded on that side). It is unpositioned: call First or SeekGE. Keys
// and values it returns are without the KV's KeyPrefix.
func (kv *KV) NewIter(lower, upper []byte) (*Iter, error) {
	it := &Iter{kv: kv}
	if lower != nil {
		it.lower = append([]byte{}, lower...)
	}
	if upper != nil {
		it.upper = append([]byte{}, upper...)
	}
	// Pin the tables in reader order (active, then frozen), re-checking each
	// is still published after pinning: a released table is only recycled
	// when unpinned, and one released before we pinned it is in the store,
	// whose snapshot is taken last.
	for {
		a := kv.active.Load()
		a.pins.Add(1)
		if kv.active.Load() == a {
			it.pinned[0] = a
			break
		}
		a.pins.Add(-1)
	}
	if f := kv.frozen.Load(); f != nil {
		f.pins.Add(1)
		if kv.frozen.Load() == f {
			it.pinned[1] = f
		} else {
			f.pins.Add(-1)
		}
	}
	it.cur.addTable(it.pinned[0], 0)
	it.cur.addTable(it.pinned[1], 1)
	if kv.st == nil {
		it.unpin()
		return nil, storage.ErrClosed
	}
	var slo, sup []byte
	if len(kv.prefix) > 0 {
		slo = append(append([]byte{}, kv.prefix...), lower...)
		if upper != nil {
			sup = append(append([]byte{}, kv.prefix...), upper...)
		} else {
			sup = prefixEnd(kv.prefix)
		}
	} else {
		slo, sup = it.lower, it.upper
	}
	st, err := kv.st.NewIter(slo, sup)
	if err != nil {
		it.unpin()
		return nil, err
	}
	it.st = st
	return it, nil
}

// prefixEnd returns the smallest key greater than every key starting with p,
// or nil if there is none (p is all 0xff).
func prefixEnd(p []byte) []byte {
	end := append([]byte{}, p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func (it *Iter) unpin() {
	for i, t := range it.pinned {
		if t != nil {
			t.pins.Add(-1)
			it.pinned[i] = nil
		}
	}
}

// First moves to the first visible key and reports whether there is one.
func (it *Iter) First() bool {
	if it.closed {
		return false
	}
	if it.lower != nil {
		it.cur.seek(string(it.lower), false)
	} else {
		it.cur.seek("", true)
	}
	it.sValid = it.st.First()
	return it.settle()
}

// SeekGE moves to the first visible key >= key (and >= the lower bound) and
// reports whether there is one.
func (it *Iter) SeekGE(key []byte) bool {
	if it.closed {
		return false
	}
	if it.lower != nil && string(key) < string(it.lower) {
		key = it.lower
	}
	it.cur.seek(string(key), false)
	if p := it.kv.prefix; len(p) > 0 {
		it.seekBuf = append(append(it.seekBuf[:0], p...), key...)
		it.sValid = it.st.SeekGE(it.seekBuf)
	} else {
		it.sValid = it.st.SeekGE(key)
	}
	return it.settle()
}

// Next moves to the next visible key and reports whether there is one.
func (it *Iter) Next() bool {
	if it.closed || !it.valid {
		return false
	}
	if it.fromPend {
		it.cur.skipKey(string(it.key))
	}
	if it.fromStore {
		it.sValid = it.st.Next()
	}
	return it.settle()
}

// pendingValid reports whether the pending side has a key below upper.
func (it *Iter) pendingValid() bool {
	return it.cur.valid() && (it.upper == nil || it.cur.top().key < string(it.upper))
}

// settle positions the iterator at the smallest key of either side that is
// not hidden by a tombstone.
func (it *Iter) settle() bool {
	np := len(it.kv.prefix)
	for {
		pv := it.pendingValid()
		if !pv && !it.sValid {
			it.valid = false
			return false
		}
		var sk []byte
		if it.sValid {
			sk = it.st.Key()[np:]
		}
		if pv {
			n := it.cur.top()
			c := -1
			if it.sValid {
				c = compareStrBytes(n.key, sk)
			}
			if c <= 0 {
				e := n.ent.Load()
				if e == nil || e.val.del() {
					// Hidden: skip the key on both sides.
					it.cur.skipKey(n.key)
					if c == 0 {
						it.sValid = it.st.Next()
					}
					continue
				}
				it.key = append(it.key[:0], n.key...)
				it.val = append(it.val[:0], e.val.bytes()...)
				it.fromPend, it.fromStore, it.valid = true, c == 0, true
				return true
			}
		}
		it.key = append(it.key[:0], sk...)
		it.val = append(it.val[:0], it.st.Value()...)
		it.fromPend, it.fromStore, it.valid = false, true, true
		return true
	}
}

func compareStrBytes(a string, b []byte) int {
	switch {
	case a < string(b):
		return -1
	case a > string(b):
		return 1
	}
	return 0
}

// Valid reports whether the iterator is positioned at a key.
func (it *Iter) Valid() bool { return it.valid && !it.closed }

// Key returns the current key (without the KV's prefix), or nil. It is
// valid until the next positioning call; copy it to keep it.
func (it *Iter) Key() []byte {
	if !it.Valid() {
		return nil
	}
	return it.key
}

// Value returns the current value, or nil. It is a copy owned by the
// iterator, valid until the next positioning call; copy it to keep it.
func (it *Iter) Value() []byte {
	if !it.Valid() {
		return nil
	}
	return it.val
}

// Error returns the store iterator's error, if any.
func (it *Iter) Error() error {
	if it.err != nil {
		return it.err
	}
	if it.st == nil {
		return nil
	}
	return it.st.Error()
}

// Close releases the iterator (and lets the tables it read be recycled). It
// is idempotent and returns the store iterator's error.
func (it *Iter) Close() error {
	if it.closed {
		return it.err
	}
	it.closed = true
	it.valid = false
	it.unpin()
	if it.st != nil {
		if err := it.st.Close(); err != nil && it.err == nil {
			it.err = err
		}
	}
	return it.err
}
