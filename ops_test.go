package kvbuf

// The host's op protocol: redelivered ops and contexts checked before
// admission.

import (
	"context"
	"errors"
	"testing"
)

// TestRedeliveredOpsAreNoOps (issue 18): a raft host restarts with
// Applied = min(Watermark(), HardState.Commit), so raft redelivers entries
// at or below the watermark. Every kind of write, a batch and EndOp of such
// an op returns nil, changes nothing (pending state, store, files) and is
// counted in Metrics.Redelivered; also after a reopen.
func TestRedeliveredOpsAreNoOps(t *testing.T) {
	dir := newEngineDir(t) // k: a=1; b: bit 3; watermark 2
	for round := range 2 {
		db := openT(t, dir, &Options{FlushInterval: -1})
		k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
		if round == 0 {
			mustPut(t, k, "c", "3", 3)
			if err := db.EndOp(ctx, 4); err != nil {
				t.Fatal(err)
			}
			mustFlush(t, db)
		}
		if wm := db.Watermark(); wm != 4 {
			t.Fatalf("round %d: watermark %d, want 4", round, wm)
		}
		before := engineState(t, db)
		calls := []struct {
			name string
			run  func(op uint64) error
		}{
			{"Put", func(op uint64) error { return k.Put(ctx, []byte("a"), []byte("redelivered"), op) }},
			{"Delete", func(op uint64) error { return k.Delete(ctx, []byte("a"), op) }},
			{"DeleteRange", func(op uint64) error { return k.DeleteRange(ctx, nil, nil, op) }},
			{"Set", func(op uint64) error { return b.Set(ctx, 3, false, op) }},
			{"SetRange", func(op uint64) error { return b.SetRange(ctx, 0, 100, true, op) }},
			{"DropKV", func(op uint64) error { return db.DropKV(ctx, "k", op) }},
			{"Apply", func(op uint64) error {
				bt := db.NewBatch()
				bt.Put(k, []byte("z"), []byte("redelivered"))
				bt.Set(b, 9, true)
				return db.Apply(ctx, bt, op)
			}},
			{"EndOp", func(op uint64) error { return db.EndOp(ctx, op) }},
		}
		var n int64
		for _, c := range calls {
			for op := uint64(1); op <= 4; op++ {
				if err := c.run(op); err != nil {
					t.Fatalf("round %d: redelivered %s of op %d: %v", round, c.name, op, err)
				}
				n++
			}
		}
		m := db.Metrics()
		if m.Redelivered != n || m.PendingBytes != 0 {
			t.Fatalf("round %d: Redelivered %d PendingBytes %d, want %d and 0", round, m.Redelivered, m.PendingBytes, n)
		}
		if after := engineState(t, db); after != before {
			t.Fatalf("round %d: redelivered ops changed the engine:\n%s\nwant\n%s", round, after, before)
		}
		mustFlush(t, db)
		if g := db.Metrics().Generations; g != int64(1-round) {
			t.Fatalf("round %d: %d generations; redelivered ops must not make a flush", round, g)
		}
		closeT(t, db)
	}
}

// TestContextCheckedBeforeAdmission (issue 20): a call given a context that
// is already done returns its error and changes nothing, even when it would
// not have waited; that holds for every engine call that takes a context.
func TestContextCheckedBeforeAdmission(t *testing.T) {
	dir := newEngineDir(t)
	db := openT(t, dir, &Options{FlushInterval: -1})
	defer closeT(t, db)
	k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
	before := engineState(t, db)
	done, cancel := context.WithCancel(ctx)
	cancel()
	calls := []struct {
		name string
		run  func() error
	}{
		{"Put", func() error { return k.Put(done, []byte("x"), []byte("1"), 5) }},
		{"Put op 0", func() error { return k.Put(done, []byte("x"), []byte("1"), 0) }},
		{"Delete", func() error { return k.Delete(done, []byte("a"), 5) }},
		{"DeleteRange", func() error { return k.DeleteRange(done, nil, nil, 5) }},
		{"Set", func() error { return b.Set(done, 9, true, 5) }},
		{"SetRange", func() error { return b.SetRange(done, 0, 10, true, 5) }},
		{"DropKV", func() error { return db.DropKV(done, "k", 5) }},
		{"Apply", func() error {
			bt := db.NewBatch()
			bt.Put(k, []byte("x"), []byte("1"))
			return db.Apply(done, bt, 5)
		}},
		{"Update", func() error {
			return db.Update(done, 5, func(bt *Batch) error { bt.Put(k, []byte("x"), []byte("1")); return nil })
		}},
		{"EndOp", func() error { return db.EndOp(done, 5) }},
		{"Flush", func() error { return db.Flush(done) }},
		{"FlushMemtables", func() error { return db.FlushMemtables(done) }},
		{"Wait", func() error { return db.Wait(done) }},
	}
	for _, c := range calls {
		if err := c.run(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want context.Canceled", c.name, err)
		}
	}
	if after := engineState(t, db); after != before {
		t.Fatalf("calls with a cancelled context changed the engine:\n%s\nwant\n%s", after, before)
	}
	if m := db.Metrics(); m.PendingBytes != 0 {
		t.Fatalf("PendingBytes %d after refused calls, want 0", m.PendingBytes)
	}
}
