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
	err = apply() // publishes its change before End (publication order 13)
	t.End()
	return mapErr(err, kind, name)
}
