package kvbuf

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestBitsSetPaths: Bits.Set answers the same through its in-line path
// (Flusher.EnterWrite: no memory budget, pending bytes at or below
// FlushBytes, an op not redelivered) and through DB.write (an engine
// under a MemoryBudget always takes it): the bit set and counted, an
// index out of range, a cancelled context, a stale op, a redelivered op,
// an op above MaxOp and a closed engine, each refused before anything is
// set or any op begun.
func TestBitsSetPaths(t *testing.T) {
	for _, inline := range []bool{true, false} {
		name := "db-write"
		if inline {
			name = "inline"
		}
		t.Run(name, func(t *testing.T) {
			opts := &Options{FlushInterval: -1}
			if !inline {
				bud := newBudgetT(t, 1<<30, nil)
				t.Cleanup(func() { _ = bud.Close() })
				opts.MemoryBudget = bud
			}
			db := openT(t, t.TempDir(), opts)
			b := mustBits(t, db, "b")
			if got := db.share == nil; got != inline {
				t.Fatalf("engine has a budget share: %v, want %v", !got, !inline)
			}
			want := func(i uint64, v bool, count uint64) {
				t.Helper()
				if got, err := b.Get(i); err != nil || got != v {
					t.Fatalf("Get(%d) = %v, %v; want %v", i, got, err, v)
				}
				if n, err := b.Count(); err != nil || n != count {
					t.Fatalf("Count() = %d, %v; want %d", n, err, count)
				}
			}
			isErr := func(err, target error, what string) {
				t.Helper()
				if !errors.Is(err, target) {
					t.Fatalf("%s: %v, want %v", what, err, target)
				}
				if target != ErrClosed && !strings.HasPrefix(err.Error(), `kvbuf: bitslice "b": `) {
					t.Fatalf("%s: %q does not name the bitslice once", what, err)
				}
			}

			mustSet(t, b, 7, true, 1)
			mustSet(t, b, 7, true, 1) // pending with its value already
			want(7, true, 1)
			mustSet(t, b, 7, false, 2) // ends op 1
			want(7, false, 0)
			mustSet(t, b, 9, true, 0)
			want(9, true, 1)

			isErr(b.Set(ctx, 1<<40, true, 3), ErrOutOfRange, "Set past MaxBits")
			if err := b.Set(canceled(), 10, true, 3); err != context.Canceled {
				t.Fatalf("Set with a cancelled context = %v, want context.Canceled as it is", err)
			}
			isErr(b.Set(ctx, 10, true, 1), ErrStaleOp, "Set of op 1, ended")
			isErr(b.Set(ctx, 10, true, MaxOp+1), ErrBadOp, "Set above MaxOp")
			want(10, false, 1)
			if m := db.Metrics(); m.HighestOp != 2 {
				t.Fatalf("HighestOp %d after the refused Sets, want 2: one of them began an op", m.HighestOp)
			}

			if err := db.EndOp(ctx, 2); err != nil {
				t.Fatal(err)
			}
			mustFlush(t, db)
			if w := db.Watermark(); w != 2 {
				t.Fatalf("Watermark %d, want 2", w)
			}
			before := db.Metrics().Redelivered
			if err := b.Set(ctx, 11, true, 2); err != nil {
				t.Fatalf("Set of a redelivered op: %v", err)
			}
			want(11, false, 1)
			if got := db.Metrics().Redelivered - before; got != 1 {
				t.Fatalf("Redelivered grew by %d, want 1", got)
			}

			closeT(t, db)
			isErr(b.Set(ctx, 12, true, 3), ErrClosed, "Set after Close")
		})
	}
}
