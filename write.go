package kvbuf

import (
	"context"
	"errors"
)

// write is the one body of the single-call writes (KV.Put, KV.Delete,
// KV.DeleteRange, Bits.Set, Bits.SetRange). bad is the input check's
// result, taken before admission so that a bad write neither waits for room
// nor changes anything. Then it admits the write of op (waiting for room if
// pending memory is over its bound), skips it if op is redelivered (see
// "Ops and the watermark"), applies it and ends it. Errors carry the
// handle's kind and name (mapErr), except the context's, returned as
// ctx.Err() is.
//
// apply must not be kept: the closures the callers pass then stay on their
// stack, and a write allocates nothing here.
func (db *DB) write(ctx context.Context, op uint64, kind, name string, bad error, apply func() error) error {
	if bad != nil {
		return mapErr(bad, kind, name)
	}
	if db.share != nil {
		granted, err := db.budgetAdmit(ctx)
		if err != nil {
			return err
		}
		defer db.budgetDone(granted)
	}
	t, err := db.flusher.BeginWrite(ctx, op, false)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return mapErr(err, kind, name)
	}
	if t.Skipped() {
		return nil
	}
	err = apply()
	t.End()
	return mapErr(err, kind, name)
}

// budgetAdmit waits, before a write begins, for room under the engine's
// memory budget (budget.go). It waits outside the flusher's gate and write
// barrier, so the flushes it waits for can freeze. Its errors are the
// context's (as they are) or ErrClosed. The caller calls budgetDone with
// granted once the write ended.
func (db *DB) budgetAdmit(ctx context.Context) (granted bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if db.closing.Load() {
		return false, ErrClosed
	}
	return db.share.b.admit(ctx, db.share)
}

// budgetDone tells the budget a write ended: the engine's share is synced
// (before the round ends, so the next round sees the write's bytes).
func (db *DB) budgetDone(granted bool) {
	db.share.sync()
	if granted {
		db.share.b.done()
	}
}
