package storage

import (
	"context"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf/internal/failpoint"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/internal/yield"
)

// Ingest ordering. pebble numbers an ingest when DB.Ingest applies it, not
// when its tables were written, and makes it durable by a synced MANIFEST
// (or WAL) record of its own, independent of the WAL's earlier records. The
// store keeps commits and ingests in one order with these rules (cited as
// "ingest rule n" where the code keeps them):
//
//  1. Queue order is commit order. Commit and CommitIngest decide, under
//     commitMu, whether their work starts now (nothing in flight, nothing
//     queued) or joins the queue behind everything committed before; a
//     batch never overtakes a queued ingest (it is merged into a batch
//     group behind it) and an ingest never overtakes a queued batch.
//  2. An ingest starts only when nothing is in flight: every earlier
//     commit is durable (its WAL sync returned). Else a crash could keep
//     the ingest, whose watermark covers the earlier commits, and lose
//     them from the WAL's unsynced tail: the watermark would be ahead of
//     the data (contract 4).
//  3. Nothing is handed to pebble while an ingest runs: the ingest is the
//     group in flight until DB.Ingest returns, so a later commit is applied
//     with a sequence number above the ingest's, and a key's newest value
//     (and the watermark) never goes back.
//  4. A failed ingest, like a failed sync, fails every group queued behind
//     it (they were committed after it; applying them would put their
//     changes and watermarks ahead of changes that are not in the store),
//     and committedWM falls back to the last watermark reported durable,
//     so that the retry writes its watermark again.
//  5. The watermark key goes into the ingest's tables when they are
//     written; CommitIngest refuses an ingest whose watermark is below one
//     committed meanwhile (kvbuf.ErrStaleOp): watermarks only increase in commit
//     order.
//  6. (Kept by the caller, the engine's target.go.) A caller that must
//     not commit behind a failed ingest (a flush generation whose
//     watermark covers the ingest's) waits for the ingest's result before
//     it commits again: rule 4 fails only what was queued when the ingest
//     failed, and a commit made after that is applied as usual.

// CommitIngest commits the ingest in after every earlier commit and returns
// without waiting for it; Wait on the result returns once it is in the
// store, durably (pebble syncs the tables, then records them in its
// MANIFEST or WAL). It finishes the ingest's last table first (written and
// synced, on the caller's goroutine); pebble's DB.Ingest runs on the
// store's syncer once every earlier commit is durable, and commits made
// after it are applied after it (see "Ingest ordering" in
// ingest_commit.go).
//
// An ingest with no change and no watermark writes nothing; its Commit
// completes with the latest earlier one. Whether it succeeds or not, the
// ingest's files are removed (pebble keeps its own links to the tables of
// a successful one) and in cannot be used again. Errors: in's own error
// (kvbuf.ErrBadRange for an operation out of order, kvbuf.ErrInvalidKeyspace), the
// file system's, kvbuf.ErrClosed, kvbuf.ErrReadOnly, kvbuf.ErrForeignBatch for an ingest of
// another store, kvbuf.ErrStaleOp for a watermark below one already committed,
// kvbuf.ErrSyncFailed after an earlier commit's sync failed. Wait reports a
// failed DB.Ingest; nothing of the ingest is then in the store, and
// commits queued behind it fail too.
func (s *Store) CommitIngest(in *Ingest) (*Commit, error) {
	if in.s != s {
		in.Abort()
		return nil, kverr.Errorf("ingest into %q: %w", s.dir, kverr.ErrForeignBatch)
	}
	if in.done {
		return nil, kverr.Errorf("ingest into %q: committed or aborted already: %w", s.dir, kverr.ErrClosed)
	}
	if in.part {
		return nil, kverr.Errorf("ingest into %q: a part of an ingest is committed with the ingest: %w", s.dir, kverr.ErrBadRange)
	}
	if in.ig == nil {
		in.done = true
		return nil, kverr.Errorf("ingest into %q: %w", s.dir, kverr.ErrReadOnly)
	}
	if err := in.finish(); err != nil {
		in.Abort()
		return nil, err
	}
	in.done = true
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.writable("ingest into"); err != nil {
		in.removeFiles()
		return nil, err
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if err := s.syncErr.Load(); err != nil {
		in.removeFiles()
		return nil, *err
	}
	wm := s.committedWM
	if in.hasWM {
		if in.wm < wm {
			in.removeFiles()
			// Ingest rule 5.
			return nil, kverr.Errorf("ingest into %q with watermark %d, below %d committed: %w", s.dir, in.wm, wm, kverr.ErrStaleOp)
		}
		wm = in.wm
	}
	if len(in.paths) == 0 {
		if s.last != nil {
			return s.last, nil
		}
		c := &Commit{s: s, wm: wm, done: make(chan struct{})}
		close(c.done)
		return c, nil
	}
	c := &Commit{s: s, wm: wm, done: make(chan struct{})}
	g := &group{ing: in, commits: []*Commit{c}}
	// Ingest rules 1 and 2: it runs on the syncer, in queue order, once
	// nothing is in flight.
	if s.inflight == nil && len(s.queue) == 0 {
		s.inflight = g
	} else {
		s.queue = append(s.queue, g)
	}
	s.kickSyncer()
	s.committedWM = wm
	s.last = c
	return c, nil
}

// runIngest hands in's tables to pebble (on the syncer, with in as the
// group in flight: ingest rules 2 and 3).
func (s *Store) runIngest(in *Ingest) error {
	if err := s.syncErr.Load(); err != nil {
		in.removeFiles()
		return *err
	}
	if err := failpoint.Hit(failpoint.StorageIngestApply); err != nil {
		in.removeFiles()
		return kverr.Errorf("ingest into %q: %w", s.dir, err)
	}
	s.pit.begin() // point-read rule P1: before it can be visible
	err := s.db.Ingest(context.Background(), in.paths)
	// Stress builds yield here: ingested (or not), not yet ended (rule P1).
	yield.Point()
	s.pit.end()
	if err != nil {
		in.removeFiles()
		return s.wrapErr("ingest", err)
	}
	// pebble removed the paths (its links remain).
	in.created, in.paths = nil, nil
	_ = failpoint.Hit(failpoint.StorageIngestApplied) // a crash point only
	return nil
}

// lastBatchGroupLocked returns the queued batch group a commit arriving now
// merges into: the last queued group if it is a batch, else a new one at
// the end of the queue (ingest rule 1). commitMu held.
func (s *Store) lastBatchGroupLocked() *group {
	if n := len(s.queue); n > 0 && s.queue[n-1].ing == nil {
		return s.queue[n-1]
	}
	g := &group{pb: s.db.NewBatch()}
	s.queue = append(s.queue, g)
	return g
}

// startNextLocked starts the queue's head once nothing is in flight: a
// batch group is applied to pebble (the syncer then waits for its sync), an
// ingest becomes the group in flight (the syncer runs it). commitMu held.
func (s *Store) startNextLocked() {
	for s.inflight == nil && len(s.queue) > 0 {
		g := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		if g.ing != nil {
			s.inflight = g
			return
		}
		if len(g.commits) == 0 {
			_ = g.pb.Close() // a merge into it failed: nothing to apply
			continue
		}
		s.pit.begin() // point-read rule P1: before it can be visible
		err := s.db.ApplyNoSyncWait(g.pb, pebble.Sync)
		// Stress builds yield here: applied (or not), not yet ended (rule P1).
		yield.Point()
		s.pit.end()
		if err != nil {
			err = s.wrapErr("commit", err)
			g.settle(err)
			s.failQueueLocked(err)
			return
		}
		s.inflight = g
	}
}

// failQueueLocked fails every queued group with err (ingest rule 4): they
// were committed after a group that failed. commitMu held.
func (s *Store) failQueueLocked(err error) {
	for _, g := range s.queue {
		if g.pb != nil {
			_ = g.pb.Close()
		}
		if g.ing != nil {
			g.ing.removeFiles()
		}
		g.settle(err)
	}
	clear(s.queue)
	s.queue = s.queue[:0]
	s.committedWM = s.settledWM
	s.last = nil
}
