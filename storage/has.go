package storage

import (
	"errors"

	"github.com/cockroachdb/pebble/v2"
)

// Has reports whether key is stored in keyspace ks, without copying its
// value (pebble's block is read and released). Errors: ErrInvalidKeyspace,
// ErrClosed, ErrCorrupt.
func (s *Store) Has(ks KeyspaceID, key []byte) (bool, error) {
	if ks == 0 {
		return false, errKeyspace("has")
	}
	bp := s.keyBufs.Get().(*[]byte)
	k := appendUserKey((*bp)[:0], ks, key)
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		s.keyBufs.Put(bp)
		return false, ErrClosed
	}
	ok, err := has(s.db, k)
	s.mu.RUnlock()
	*bp = k
	s.keyBufs.Put(bp)
	if err != nil {
		return false, s.userKeyErr("has", ks, key, err)
	}
	return ok, nil
}

// Has is Store.Has as of the snapshot.
func (sn *Snapshot) Has(ks KeyspaceID, key []byte) (bool, error) {
	if ks == 0 {
		return false, errKeyspace("snapshot has")
	}
	s := sn.s
	bp := s.keyBufs.Get().(*[]byte)
	k := appendUserKey((*bp)[:0], ks, key)
	sn.mu.RLock()
	if sn.closed {
		err := sn.closedErr()
		sn.mu.RUnlock()
		s.keyBufs.Put(bp)
		return false, err
	}
	ok, err := has(sn.snap, k)
	sn.mu.RUnlock()
	*bp = k
	s.keyBufs.Put(bp)
	if err != nil {
		return false, s.userKeyErr("snapshot has", ks, key, err)
	}
	return ok, nil
}

func has(r pebble.Reader, k []byte) (bool, error) {
	_, c, err := r.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, c.Close()
}
