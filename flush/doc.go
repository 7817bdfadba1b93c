// Package flush moves pending changes to durable storage: a background
// flusher with group commit, the engine's drain gate, a write barrier for a
// consistent cut, and backpressure.
//
// # Protocol
//
// A Flusher drives a fixed list of Targets (the buffer overlays). One
// physical flush takes the write barrier exclusively (writers hold its
// shared side between BeginWrite and Op.End), calls Freeze on every target
// so that one watermark covers a consistent cut, releases the barrier,
// computes wm = max(persisted watermark, every Freeze result), calls Apply
// on each target in order with wm (the receipt target last) and, once all
// succeeded, Release on each. If any call fails nothing is released: the
// frozen sets stay readable and the next Freeze merges them, so no change
// is lost, and the receipt target is not applied, so its watermark is never
// ahead of the data.
//
// # Group commit
//
// Flush callers join the open generation; the background goroutine detaches
// it (so later callers open the next one) before freezing, runs one physical
// flush and hands its result to every caller of that generation. A caller
// that arrives while a flush is running therefore waits for the next one:
// the running flush may have frozen the targets before the caller's writes.
// A caller whose context ends returns at once; the flush goes on. A panic or
// runtime.Goexit in a target becomes a *PanicError (matching ErrPanicked)
// for every caller of that generation, and the flusher keeps working.
//
// # Background flushes
//
// The background goroutine also flushes Options.Interval after the previous
// flush when anything is pending, and when a writer finds more than
// Options.FlushBytes pending. After a failure it retries with exponential
// backoff between Options.RetryMin and Options.RetryMax; explicit Flush
// calls are not delayed by the backoff and each gets the result of exactly
// one attempt.
//
// # Drain gate
//
// Gate is usable on its own. Enter is a compare-and-swap and Leave an
// atomic add on one in-flight counter whose sign bit is the closed flag, so
// a Close racing with Enter can never admit an operation after the drain.
// The zero Gate has one counter (cheap, wait-group-like); Stripe spreads
// the count over 16 cache-line padded counters picked per goroutine, for
// gates on every read (the Flusher's). Close refuses new operations and
// waits for admitted ones; Done and Wait let any number of observers wait.
//
// # Caveats
//
//   - A flush in which every target reports PendingBytes() == 0 is skipped:
//     targets must report a positive size while they hold any change.
//   - Target calls are not time-limited: Apply gets a context that is never
//     cancelled, and Close waits for in-flight operations without a
//     deadline. A target that hangs hangs Close.
//   - Calling Flush or Close between BeginWrite and Op.End deadlocks that
//     goroutine's flush (Flush still returns when its context ends).
//   - MaxPendingBytes is checked before each write, so concurrent writers can
//     overshoot it by the size of their writes.
//   - Stats are a snapshot of counters read at slightly different times.
//   - Leaving the gate twice with one Token, or ending an Op twice, corrupts
//     the in-flight count; it is not detected.
package flush
