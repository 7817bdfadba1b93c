package kvbuf

import "iter"

// Has reports whether key is present (the newest pending change, else the
// store) without copying its value. Errors: ErrEmptyKey, ErrKeyTooLarge,
// ErrDropped, ErrClosed, and storage errors (ErrCorruptBlock).
func (k *KV) Has(key []byte) (bool, error) {
	ok, err := k.ov.Has(key)
	if err = k.readErr(err); err != nil {
		return false, err
	}
	return ok, nil
}

// All returns the keys and values of the keyspace within o's bounds (nil:
// all of it) in increasing key order, pending changes merged with the store
// as NewIter does (see Iter for what a scan concurrent with writes sees;
// use a Snapshot for a point-in-time one). The iteration holds an iterator,
// closed when the loop ends, however it ends.
//
// Copying: the key and the value passed to the loop body are valid only
// until it returns (the next step may reuse their memory); copy them to
// keep them, and do not modify them.
//
// An error ends the sequence early, as the end of the keyspace would:
// ErrBadRange (lower > upper), ErrDropped, ErrClosed, a storage error.
// Where the difference matters (an export, a backup), iterate with NewIter
// and Iter.All, and check Iter.Error after the loop.
func (k *KV) All(o *IterOptions) iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		it, err := k.NewIter(o)
		if err != nil {
			return
		}
		defer it.Close()
		it.All()(yield)
	}
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

// Has is KV.Has as of the snapshot.
func (r *SnapshotKV) Has(key []byte) (bool, error) {
	if r.ks == nil {
		return false, r.err(checkKey(key, r.s.db.opts.MaxKeySize, nil))
	}
	ok, err := r.ks.Has(key)
	if err = r.err(err); err != nil {
		return false, err
	}
	return ok, nil
}

// All is KV.All as of the snapshot: it sees exactly the snapshot.
func (r *SnapshotKV) All(o *IterOptions) iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		it, err := r.NewIter(o)
		if err != nil {
			return
		}
		defer it.Close()
		it.All()(yield)
	}
}
