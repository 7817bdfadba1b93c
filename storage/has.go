package storage

import (
	"errors"

	"github.com/cockroachdb/pebble/v2"
)

// Has reports whether key is stored in keyspace ks, without copying its
// value (pebble's block is read and released). Errors: kvbuf.ErrInvalidKeyspace,
// kvbuf.ErrClosed, kvbuf.ErrCorruptBlock.
func (s *Store) Has(ks KeyspaceID, key []byte) (bool, error) {
	return userRead(s, "has", ks, key, &s.mu, s.closedErr, false, func(k []byte) (bool, error) {
		return has(s.db, k)
	})
}

// Has is Store.Has as of the snapshot.
func (sn *Snapshot) Has(ks KeyspaceID, key []byte) (bool, error) {
	return userRead(sn.s, "snapshot has", ks, key, &sn.mu, sn.closedErr, false, func(k []byte) (bool, error) {
		return has(sn.snap, k)
	})
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
