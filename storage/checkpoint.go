package storage

import (
	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Checkpoint writes a consistent copy of the store to dir, which must not
// exist, on the store's file system: pebble's DB.Checkpoint, with the
// write-ahead log flushed first, so the copy holds every commit applied
// before the call (visible ones: a group that Commit merged and has not yet
// applied is not). Immutable files are hard-linked where the file system
// allows it. The copy opens as a store of its own, with the watermark of
// the newest commit it holds. Errors: kvbuf.ErrClosed, kvbuf.ErrReadOnly, the file
// system's (fs.ErrExist if dir exists).
func (s *Store) Checkpoint(dir string) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return kverr.ErrClosed
	}
	if s.readOnly {
		return s.wrapErr("checkpoint", kverr.ErrReadOnly)
	}
	if err := s.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return s.wrapErr("checkpoint to "+dir, err)
	}
	return nil
}
