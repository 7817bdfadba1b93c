package flush

import (
	"errors"
	"testing"
	"testing/synctest"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// A stalled flusher (the target's store waits for disk space): Flush
// callers waiting for the generation in flight and later ones get the
// stall's error at once, as do writes held by backpressure; the
// generation stays in flight and, once its wait returns, is released and
// the stall ends.
func TestStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		waits := newBlocker()
		ft.onWait = func(g uint64, _ int) error { waits.block(g); return nil }
		f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: 64, GroupWait: -1})
		defer closeOK(t, f)
		if err := put(t.Context(), f, ft, "a", 1); err != nil {
			t.Fatal(err)
		}
		first := flushAsync(t.Context(), f)
		synctest.Wait() // generation 1 written, its wait blocks
		pending(t, first, "Flush of a generation whose wait blocks")
		stall := kverr.Errorf("store waits for disk space: %w", kverr.ErrDiskFull)
		f.Stall(stall)
		f.Stall(errInjected) // the first error stays
		if err := <-first; err != stall {
			t.Fatalf("waiting Flush after Stall = %v, want the stall's error", err)
		}
		if err := f.Flush(t.Context()); err != stall {
			t.Fatalf("Flush while stalled = %v, want the stall's error", err)
		}
		// Writes go on until the bound, then get the stall's error.
		var err error
		for i := 0; err == nil && i < 10; i++ {
			err = put(t.Context(), f, ft, "b", 0)
		}
		if err != stall {
			t.Fatalf("a write held by backpressure while stalled = %v, want the stall's error", err)
		}
		if st := f.Stats(); st.Stalled != stall || st.DiskFull != 1 || st.InFlight != 1 {
			t.Fatalf("Stats: Stalled %v, DiskFull %d, InFlight %d; want the stall, 1, 1", st.Stalled, st.DiskFull, st.InFlight)
		}
		waits.open(1) // the store wrote: generation 1 completes
		synctest.Wait()
		if st := f.Stats(); st.Stalled != nil || !ft.isDurable("a") {
			t.Fatalf("after the release: Stalled %v, a durable %v", st.Stalled, ft.isDurable("a"))
		}
		waits.open(2)
		if err := f.Flush(t.Context()); err != nil {
			t.Fatalf("Flush after the stall ended: %v", err)
		}
	})
}

// Unstall ends a stall before any release.
func TestUnstall(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, manual)
	defer closeOK(t, f)
	f.Stall(kverr.ErrDiskFull)
	if err := f.stalled(); err != kverr.ErrDiskFull {
		t.Fatalf("Stalled = %v", err)
	}
	f.Unstall()
	f.Unstall()
	if err := f.stalled(); err != nil {
		t.Fatalf("Stalled after Unstall = %v", err)
	}
	if err := put(t.Context(), f, ft, "a", 1); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(t.Context()); err != nil {
		t.Fatalf("Flush after Unstall = %v", err)
	}
}

// A write held by backpressure gets the error of a flush that fails
// meanwhile with ErrDiskFull or ErrSyncFailed (no retry repairs those by
// itself); with any other failure it waits on. Stats count the disk-full
// failures.
func TestBackpressureGivesUpOnDiskFull(t *testing.T) {
	for _, c := range []struct {
		name    string
		err     error
		givesUp bool
	}{
		{"disk-full", kverr.Errorf("grow: %w", kverr.ErrDiskFull), true},
		{"sync-failed", kverr.Errorf("commit: %w", kverr.ErrSyncFailed), true},
		{"other", errInjected, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ft := newFake(t)
				var failing bool
				ft.onWrite = func(uint64, int) error {
					if failing {
						return c.err
					}
					return nil
				}
				f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: 64, GroupWait: -1})
				defer closeOK(t, f)
				failing = true
				for range 5 { // 80 bytes: over the bound
					if err := put(t.Context(), f, ft, "x", 0); err != nil {
						t.Fatal(err)
					}
				}
				done := make(chan error, 1)
				go func() { done <- put(t.Context(), f, ft, "held", 0) }()
				synctest.Wait()
				if !c.givesUp {
					pending(t, done, "a write over the bound")
				}
				if err := f.Flush(t.Context()); !errors.Is(err, c.err) {
					t.Fatalf("Flush = %v, want the injected failure", err)
				}
				synctest.Wait()
				if c.givesUp {
					if err := <-done; !errors.Is(err, c.err) {
						t.Fatalf("the held write = %v, want the failure's error", err)
					}
				} else {
					pending(t, done, "a held write after a failure no retry repairs")
				}
				failing = false
				if err := f.Flush(t.Context()); err != nil {
					t.Fatal(err)
				}
				if !c.givesUp {
					if err := <-done; err != nil {
						t.Fatalf("the held write after recovery: %v", err)
					}
				}
				st := f.Stats()
				want := int64(0)
				if c.name == "disk-full" {
					want = st.Failures // each failed attempt
				}
				if st.Failures == 0 || st.DiskFull != want {
					t.Fatalf("Stats: Failures %d, DiskFull %d; want DiskFull %d", st.Failures, st.DiskFull, want)
				}
			})
		})
	}
}
