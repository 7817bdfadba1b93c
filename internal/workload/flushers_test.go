package workload

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// store is a toy durable store for the flush disciplines: a write takes the
// next token; a physical flush freezes the highest token written, "syncs"
// (sleeps, or blocks on gate when set) and then makes the frozen token
// durable.
type store struct {
	written, durable atomic.Uint64
	physicals        atomic.Int64
	gate             chan struct{} // if set, each physical flush waits for a value after freezing
	frozen           chan uint64   // if set, receives each physical flush's frozen token
	sleep            time.Duration // the "sync" when gate is nil
}

func (s *store) write() uint64 { return s.written.Add(1) }

func (s *store) physical(ctx context.Context) error {
	s.physicals.Add(1)
	wm := s.written.Load()
	if s.frozen != nil {
		s.frozen <- wm
	}
	if s.gate != nil {
		<-s.gate
	} else {
		time.Sleep(s.sleep)
	}
	for {
		d := s.durable.Load()
		if d >= wm || s.durable.CompareAndSwap(d, wm) {
			return nil
		}
	}
}

// TestJoinAfterFreeze builds the case singleflight gets wrong, step by step:
// A's flush freezes (before B's write), B writes and calls Flush while A's
// flush is in progress, then A's flush ends. B's Flush must not return
// before B's write is durable.
func TestJoinAfterFreeze(t *testing.T) {
	for _, tc := range []struct {
		name      string
		make      func(func(context.Context) error) func(context.Context) error
		violation bool
	}{
		{"group-commit", GroupCommit, false},
		{"singleflight", Singleflight, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &store{gate: make(chan struct{}), frozen: make(chan uint64, 4)}
				flush := tc.make(s.physical)
				ctx := t.Context()
				s.write() // A's write: token 1
				aDone := make(chan error, 1)
				go func() { aDone <- flush(ctx) }()
				if wm := <-s.frozen; wm != 1 {
					t.Fatalf("A's flush froze %d, want 1", wm)
				}
				b := s.write() // B's write: token 2, after A's freeze
				bDone := make(chan bool, 1)
				go func() {
					if err := flush(ctx); err != nil {
						t.Error(err)
					}
					bDone <- s.durable.Load() >= b
				}()
				synctest.Wait() // B is waiting inside flush
				s.gate <- struct{}{}
				if err := <-aDone; err != nil {
					t.Fatal(err)
				}
				if !tc.violation {
					<-s.frozen // B's own flush
					s.gate <- struct{}{}
				}
				if covered := <-bDone; covered == tc.violation {
					t.Errorf("B's write durable when its Flush returned: %t, want %t", covered, !tc.violation)
				}
			})
		})
	}
}

// TestDisciplinesUnderLoad runs the W4 loop over the correct disciplines:
// they never return before the caller's write is durable; per-caller-sync
// runs one physical flush per call and group commit shares them. Group
// commit runs on synctest's clock (all eight callers arrive during the
// first physical flush); per-caller-sync on the real one, because a
// goroutine blocked on a mutex never lets synctest's clock advance.
func TestDisciplinesUnderLoad(t *testing.T) {
	run := func(t *testing.T, make func(func(context.Context) error) func(context.Context) error, sleep time.Duration) (*store, Result) {
		s := &store{sleep: sleep}
		l := FlushLoop{Goroutines: 8, PerGoroutine: 20,
			Write:   func(context.Context, int, int) (uint64, error) { return s.write(), nil },
			Flush:   make(s.physical),
			Durable: func(_, _ int, op uint64) (bool, error) { return s.durable.Load() >= op, nil },
		}
		r, err := l.Run(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if r.Violations != 0 || r.Flushes != 160 {
			t.Errorf("%d violations in %d flushes", r.Violations, r.Flushes)
		}
		return s, r
	}
	t.Run("per-caller-sync", func(t *testing.T) {
		s, r := run(t, PerCallerSync, 20*time.Microsecond)
		if p := s.physicals.Load(); p != r.Flushes {
			t.Errorf("%d physical flushes for %d Flush calls", p, r.Flushes)
		}
	})
	t.Run("group-commit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, r := run(t, GroupCommit, time.Millisecond)
			// Each round of callers shares at most two physical flushes:
			// the one they wait out and the one they join.
			if p := s.physicals.Load(); p >= r.Flushes/2 {
				t.Errorf("%d physical flushes for %d Flush calls: no coalescing", p, r.Flushes)
			}
		})
	})
}

// TestGroupCommitErrorsAndContext: a physical flush's error reaches every
// caller that joined it, and a caller whose context ends stops waiting.
func TestGroupCommitErrorsAndContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		gate, gate2 := make(chan struct{}), make(chan struct{})
		var calls atomic.Int64
		flush := GroupCommit(func(context.Context) error {
			if calls.Add(1) == 1 {
				<-gate
				return nil
			}
			<-gate2
			return boom
		})
		first := make(chan error, 1)
		go func() { first <- flush(t.Context()) }()
		synctest.Wait()
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for i := range errs {
			wg.Go(func() { errs[i] = flush(t.Context()) })
		}
		ctx, cancel := context.WithCancel(t.Context())
		late := make(chan error, 1)
		go func() { late <- flush(ctx) }()
		synctest.Wait()
		cancel()
		if err := <-late; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled caller: %v", err)
		}
		close(gate)
		if err := <-first; err != nil {
			t.Errorf("first flush: %v", err)
		}
		synctest.Wait() // the three waiters are in the second flush
		close(gate2)
		wg.Wait()
		for i, err := range errs {
			if !errors.Is(err, boom) {
				t.Errorf("caller %d: %v, want boom", i, err)
			}
		}
		if c := calls.Load(); c != 2 {
			t.Errorf("%d physical flushes, want 2 (the three waiters share the second)", c)
		}
	})
}
