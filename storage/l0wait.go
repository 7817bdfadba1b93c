package storage

import (
	"context"
	"sync"
	"time"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// l0Waker wakes WaitL0's callers at every end of a pebble flush or
// compaction (the store's event listener calls wake).
type l0Waker struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next wake.
func (w *l0Waker) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

func (w *l0Waker) wake() {
	w.mu.Lock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
	w.mu.Unlock()
}

// WaitL0 waits, before an ingestion, while the store's L0 holds
// L0StopWritesThreshold sublevels or more and pebble is compacting.
// pebble stops batch writes at that depth (a memtable flush waits for
// its compactions), but not ingestions: each ingested table lands in L0
// as a sublevel of its own whatever L0's depth, so a writer that flushes
// by ingestion faster than pebble compacts would deepen L0, and every
// point read that reaches the store, without bound. It returns at once
// when no compaction is in progress (nothing would end the wait: pebble
// picked none, or automatic compactions are off), so the bound is soft:
// pebble calls the listener that wakes this wait from inside a
// compaction's end, before it counts that compaction done and before it
// schedules the next, so a woken wait often finds none in progress and
// lets its ingestion pass with L0 still at the depth. What holds L0 near
// the depth is that a compaction out of L0 takes all its sublevels
// (doc/design.md, "L0 under a sustained write load"). waiting, unless nil, is called once, when
// the wait begins. It returns how long it waited (0 if it did not), and
// ctx's error or kvbuf.ErrClosed if the wait ends with them.
func (s *Store) WaitL0(ctx context.Context, waiting func()) (time.Duration, error) {
	var t0 time.Time
	since := func() time.Duration {
		if t0.IsZero() {
			return 0
		}
		return time.Since(t0)
	}
	for {
		// The channel is taken before the metrics are read, so a
		// compaction that ends between the two wakes this wait.
		ch := s.l0.wait()
		s.mu.RLock()
		if s.closed {
			s.mu.RUnlock()
			return since(), kverr.ErrClosed
		}
		m := s.db.Metrics()
		s.mu.RUnlock()
		if int(m.Levels[0].Sublevels) < s.l0Stop || m.Compact.NumInProgress == 0 {
			return since(), nil
		}
		if t0.IsZero() {
			t0 = time.Now()
			if waiting != nil {
				waiting()
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return since(), ctx.Err()
		}
	}
}
