package storage

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// syncQueueLen is the capacity of the queue of commits waiting for their
// WAL sync. Commit blocks when it is full (pebble blocks earlier, at 4,095
// syncs in flight).
const syncQueueLen = 1024

// Commit is a batch that Store.Commit wrote to pebble's WAL and memtable:
// visible to reads, ordered after every earlier commit, durable once Wait
// returns nil. Its methods are safe for concurrent use.
type Commit struct {
	s *Store
	// pb is the committed batch, owned by the syncer once queued: it waits
	// on its sync, then closes it.
	pb *pebble.Batch
	// wm is the highest watermark committed up to and including this
	// commit: persisted once this commit is durable, because every earlier
	// commit is durable then too.
	wm uint64
	// done is closed once err is final.
	done chan struct{}
	err  error
}

// Commit writes b (with its watermark) to pebble's WAL and memtable and
// returns once it is visible and ordered, before the WAL sync; Wait on the
// result returns once it is durable.
//
// Commits are ordered: they enter pebble's WAL in the order Commit calls
// return, and Wait on a commit returns nil only when it and every earlier
// commit are durable (see the package documentation for why pebble makes
// the two the same). Watermark advances when such a Wait returns.
//
// The watermark is written only if it is above the highest watermark
// committed so far (durable or not), so the persisted watermark never goes
// backwards. A batch with no operations and no new watermark writes
// nothing; its Commit completes with the latest earlier one.
//
// Commit takes over b's contents: when it returns, b is empty and can be
// reused. When it fails nothing of b was committed. Errors: ErrClosed,
// ErrReadOnly, ErrForeignBatch, b's ErrBatchTooLarge or ErrInvalidKeyspace,
// ErrSyncFailed after an earlier commit's sync failed.
func (s *Store) Commit(b *Batch) (*Commit, error) {
	if b.s != s {
		b.Reset()
		return nil, fmt.Errorf("storage: commit to %q: %w", s.dir, ErrForeignBatch)
	}
	if b.err != nil {
		err := b.err
		b.Reset()
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		b.Reset()
		return nil, ErrClosed
	}
	if s.readOnly {
		b.Reset()
		return nil, fmt.Errorf("storage: commit to %q: %w", s.dir, ErrReadOnly)
	}

	// commitMu makes the watermark decision, pebble's ordering of the batch
	// and the syncer's queue one step: commits reach the WAL and the queue
	// in the same order, and committedWM is the highest watermark of the
	// commits before this one.
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if err := s.syncErr.Load(); err != nil {
		b.Reset()
		return nil, *err
	}
	if b.hasWM && b.wm > s.committedWM {
		b.addWatermark(b.wm)
	} else {
		b.hasWM = false
	}
	if b.pb.Empty() {
		b.Reset()
		if s.last != nil {
			// Nothing to write: done when everything before it is.
			return s.last, nil
		}
		c := &Commit{s: s, wm: s.committedWM, done: make(chan struct{})}
		close(c.done)
		return c, nil
	}
	pb := b.pb
	if err := s.db.ApplyNoSyncWait(pb, pebble.Sync); err != nil {
		// Rejected before it reached the WAL (pebble treats a failure after
		// that as fatal). pb may be marked as committing: do not reuse it.
		b.pb = s.db.NewBatch()
		b.Reset()
		return nil, s.wrapErr("commit", err)
	}
	if b.hasWM {
		s.committedWM = b.wm
	}
	b.pb = s.db.NewBatch()
	b.Reset()
	c := &Commit{s: s, pb: pb, wm: s.committedWM, done: make(chan struct{})}
	s.last = c
	s.syncq <- c
	return c, nil
}

// Wait returns once the commit is durable, or its sync failed. It returns
// nil only if this commit and every earlier one are durable, and then
// advances the store's watermark to the highest one they carried. It
// returns the same result on every call, from any goroutine, also after
// Store.Close (which waits for pending syncs before closing pebble).
//
// A failed sync returns an error wrapping ErrSyncFailed and pebble's error;
// the store then refuses further writes (see ErrSyncFailed).
func (c *Commit) Wait() error {
	<-c.done
	if c.err != nil {
		return c.err
	}
	c.s.advanceWatermark(c.wm)
	return nil
}

// Apply commits b and waits until it is durable: Commit then Wait. When it
// returns nil, every operation in b and its watermark are durable,
// atomically (contract 4). Apply empties b whether or not it succeeds.
func (s *Store) Apply(b *Batch) error {
	c, err := s.Commit(b)
	if err != nil {
		return err
	}
	return c.Wait()
}

// advanceWatermark raises the persisted watermark to wm unless it is
// already at or above it.
func (s *Store) advanceWatermark(wm uint64) {
	for {
		cur := s.wm.Load()
		if wm <= cur || s.wm.CompareAndSwap(cur, wm) {
			return
		}
	}
}

// syncLoop is the syncer goroutine of a writable store. It waits for the WAL
// sync of each commit in commit order and settles it. Waiting in order costs
// nothing extra, since pebble completes syncs in WAL order; it lets a
// failure poison the store as soon as pebble reports it, whether or not
// anyone waits, and it makes Close able to finish every pending commit
// (Close closes syncq and waits for syncerDone).
func (s *Store) syncLoop() {
	defer close(s.syncerDone)
	for c := range s.syncq {
		err := c.pb.SyncWait()
		_ = c.pb.Close()
		c.pb = nil
		if err != nil {
			failed := fmt.Errorf("storage: commit to %q: %w: %w", s.dir, ErrSyncFailed, err)
			s.syncErr.CompareAndSwap(nil, &failed)
		}
		// After a failure no later commit is reported durable, whatever
		// pebble says (it says the same: a log write error is sticky).
		if failed := s.syncErr.Load(); failed != nil {
			err = *failed
		}
		c.err = err
		close(c.done)
	}
}
