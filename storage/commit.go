package storage

import (
	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/internal/yield"
)

// Commit is a batch committed by Store.Commit: ordered after every earlier
// commit, durable once Wait returns nil. Its methods are safe for concurrent
// use.
type Commit struct {
	s *Store
	// wm is the highest watermark committed up to and including this
	// commit: persisted once this commit is durable, because every earlier
	// commit is durable then too.
	wm uint64
	// done is closed once err is final.
	done chan struct{}
	err  error
}

// group is one pebble batch holding one or more commits, applied and synced
// as a unit, or one ingest (pb is nil, ing is set).
type group struct {
	pb      *pebble.Batch
	ing     *Ingest
	commits []*Commit
}

// settle completes every commit of g with err.
func (g *group) settle(err error) {
	for _, c := range g.commits {
		c.err = err
		close(c.done)
	}
}

// Commit commits b (with its watermark) and returns without waiting for
// the WAL sync; Wait on the result returns once it is durable.
//
// Commits are ordered: Wait on a commit returns nil only when it and every
// earlier commit are durable, and the watermark advances when such a Wait
// returns. At most one pebble batch is awaiting its sync at any time:
// commits that arrive while one is in flight are merged into the next
// group, applied to pebble and synced as one batch once the one in flight
// is durable (group commit). This is what keeps a failed WAL write or sync
// from ever being followed by another commit into pebble: pebble cannot
// take a commit safely after its log failed (it may panic while switching
// to a new log file), and the failure is only known when the sync returns.
// A commit becomes visible to reads when its group is applied: at once
// when nothing is in flight, else when the group before it is durable.
//
// The watermark is written only if it is above the highest watermark
// committed so far (durable or not), so the persisted watermark never goes
// backwards. A batch with no operations and no new watermark writes
// nothing; its Commit completes with the latest earlier one.
//
// Commit takes over b's contents: when it returns, b is empty and can be
// reused. When it fails nothing of b was committed. Errors: kvbuf.ErrClosed,
// kvbuf.ErrReadOnly, kvbuf.ErrForeignBatch, b's kvbuf.ErrBatchTooLarge or kvbuf.ErrInvalidKeyspace,
// kvbuf.ErrSyncFailed after an earlier commit's sync failed.
func (s *Store) Commit(b *Batch) (*Commit, error) {
	if b.s != s {
		b.Reset()
		return nil, kverr.Errorf("commit to %q: %w", s.dir, kverr.ErrForeignBatch)
	}
	if b.err != nil {
		err := b.err
		b.Reset()
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.writable("commit to"); err != nil {
		b.Reset()
		return nil, err
	}

	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	defer b.Reset()
	if err := s.syncErr.Load(); err != nil {
		return nil, *err
	}
	wm := s.committedWM
	if b.hasWM && b.wm > wm {
		b.addWatermark(b.wm)
		wm = b.wm
	}
	if b.pb.Empty() {
		if s.last != nil {
			// Nothing to write: done when everything before it is.
			return s.last, nil
		}
		c := &Commit{s: s, wm: s.committedWM, done: make(chan struct{})}
		close(c.done)
		return c, nil
	}
	c := &Commit{s: s, wm: wm, done: make(chan struct{})}
	if s.inflight == nil && len(s.queue) == 0 {
		// Nothing in flight: apply now; the syncer waits for its sync.
		pb := b.pb
		b.pb = s.db.NewBatch()
		s.pit.begin() // point-read rule P1: before it can be visible
		err := s.db.ApplyNoSyncWait(pb, pebble.Sync)
		// Stress builds yield here: applied (or not), not yet ended (rule P1).
		yield.Point()
		s.pit.end()
		if err != nil {
			// Rejected before it reached the WAL. pb may be marked as
			// committing: it is not reused.
			return nil, s.wrapErr("commit", err)
		}
		s.inflight = &group{pb: pb, commits: []*Commit{c}}
		s.kickSyncer()
	} else {
		// Behind the group in flight (and any ingest queued): merged into
		// the last queued batch group, applied once everything before it
		// is durable (ingest rule 1 in ingest_commit.go).
		g := s.lastBatchGroupLocked()
		if err := g.pb.Apply(b.pb, nil); err != nil {
			return nil, s.wrapErr("commit", err)
		}
		g.commits = append(g.commits, c)
	}
	s.committedWM = wm
	s.last = c
	return c, nil
}

// Wait returns once the commit is durable, or its sync failed. It returns
// nil only if this commit and every earlier one are durable, and then
// advances the store's watermark to the highest one they carried. It
// returns the same result on every call, from any goroutine, also after
// Store.Close (which settles pending commits before closing pebble).
//
// A failed sync returns an error wrapping kvbuf.ErrSyncFailed and pebble's error;
// the store then refuses further writes (see kvbuf.ErrSyncFailed).
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

func (s *Store) kickSyncer() {
	select {
	case s.syncKick <- struct{}{}:
	default:
	}
}

// syncLoop is the syncer goroutine of a writable store. It waits for the WAL
// sync of the group in flight, or runs the ingest in flight, and settles
// its commits; then, under commitMu, it starts the next queued group
// (unless the one in flight failed, in which case every queued group fails
// too and nothing more reaches pebble from the queue). Close sets
// stopSync; the syncer returns once nothing is in flight or queued.
func (s *Store) syncLoop() {
	defer close(s.syncerDone)
	for {
		s.commitMu.Lock()
		g := s.inflight
		stop := s.stopSync
		s.commitMu.Unlock()
		if g == nil {
			if stop {
				return
			}
			<-s.syncKick
			continue
		}
		var err error
		if g.ing != nil {
			err = s.runIngest(g.ing)
		} else {
			err = g.pb.SyncWait()
			_ = g.pb.Close()
			if err != nil {
				failed := kverr.Errorf("commit to %q: %w: %w", s.dir, kverr.ErrSyncFailed, err)
				s.syncErr.CompareAndSwap(nil, &failed)
			}
		}
		// After a failure no later commit is reported durable, whatever
		// pebble says (it says the same: a log write error is sticky).
		if failed := s.syncErr.Load(); failed != nil {
			err = *failed
		}
		g.settle(err)

		s.commitMu.Lock()
		s.inflight = nil
		if err != nil {
			s.failQueueLocked(err)
		} else {
			s.settledWM = max(s.settledWM, g.commits[len(g.commits)-1].wm)
			s.startNextLocked()
		}
		s.commitMu.Unlock()
	}
}
