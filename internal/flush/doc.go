// Package flush moves pending changes to durable storage: the engine's
// background flusher with group commit and a generation pipeline, its drain
// gate, the write barrier that gives every generation a consistent cut, op
// tracking for the watermark, and backpressure.
//
// The package is internal: the engine (package kvbuf) is its one importer,
// and its API changes with the engine's needs.
//
// # Protocol
//
// A Flusher drives one Target (the engine). Writers hold the shared side of
// the write barrier between BeginWrite and Ticket.End (or for the whole of
// a Flusher.Write, the single-change form). A generation is
// frozen (Target.Freeze with the barrier held exclusively, so it is a
// consistent cut), written (Generation.Write, in generation order, one at a
// time, on the writer goroutine), waited on (the wait function Write
// returned, in order, on the waiter goroutine) and released
// (Generation.Release, in order; a Recycler's Recycle after the released
// generation's callers were woken). Generation N+1 freezes and writes while N
// waits (for Flush callers, only if N has none: see Group commit);
// Options.PipelineDepth bounds the generations frozen but not released.
//
// A failure at any stage (a Write or wait error, a panic or runtime.Goexit
// in Freeze, Write, wait or Release, which becomes a *PanicError matching
// ErrPanicked) fails that generation and every later one in flight: their
// callers, and those waiting for the next generation, get the error (each
// Flush gets the result of one attempt) and nothing is released, so their
// changes stay readable. The next attempt writes every unreleased
// generation again, in order, before anything new, once the waits of the
// failed attempt returned: at once for an explicit Flush (or Close), else
// in the background after a backoff between Options.RetryMin and
// Options.RetryMax. Writes are idempotent, so writing again a generation
// that reached the disk is harmless.
//
// # Ops and the watermark
//
// This section is the flusher's mechanism; the rules a host keeps are
// stated in package kvbuf's documentation, "Ops and the watermark".
//
// Writes carry the host's op number (0: untracked). The flusher tracks,
// under the shared barrier, which ops are open (begun and not ended): an
// op is begun by BeginOp (explicitly: open until EndOp or a batch of it), by
// the first write of an op above every op begun (implicitly: open until a
// later op begins, or EndOp), or begun and ended at once by a batch
// (BeginWrite with closesOp). Ops are begun in increasing order (the host
// numbers them under its log's lock), so a number below the highest op
// begun that was never begun is complete. At each freeze the flusher
// claims the contiguous prefix of complete ops (the highest n with every op
// <= n ended), capped under Options.LogBeforeData by the host's durable log
// position (LogDurable), and never below the previous claim (which starts
// at Options.Watermark): that is the generation's watermark, persisted by
// Write after the generation's data. A write of a complete op above the
// persisted watermark is refused with ErrStaleOp, so a watermark never
// covers a write outside its generation or an earlier one, and never half
// an op; a write, BeginOp or EndOp of an op at or below it is skipped as a
// redelivered op. Watermark reports the watermark of the newest generation
// whose wait returned nil; WatermarkNotify and WaitWatermark report its
// advances.
//
// A flush is skipped when no write was admitted since the last freeze, no op
// can be claimed and, with no generation in flight, the Target reports no
// pending bytes. Otherwise it freezes, possibly a generation with no change
// that persists only a higher watermark.
//
// # Group commit
//
// Flush callers join the open generation; the writer freezes it, so a caller
// that arrives while a generation is being written or synced joins a later
// one (that one may have been frozen before the caller's writes). Flush
// returns nil once its generation and every earlier one are released. The
// writer freezes the open generation as soon as the pipeline has room and
// every unreleased generation is written (retries go first), except in two
// cases:
//
//   - Hold. While a generation with Flush callers is in flight, new callers
//     are held until it is released. Written now, their generation could
//     only be synced after it (a log syncs in order), and the callers it
//     releases would come back during that sync and wait for yet another
//     one: the callers split into two cohorts that alternate, each waiting
//     two syncs per Flush. Held, they share one generation with the
//     returning callers. While only background generations (no caller) are
//     in flight, callers' generations freeze and write at once, pipelined
//     behind them.
//   - Sibling wait. When no sync is in flight and the generations released
//     since the last freeze had k > 1 callers, the writer waits for k
//     callers to join (callers already waiting do not count), up to
//     Options.GroupWait and up to GroupWait/4 after the last join: the
//     released callers come back one by one, and without the wait the
//     first would freeze a generation alone and the others would wait a
//     whole sync for the next. With one caller it never waits.
//
// Background generations (interval, FlushBytes, backpressure) freeze and
// write eagerly, pipelined behind generations in flight.
//
// # Background flushes and backpressure
//
// The writer also flushes Options.Interval after the previous freeze when
// anything is pending, and when a writer finds more than Options.FlushBytes
// pending. A BeginWrite that finds more than Options.MaxPendingBytes
// pending waits (counted in Stats.Stalls) until a release makes room.
//
// # Drain gate
//
// The Flusher admits Flush calls, Enter tickets, Exclusive calls and writes
// waiting for room through its drain gate (drainGate, not exported: the
// engine is its only user). A write in progress holds the write barrier's
// shared side instead and reads the gate's closing flag under it; Close
// shuts the gate, then takes the barrier once (invariant 13), so a write
// costs two atomic operations (the barrier's RLock and RUnlock), not four.
// Enter is a compare-and-swap and
// Leave an atomic add on one in-flight counter whose sign bit is the closed
// flag, so a Close racing with Enter can never admit an operation after the
// drain. The zero gate has one counter (cheap, wait-group-like); Stripe spreads
// the count over 16 cache-line padded counters picked per goroutine, for
// gates entered from many goroutines at once (the Flusher's). Close refuses new
// operations and waits for admitted ones; Done and Wait let any number of
// observers wait. Reads do not enter the Flusher's gate: the engine reads
// first and checks its own closing flag after.
//
// # Errors
//
// The package returns the module's sentinels (package kvbuf exports them:
// errors.Is(err, kvbuf.ErrStaleOp)), and *PanicError for a target that
// panicked; it exports no sentinel of its own, since the engine is its
// only importer.
//
// # Caveats
//
//   - Changes the Target makes outside BeginWrite (or Exclusive) are seen as
//     pending only through PendingBytes when no generation is in flight.
//   - Target calls are not time-limited: Write gets a context that is never
//     cancelled, and Close waits for in-flight operations and generations
//     without a deadline. A target that hangs hangs Close.
//   - Calling Flush, BeginOp, EndOp, Exclusive or Close between BeginWrite
//     and Ticket.End deadlocks that goroutine (Flush still returns when its
//     context ends).
//   - MaxPendingBytes is checked before each write, so concurrent writers can
//     overshoot it by the size of their writes.
//   - The sibling wait spins (yielding) for up to GroupWait on the writer
//     goroutine, which costs processor time while no sync is in flight, and
//     adds GroupWait/4 to a Flush whose siblings do not come back.
//   - Held callers' Write runs after the previous sync instead of during it,
//     so a large Write is on their critical path.
//   - Stats are a snapshot of counters read at slightly different times.
//   - Ending a Ticket twice corrupts the gate and the barrier; it is
//     detected only with -tags invariants.
package flush
