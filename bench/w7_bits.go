package bench

import (
	"context"
	"sync/atomic"
	"time"
)

// ImplNoWriter is W7/lookup-under-writes' reference row: the engine's
// reader alone, the same lookups with no writer and no flusher (nothing
// pending): kvbuf's ratio to it is what the writes cost the reads.
const ImplNoWriter = "reads-without-writer"

// w7NoWriter is the reference row: t's reader phase alone.
func w7NoWriter(t w7Target) Impl {
	return Impl{Name: ImplNoWriter, Floor: true, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
		rec := &w7Rec{flushing: new(atomic.Bool)}
		start := time.Now()
		reads, err := t.readBits(rec)
		elapsed := time.Since(start)
		return RoundResult{Ops: int(reads), Reads: reads, Elapsed: elapsed, ReadLatencies: rec.lat}, err
	})}
}
