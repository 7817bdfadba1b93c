package storage

import (
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Snapshot is a consistent, read-only view of the store's user keys as of
// Store.NewSnapshot: later commits, deletions and range deletions are
// invisible to it. It is safe for concurrent use by any number of readers,
// and concurrently with Close and Store.Close. Close it when done: an open
// snapshot keeps pebble from dropping the versions it sees.
type Snapshot struct {
	s *Store
	// mu excludes Close and Store.Close (exclusive) from reads (shared).
	mu     sync.RWMutex
	snap   *pebble.Snapshot
	closed bool  // by Snapshot.Close or Store.Close
	err    error // ErrClosed after Store.Close closed it
}

// NewSnapshot returns a snapshot of the store as it is now: it sees every
// commit that Commit (or Apply) returned before this call, durable or not.
// Errors: kvbuf.ErrClosed.
func (s *Store) NewSnapshot() (*Snapshot, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, kverr.ErrClosed
	}
	sn := &Snapshot{s: s, snap: s.db.NewSnapshot()}
	s.openMu.Lock()
	s.snaps[sn] = struct{}{}
	s.openMu.Unlock()
	return sn, nil
}

// Get returns a copy of the value key had in keyspace ks when the snapshot
// was taken, or an error wrapping kvbuf.ErrNotFound (or kvbuf.ErrInvalidKeyspace,
// kvbuf.ErrClosed, kvbuf.ErrCorruptBlock).
func (sn *Snapshot) Get(ks KeyspaceID, key []byte) ([]byte, error) {
	return sn.get(nil, ks, key, false)
}

// GetAppend is Get appending the value to dst, as Store.GetAppend: with
// enough capacity in dst it does not allocate, and on error dst is returned
// unchanged.
func (sn *Snapshot) GetAppend(dst []byte, ks KeyspaceID, key []byte) ([]byte, error) {
	return sn.get(dst, ks, key, true)
}

func (sn *Snapshot) get(dst []byte, ks KeyspaceID, key []byte, appendMode bool) ([]byte, error) {
	return userRead(sn.s, "snapshot get", ks, key, &sn.mu, sn.closedErr, dst, func(k []byte) ([]byte, error) {
		return readValue(sn.snap, dst, k, appendMode)
	})
}

// NewIter returns an iterator over the snapshot's keys k of keyspace ks
// with lower <= k < upper, with Store.NewIter's bounds rules. The iterator
// stays usable after the snapshot's Close, until its own Close or
// Store.Close. Errors: kvbuf.ErrInvalidKeyspace, kvbuf.ErrClosed.
func (sn *Snapshot) NewIter(ks KeyspaceID, lower, upper []byte) (*Iter, error) {
	if ks == 0 {
		return nil, errKeyspace("snapshot iterator")
	}
	sn.mu.RLock()
	defer sn.mu.RUnlock()
	if err := sn.closedErr(); err != nil {
		return nil, err
	}
	return sn.s.newIter(sn.snap, ks, lower, upper)
}

// closedErr is the error of a closed snapshot's reads, nil while it is
// open. Callers hold sn.mu.
func (sn *Snapshot) closedErr() error {
	if !sn.closed {
		return nil
	}
	if sn.err != nil {
		return sn.err
	}
	return kverr.ErrClosed
}

// Close releases the snapshot. It is idempotent: it returns nil after the
// first call, and kvbuf.ErrClosed if Store.Close closed the snapshot first.
func (sn *Snapshot) Close() error {
	err := sn.close(nil)
	untrack(sn.s, sn.s.snaps, sn)
	return err
}

// closeByStore is Store.Close closing a snapshot its owner left open.
func (sn *Snapshot) closeByStore() error {
	return sn.close(kverr.Errorf("snapshot closed by Store.Close of %q: %w", sn.s.dir, kverr.ErrClosed))
}

// close releases the snapshot if it is open and returns pebble's error
// from doing so. For its owner (byStore nil), a later call returns nil, or
// the error Store.Close set. For Store.Close, byStore is the error the
// snapshot's reads (and its owner's Close) return from then on, and close
// returns nil if the owner closed it first.
func (sn *Snapshot) close(byStore error) error {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if sn.closed {
		if byStore != nil {
			return nil
		}
		return sn.err
	}
	sn.closed, sn.err = true, byStore
	err := sn.snap.Close()
	sn.snap = nil
	if err != nil {
		return sn.s.wrapErr("close snapshot", err)
	}
	return nil
}
