package kvbuf

import (
	"context"

	"github.com/kvbuf/kvbuf/internal/flush"
)

// MaxOp is the largest op number: writes, batches, BeginOp and EndOp of a
// larger one fail with ErrBadOp.
const MaxOp = flush.MaxOp

// WatermarkNotify returns the persisted watermark and a channel that is
// closed once the persisted watermark has moved above it, or once Close has
// finished (every later call then returns a closed channel: check Done, or
// use WaitWatermark, which returns ErrClosed). The pair is consistent: call
// it again after each wake-up and no advance is missed. It starts no
// goroutine and sends nothing, so a host can select on it in its own loop
// (a raft Ready loop, say) and nothing leaks if it stops listening.
//
// Every op at or below the watermark is durable in the engine and never
// needs replaying, so a host may truncate its log up to it (raft log
// compaction): never further, or a crash loses ops the engine still needs.
// The watermark never goes backwards, across a reopen too (Open starts from
// the persisted one).
func (db *DB) WatermarkNotify() (wm uint64, changed <-chan struct{}) {
	return db.flusher.WatermarkNotify()
}

// WaitWatermark blocks until the persisted watermark is above after, and
// returns it. It returns ErrClosed (and the watermark) once Close has
// finished with the watermark still at or below after, and ctx.Err() if ctx
// ends first. It starts no goroutine; see WatermarkNotify.
//
// A log-compaction loop:
//
//	for wm := uint64(0); ; {
//		var err error
//		if wm, err = db.WaitWatermark(ctx, wm); err != nil {
//			return err
//		}
//		log.TruncateThrough(wm) // every op <= wm is durable in the engine
//	}
func (db *DB) WaitWatermark(ctx context.Context, after uint64) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return db.flusher.Watermark(), err
	}
	return db.flusher.WaitWatermark(ctx, after)
}

// BeginOp begins op explicitly, for hosts with concurrent writers (see "Ops
// and the watermark" in the package documentation): call it under the lock
// that numbers the host's log, so that ops are begun in increasing order,
// then write op (single calls or a Batch) and end it with EndOp (a Batch
// ends its op), from any goroutine and in any order. Until it ends, op is
// open: every write of it is admitted, however many later ops end, and no
// flush persists a watermark at or above it. A host that finishes op n
// before it starts op n+1 does not need it.
//
// The engine keeps the last write of a key, not the write of the highest
// op: ops that write the same keys must write them in the order they were
// begun. Hold the host's row (or key) locks from before BeginOp until the
// op's writes are done, as a database does; examples/dochost is such a host.
//
// An op at or below Watermark is a redelivered op: nil, nothing changes
// (counted in Metrics.Redelivered). Op 0 (untracked) is a no-op. Errors:
// ErrBadOp if op is at or below an op already begun (and above the
// watermark) or above MaxOp; ErrClosed after Close has begun; ctx.Err() if
// ctx is already done.
func (db *DB) BeginOp(ctx context.Context, op uint64) error { return db.flusher.BeginOp(ctx, op) }

// EndOp ends op: it has no further writes, so that a flush may count it in
// the watermark once every earlier op has ended too (see "Ops and the
// watermark"). Ops written as one Batch need no EndOp. Ending an op that is
// complete already is a no-op; so is op 0, and an op at or below Watermark
// (a redelivered op, counted in Metrics.Redelivered). An op that has no
// writes at all (a raft no-op entry) is begun and ended by applying an empty
// Batch as that op, or by BeginOp then EndOp.
//
// Errors: ErrBadOp for an op above every op the engine has seen (written,
// batched or begun; after a reopen, above the watermark until the host
// replays), which is almost certainly a typo that would tell the host to
// skip replaying ops it never applied: nothing changes; ErrClosed after
// Close has begun; ctx.Err() if ctx is already done.
func (db *DB) EndOp(ctx context.Context, op uint64) error { return db.flusher.EndOp(ctx, op) }

// LogDurable reports that the host's own log is durable up to and
// including op. With Options.LogBeforeData, no flush persists a watermark
// above the highest op reported, so that after a power loss the watermark
// is never ahead of the log; the next flush (interval, size-triggered or
// an explicit Flush) may persist what the new position allows. Without
// the option it has no effect. Lower values than one reported before are
// ignored. It never blocks, and has no effect after Close.
func (db *DB) LogDurable(op uint64) { db.flusher.LogDurable(op) }
