package storage

import (
	"errors"

	"github.com/cockroachdb/pebble/v2"
)

// Has reports whether key is stored in keyspace ks, without copying its
// value (pebble's block is read and released). Errors: ErrInvalidKeyspace,
// ErrClosed, ErrCorrupt.
func (s *Store) Has(ks KeyspaceID, key []byte) (bool, error) {
	var ok bool
	err := s.userRead("has", ks, key, &s.mu, s.closedErr, func(k []byte) (err error) {
		ok, err = has(s.db, k)
		return err
	})
	return ok && err == nil, err
}

// Has is Store.Has as of the snapshot.
func (sn *Snapshot) Has(ks KeyspaceID, key []byte) (bool, error) {
	var ok bool
	err := sn.s.userRead("snapshot has", ks, key, &sn.mu, sn.closedErr, func(k []byte) (err error) {
		ok, err = has(sn.snap, k)
		return err
	})
	return ok && err == nil, err
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
