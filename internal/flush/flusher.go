package flush

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvbuf/kvbuf/internal/invariants"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/internal/stripe"
)

// Flusher makes a Target durable, one generation at a time, through a
// pipeline: a generation is frozen and written on the writer goroutine,
// waited on (its sync) and released on the waiter goroutine, so that
// generation N+1 freezes and writes while N waits (N+1 holds Flush callers
// only if N has none; see the package documentation). Flush callers share
// generations (group commit). The Flusher also owns the engine's drain gate
// and write barrier, and tracks the host's op numbers to compute the
// watermark.
//
// # Invariants
//
// Fields are owned as follows ("writer" and "waiter" are the two goroutines
// New starts; "mu" is Flusher.mu; "barrier" the write barrier).
//
//  1. Generations are numbered 1, 2, 3, ... by frozen, which only the writer
//     advances, with the barrier held exclusively, after a Freeze that
//     returned. A Freeze that panicked consumes no number.
//  2. claimed only grows (invariants-checked). Only the writer stores it,
//     with the barrier held exclusively, together with frozen, and never
//     above the tracker's contiguous prefix of complete ops. BeginWrite
//     admits only a write of an open op (or one it begins), with the shared
//     barrier held: that op is above every claim made before the write
//     ends, and stays so until it ends. So a generation's watermark never
//     covers a write outside it or an earlier generation; a write of a
//     complete op is refused (ErrStaleOp) or, at or below the persisted
//     watermark, skipped.
//  3. The op tracker (ops) and dirty are changed by writers, BeginOp and
//     EndOp under the shared barrier and read, and dirty cleared, by the
//     writer under the exclusive barrier, so a freeze sees every op change
//     whole. dirty is cleared only after frozen is stored, so a reader that
//     sees it clear sees the generation that took the change.
//  4. q holds the unreleased generations in freeze order (under mu): the
//     writer appends, the waiter pops the head. A freeze starts only when
//     len(q) < PipelineDepth and every generation in q is written, and for
//     Flush callers (except Close's) only when no generation in q has
//     callers (the hold, see the package documentation).
//  5. q[:nWritten] are written in the current epoch, and the writer calls
//     Write only for q[nWritten]: Write is called in order, one at a time,
//     and Write of g+1 only after Write of g returned nil. nWritten grows only
//     on the writer; the waiter decrements it when it pops q[0] and sets it
//     to 0 when a wait or Release fails.
//  6. waits holds the wait functions in Write order. Only the waiter calls
//     them, each exactly once. An item whose epoch is older than epoch is
//     stale: its result is ignored (stale counts those not yet done). The
//     writer rewrites a failed generation only when stale == 0, so the waits
//     of one generation never overlap.
//  7. persisted is stored only by the waiter, from q[0].wm after q[0]'s wait
//     returned nil in the current epoch; watermarks grow with generation
//     numbers, so it never decreases (invariants-checked).
//  8. Release is called only by the waiter, for q[0], after its wait
//     returned nil in the current epoch; every earlier generation was
//     popped before, so Release runs exactly once and in order
//     (invariants-checked through released). A group is completed with nil
//     only after its generation's Release returned.
//  9. A failure of q[i] (Write or wait error, panic or Goexit in any stage)
//     completes every group of q[i:], and the open group, with an error
//     before anything else can complete them; a wait or Release failure also
//     bumps epoch and sets nWritten to 0. So a group never gets nil when a
//     generation at or before its own failed, and each group gets the result
//     of one attempt. A group is completed exactly once (completion detaches
//     it from its generation, or from open, under mu).
//  10. A Flush caller joins the open group under mu; the writer detaches it
//     under mu immediately before it freezes (or decides nothing needs a
//     freeze): every member joined before that freeze, so the writes it
//     finished before calling Flush are in that generation or an earlier
//     one.
//  11. The barrier is taken exclusively only by the writer (freeze), the
//     waiter (Settle), Exclusive and Close (invariant 13), always released
//     by a deferred Unlock or, in Close, at once.
//     mu is never held while taking the barrier or calling the Target.
//  12. The writer and waiter goroutines run until Close sets stopping (the
//     waiter until the writer exited and every wait returned). A
//     runtime.Goexit in a target call ends its goroutine; the call's
//     deferred handler starts a goroutine that records the failure and
//     resumes the same loop (all loop state lives in the Flusher). That is
//     the only restart.
//  13. A write holds the barrier's shared side and not the gate (BeginWrite,
//     and EnterWrite, Write's and Bits.Set's fast path, which repeats the
//     steps; a write that waits for room holds the gate while it waits).
//     It reads the gate's closing flag after taking the barrier and is
//     refused if it is set; Close sets the flag (gate Shut) before it
//     takes the barrier exclusively once. So a
//     write admitted before Close took the barrier ended before Close went
//     on (its RUnlock happens before that Lock), and every write after finds
//     the flag set: Close's final flush and the host's teardown never run
//     beside a write (mutations 200 and 450, EnterWrite).
type Flusher struct {
	t       Target
	settler Settler // t's Settler, or nil
	opts    Options
	// pend is t's PendingCounter when admission may read it in place of
	// PendingBytes (MaxPendingBytes and FlushBytes positive), else nil.
	pend *atomic.Int64

	gate    drainGate
	barrier *stripe.RWBarrier
	mask    uint32

	ops           opTracker     // invariant 3
	logCap        atomic.Uint64 // Options.LogBeforeData: the host's durable log position
	highestAtOpen uint64        // Options.HighestOp

	dirty     paddedBool    // a write was admitted since the last freeze (invariant 3)
	claimed   atomic.Uint64 // invariant 2
	frozen    atomic.Uint64 // newest generation frozen (invariant 1)
	released  atomic.Uint64 // newest generation released (invariant 8)
	persisted atomic.Uint64 // invariant 7

	kicked   atomic.Bool   // a byte-triggered kick is outstanding
	kick     chan struct{} // cap 1: wakes the writer
	waitKick chan struct{} // cap 1: wakes the waiter
	closing  chan struct{} // closed when Close begins

	writerDone chan struct{}
	waiterDone chan struct{}

	// Owned by the writer goroutine.
	tick     *time.Timer // interval or retry backoff
	gwTimer  *time.Timer // group wait, after the spinning phase
	bgDue    bool        // a background flush (interval, bytes, retry) is due
	seenFail int64       // failSeq when the writer last armed tick

	flushes     atomic.Int64
	coalesced   atomic.Int64
	redelivered atomic.Int64 // calls skipped: op at or below the persisted watermark
	stalls      atomic.Int64
	stallNs     atomic.Int64
	latency     histogram

	mu         sync.Mutex
	open       *group // Flush callers waiting for the next freeze (invariant 10)
	q          []*gen // invariant 4
	nWritten   int    // invariant 5
	waits      []waitItem
	inWait     int    // waits not yet returned (queued or running)
	stale      int    // of those, from an older epoch (invariant 6)
	epoch      uint64 // bumped by wait and Release failures
	backoff    time.Duration
	failSeq    int64
	relCallers int           // callers of the generations released since the last freeze
	eager      bool          // benchmarks: write eagerly even while callers' generations sync
	progress   chan struct{} // closed and replaced at each release and failure
	// stallErr is the error of Stall until the next release; stallCh is
	// closed while it is set (and replaced at the release).
	stallErr  error
	stallCh   chan struct{}
	wmChanged chan struct{} // closed and replaced when persisted advances, closed for good by Close
	stopping  bool
	wExited   bool // the writer has returned
	st        struct {
		generations, writes, failures int64
		diskFull                      int64 // failures matching ErrDiskFull, and stalls
		lastErr                       error
		maxInFlight                   int
	}
	closeStarted bool
	closeDone    chan struct{}
	closeErr     error
}

// paddedBool is a flag on a cache line of its own: set by the first write
// after a freeze (later ones only read it), cleared at the freeze.
type paddedBool struct {
	_ [stripe.CacheLine]byte
	atomic.Bool
	_ [stripe.CacheLine - 4]byte
}

// gen is one frozen generation.
type gen struct {
	seq     uint64
	g       Generation
	wm      uint64
	groups  []*group // callers to wake when it is released
	callers int      // members of groups when they were attached
}

// group is the Flush callers waiting for one generation.
type group struct {
	done   chan struct{}
	err    error        // written before done is closed
	n      atomic.Int32 // callers that joined
	final  bool         // Close's final flush is waiting on it
	waited bool         // the writer already did the sibling wait for it (under mu)
	base   int32        // n at the first release since the last freeze, if open then (under mu)
}

func (g *group) isDone() bool { return chanClosed(g.done) }

func (g *group) complete(err error) {
	g.err = err
	close(g.done)
}

type waitItem struct {
	gen   *gen
	wait  func() error
	epoch uint64
}

// New returns a Flusher for t and starts its two goroutines (the writer,
// which freezes and writes generations, and the waiter, which waits for
// them and releases them); Close stops them. It returns an error wrapping
// ErrBadOptions, and starts nothing, for options out of range.
func New(t Target, opts *Options) (*Flusher, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	n := stripe.Count()
	f := &Flusher{
		t:          t,
		opts:       opts.withDefaults(),
		barrier:    stripe.NewRWBarrier(n),
		mask:       uint32(n - 1),
		kick:       make(chan struct{}, 1),
		waitKick:   make(chan struct{}, 1),
		closing:    make(chan struct{}),
		writerDone: make(chan struct{}),
		waiterDone: make(chan struct{}),
		progress:   make(chan struct{}),
		stallCh:    make(chan struct{}),
		wmChanged:  make(chan struct{}),
		closeDone:  make(chan struct{}),
		tick:       time.NewTimer(time.Hour),
		gwTimer:    time.NewTimer(time.Hour),
	}
	f.settler, _ = t.(Settler)
	if pc, ok := t.(PendingCounter); ok && f.opts.MaxPendingBytes > 0 && f.opts.FlushBytes > 0 {
		f.pend = pc.PendingCounter()
	}
	f.gate.Stripe() // Flush calls, tickets and writes waiting for room enter it from many goroutines
	f.claimed.Store(f.opts.Watermark)
	f.persisted.Store(f.opts.Watermark)
	f.ops.init(f.opts.Watermark)
	f.logCap.Store(f.opts.Watermark)
	f.highestAtOpen = max(f.opts.HighestOp, f.opts.Watermark)
	f.gwTimer.Stop()
	f.armTick(0)
	go f.writeLoop()
	go f.waitLoop()
	return f, nil
}

// Ticket is one admitted operation (a write, or an Enter); call End exactly
// once when it is over. The zero Ticket's End does nothing.
type Ticket struct {
	f       *Flusher
	tok     gateToken
	w       *sync.RWMutex // shared side of the write barrier; nil for Enter
	ended   *atomic.Bool  // set only when invariants are enabled
	skipped bool
}

// Skipped reports that BeginWrite admitted nothing because the write's op
// is at or below the persisted watermark (a redelivered op): the caller
// must change nothing and report success. End is a no-op on such a Ticket.
func (t Ticket) Skipped() bool { return t.skipped }

// End leaves the write barrier (a write) or the gate (an Enter). Ending a Ticket
// twice corrupts the gate and the barrier (detected with -tags invariants).
func (t Ticket) End() {
	if invariants.Enabled && t.ended != nil {
		invariants.Check(!t.ended.Swap(true), "flush: Ticket ended twice")
	}
	if t.w != nil {
		t.w.RUnlock()
	}
	if t.f != nil {
		t.f.gate.Leave(t.tok)
	}
}

func newTicket(f *Flusher, tok gateToken, w *sync.RWMutex) Ticket {
	t := Ticket{f: f, tok: tok, w: w}
	if invariants.Enabled {
		t.ended = new(atomic.Bool)
	}
	return t
}

// BeginWrite admits a write of the host's op number op (0: not tracked);
// closesOp says the write is a whole op (a batch: begun and ended in one
// call). It enters the shared side of the write barrier, so a freeze (or
// Close, invariant 13) cannot happen while the write is half done, and records the op
// (see "Ops and the watermark" in the package documentation): a write of an
// op above every op begun begins it implicitly; a write of an open op
// (begun and not ended) is always admitted; a batch ends its op. Writes
// that End before a Flush call starts are covered by that Flush.
//
// A write whose op is at or below the persisted watermark (Watermark) is a
// redelivered op: BeginWrite returns a Ticket whose Skipped reports true
// and a nil error, having admitted nothing (counted in Stats.Redelivered);
// the caller changes nothing and reports success. The watermark already
// covers every write of that op.
//
// It returns ctx.Err() if ctx is already done (nothing is admitted),
// ErrStaleOp for an op above the persisted watermark that is complete (a
// host bug: see ErrStaleOp), ErrBadOp above MaxOp, ErrClosed once Close has
// begun and, if the Target holds more than Options.MaxPendingBytes, waits
// until a release makes room (kicking a flush), returning ctx.Err() if ctx
// ends first, the error of Stall while the flusher is stalled, and the
// error of a flush that fails meanwhile with ErrDiskFull or ErrSyncFailed.
//
// Do not call Flush, BeginOp, EndOp, Exclusive or Close between BeginWrite
// and End: they need the barrier the caller holds.
func (f *Flusher) BeginWrite(ctx context.Context, op uint64, closesOp bool) (Ticket, error) {
	w, skipped, err := f.admitWrite(ctx, op, closesOp)
	if err != nil || skipped {
		return Ticket{skipped: skipped}, err
	}
	return newTicket(nil, gateToken{}, w), nil
}

// Write is BeginWrite (closesOp false), apply, End in one call, for the
// engine's single-change writes: apply runs under the write barrier's
// shared side and its error is returned; for a redelivered op apply is
// not called and Write returns nil. No Ticket is built. Errors as
// BeginWrite, then apply's. apply must not call Flush, BeginOp, EndOp,
// Exclusive or Close.
func (f *Flusher) Write(ctx context.Context, op uint64, apply func() error) error {
	w, err := f.EnterWrite(ctx, op)
	if w == nil {
		if err != nil {
			return err
		}
		var skipped bool
		if w, skipped, err = f.admitWrite(ctx, op, false); err != nil || skipped {
			return err
		}
	}
	err = apply()
	w.RUnlock()
	return err
}

// EnterWrite is Write's admission in line, for a caller that applies its
// change itself (Bits.Set): with pending bytes at or below FlushBytes and
// op not redelivered, it admits a write of op as BeginWrite does (ctx,
// the barrier's stripe, the closing flag under it, invariant 13, and the
// op tracker under it, invariant 2) and returns the stripe held; the
// caller publishes its change, then releases the stripe with RUnlock
// (publication order 13). It returns nil and no error when that common
// case does not apply (a redelivered op, pending bytes above FlushBytes):
// the caller then calls Write or BeginWrite, which decide; nil and an
// error when the write is refused (ctx.Err(), ErrClosed, ErrStaleOp,
// ErrBadOp). Nothing is held then. The caller must not call Flush,
// BeginOp, EndOp, Exclusive or Close before its RUnlock.
func (f *Flusher) EnterWrite(ctx context.Context, op uint64) (*sync.RWMutex, error) {
	if !f.bytesFast() || op != 0 && (op > MaxOp || op <= f.persisted.Load()) {
		return nil, nil
	}
	// admitWrite's steps for a write that is not redelivered, with
	// pending bytes at or below FlushBytes.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := f.barrier.At(stripe.Hint(32) & f.mask)
	w.RLock()
	if f.gate.closing.Load() { // invariant 13, as admitWrite
		w.RUnlock()
		return nil, kverr.ErrClosed
	}
	// Under the barrier, as admitWrite (invariant 2); the open head op,
	// the common case, needs no call.
	if op != 0 && !f.ops.openHead(op) {
		if err := f.ops.write(op); err != nil {
			w.RUnlock()
			return nil, err
		}
	}
	if !f.dirty.Load() {
		f.dirty.Store(true)
	}
	return w, nil
}

// bytesFast reports that admission's pending-bytes step has nothing to
// do: the pending counter is at or below FlushBytes (PendingCounter: no
// kick, no wait), or there is no bound.
func (f *Flusher) bytesFast() bool {
	if f.opts.MaxPendingBytes > 0 {
		c := f.pend
		return c != nil && c.Load() <= f.opts.FlushBytes
	}
	return true
}

// admitWrite is BeginWrite's admission: the barrier stripe the write
// holds, or skipped for a redelivered op, or an error (nothing held).
func (f *Flusher) admitWrite(ctx context.Context, op uint64, closesOp bool) (w *sync.RWMutex, skipped bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if op != 0 {
		if err := checkOpRange("write", op); err != nil {
			return nil, false, err
		}
		if op <= f.persisted.Load() {
			if f.gate.closing.Load() {
				return nil, false, kverr.ErrClosed
			}
			// Redelivered: persisted only grows, so the op stays covered.
			f.redelivered.Add(1)
			return nil, true, nil
		}
	}
	// At or below FlushBytes (which is positive when pend is set), the
	// counter decides as PendingBytes would (PendingCounter).
	if !f.bytesFast() {
		if err := f.admitBytes(ctx); err != nil {
			return nil, false, err
		}
	}
	// A write holds the barrier's shared side only, not the gate as well
	// (two atomic operations a write instead of four): Close shuts the
	// gate, then takes the barrier exclusively once, so a write that
	// finds the gate open under the barrier ends before Close goes on,
	// and every later one finds it shut (invariant 13).
	w = f.barrier.At(stripe.Hint(32) & f.mask)
	w.RLock() // inlined here: RLockAt is a call
	if f.gate.closing.Load() {
		w.RUnlock()
		return nil, false, kverr.ErrClosed
	}
	if op != 0 {
		var err error
		if closesOp {
			err = f.ops.apply(op)
		} else {
			err = f.ops.write(op)
		}
		if err != nil {
			w.RUnlock()
			return nil, false, err
		}
	}
	if !f.dirty.Load() {
		f.dirty.Store(true)
	}
	return w, false, nil
}

// admitBytes applies FlushBytes and MaxPendingBytes. A write that waits for
// room enters the gate while it waits (Stats.Active counts it; Close wakes
// it through f.closing and waits for it to leave).
func (f *Flusher) admitBytes(ctx context.Context) (err error) {
	if p := f.t.PendingBytes(); p > f.opts.FlushBytes {
		f.kickAuto()
		if p > f.opts.MaxPendingBytes {
			tok, err := f.gate.Enter()
			if err != nil {
				return err
			}
			defer f.gate.Leave(tok) // a panic in PendingBytes leaves the gate too
			if err := f.backpressure(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// backpressure waits until pending bytes are within the bound. The progress
// channel is read before pending bytes are, so a release between the two
// cannot be missed. It gives up, returning the error, when the flusher is
// stalled (Stall) or when a flush attempt fails while it waits with an
// error no retry repairs by itself: a full disk (ErrDiskFull) or a failed
// write-ahead log (ErrSyncFailed). Waiting on would block the writer until
// its context ends; the host learns why at once.
func (f *Flusher) backpressure(ctx context.Context) error {
	f.stalls.Add(1)
	start := time.Now()
	defer func() { f.stallNs.Add(int64(time.Since(start))) }()
	f.mu.Lock()
	seen := f.failSeq
	f.mu.Unlock()
	for {
		f.mu.Lock()
		ch, sch, serr := f.progress, f.stallCh, f.stallErr
		var ferr error
		if f.failSeq != seen && stopsWaiting(f.st.lastErr) {
			ferr = f.st.lastErr
		}
		f.mu.Unlock()
		if f.t.PendingBytes() <= f.opts.MaxPendingBytes {
			return nil
		}
		if serr != nil {
			return serr
		}
		if ferr != nil {
			return ferr
		}
		f.kickAuto()
		select {
		case <-ch:
		case <-sch:
		case <-ctx.Done():
			return ctx.Err()
		case <-f.closing:
			return kverr.ErrClosed
		}
	}
}

// stopsWaiting reports whether a flush failure ends the wait of writes in
// backpressure (see backpressure).
func stopsWaiting(err error) bool {
	return errors.Is(err, kverr.ErrDiskFull) || errors.Is(err, kverr.ErrSyncFailed)
}

// Stall reports that the generations in flight cannot complete for now:
// the Target's store is waiting for disk space (err, which must not be nil,
// says so). Until the next generation is released (or Unstall), Flush
// returns err at once and so does a write waiting on backpressure; the
// generations stay in flight and complete, in order, once the store can
// write again. A Stall while stalled keeps the first error.
func (f *Flusher) Stall(err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stallErr == nil {
		f.stallErr = err
		f.st.diskFull++
		close(f.stallCh)
	}
}

// Unstall ends a stall before the next release: the Target's store could
// write again. It does nothing when the flusher is not stalled.
func (f *Flusher) Unstall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unstallLocked()
}

func (f *Flusher) unstallLocked() {
	if f.stallErr != nil {
		f.stallErr = nil
		f.stallCh = make(chan struct{})
	}
}

// stalled returns the error of Stall while the flusher is stalled, else nil.
func (f *Flusher) stalled() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stallErr
}

// atomicMax raises a to v.
func atomicMax(a *atomic.Uint64, v uint64) {
	for spins := 0; ; spins++ {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
		if invariants.Enabled {
			invariants.Check(spins < 1<<20, "flush: atomic max spun %d times", spins)
		}
	}
}

// BeginOp begins op explicitly: it stays open, and every write of it is
// admitted, until EndOp(op) or a batch of op ends it, however many later
// ops begin and end meanwhile, so no generation claims it or any later op
// before then. Ops must be begun in increasing order (call it under the
// lock that numbers the host's log); writes of an op above every op begun
// begin it implicitly (see the package documentation).
//
// An op at or below the persisted watermark is a redelivered op: nil,
// nothing changes (counted in Stats.Redelivered). Op 0 is untracked: nil.
// It returns ctx.Err() if ctx is already done, ErrBadOp if op is at or
// below an op already begun (and above the watermark) or above MaxOp, and
// ErrClosed once Close has begun.
func (f *Flusher) BeginOp(ctx context.Context, op uint64) error {
	return f.opCall(ctx, "BeginOp", op, f.ops.begin)
}

// EndOp ends op: it has no further writes, so the next freeze may claim it
// once every earlier op has ended too. Ending an op that is complete
// already (ended, or below an op begun later without being open) is a
// no-op, as is op 0. An op at or below the persisted watermark is a
// redelivered op: nil, counted in Stats.Redelivered. It returns ctx.Err()
// if ctx is already done, ErrBadOp if op is above every op begun (written,
// batched or begun) or above MaxOp, with nothing changed, and ErrClosed
// once Close has begun. An op with no writes is begun and ended at once by
// an empty batch (BeginWrite with closesOp).
func (f *Flusher) EndOp(ctx context.Context, op uint64) error {
	return f.opCall(ctx, "EndOp", op, f.ops.end)
}

// opCall runs BeginOp's or EndOp's tracker call fn under the gate and the
// shared barrier, after the checks they share.
func (f *Flusher) opCall(ctx context.Context, what string, op uint64, fn func(uint64) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkOpRange(what, op); err != nil {
		return err
	}
	tok, err := f.gate.Enter()
	if err != nil {
		return err
	}
	defer f.gate.Leave(tok)
	if op == 0 {
		return nil
	}
	if op <= f.persisted.Load() {
		f.redelivered.Add(1)
		return nil
	}
	w := f.barrier.RLockAt(stripe.Hint(32) & f.mask)
	defer w.RUnlock()
	return fn(op)
}

// LogDurable reports that the host's log is durable up to and including
// op. With Options.LogBeforeData, no generation claims a watermark above
// the highest op reported (the log must be durable before the data it
// would no longer replay); without it, it has no effect. It never blocks:
// the next flush (interval, FlushBytes, an explicit Flush) may persist the
// higher watermark it allows. Lower values than one reported before are
// ignored.
func (f *Flusher) LogDurable(op uint64) { atomicMax(&f.logCap, op) }

// HighestOp returns the highest op seen (Stats.HighestOp).
func (f *Flusher) HighestOp() uint64 { return max(f.ops.highest(), f.highestAtOpen) }

// CompletedOp returns the highest op n such that every op <= n has ended
// (at least the watermark): what the next freeze may claim, before the
// Options.LogBeforeData cap. It is exact inside Exclusive (snapshots use
// it there); elsewhere ops may begin and end while it reads.
func (f *Flusher) CompletedOp() uint64 { return max(f.ops.completed(), f.claimed.Load()) }

// Enter admits an operation that must finish before Close proceeds (for
// example creating a keyspace): it enters the gate only. It returns
// ErrClosed once Close has begun, and never blocks.
func (f *Flusher) Enter() (Ticket, error) {
	tok, err := f.gate.Enter()
	if err != nil {
		return Ticket{}, err
	}
	return newTicket(f, tok, nil), nil
}

// enter enters the gate for a call that watches ctx only until then:
// ctx.Err() if ctx is already done, ErrClosed once Close has begun.
func (f *Flusher) enter(ctx context.Context) (gateToken, error) {
	if err := ctx.Err(); err != nil {
		return gateToken{}, err
	}
	return f.gate.Enter()
}

// Exclusive runs fn inside the gate with the write barrier held exclusively:
// no write is in flight and no freeze runs while fn does (snapshots use it;
// publication order 14 in internal/buffer/protocol.go).
// It returns ErrClosed once Close has begun and ctx.Err() if ctx is already
// done; taking the barrier waits for the writes in flight without watching
// ctx. A panic in fn releases the barrier and the gate and propagates.
func (f *Flusher) Exclusive(ctx context.Context, fn func()) error {
	tok, err := f.enter(ctx)
	if err != nil {
		return err
	}
	defer f.gate.Leave(tok)
	f.barrier.Lock()
	defer f.barrier.Unlock()
	fn()
	return nil
}

// Drain follows, without blocking writers, the writes (and BeginOp and
// EndOp calls) that hold the shared side of the write barrier when it
// begins (BeginDrain) until each has left it: Poll tries each stripe of the
// barrier not yet seen free, and a stripe seen free at an instant after
// BeginDrain holds no write that held it at BeginDrain. So once Poll
// returns true, every write admitted before BeginDrain has ended, and
// everything it did before Ticket.End is visible to the caller. For its
// first DrainPatience polls no writer waits for more than the instant of a
// stripe's TryLock; after them a Poll takes each stripe still held once,
// as a freeze takes them all (stripe.RWBarrier.WaitFree: the writes in
// flight on it end, new ones wait for that instant), because writes that
// overlap without a gap keep a stripe held at every TryLock: 8 writers
// hammering one barrier on a loaded 2-core machine kept TestDrain's drain
// from ending for 10 minutes. The change feed cuts its record so (kvbuf's
// watch.go: an op counted in CompletedOp before BeginDrain has every write
// of it ended once the drain is done). A Drain is not safe for concurrent
// use, and its caller must not hold a write.
type Drain struct {
	b     *stripe.RWBarrier
	left  []int // stripes not yet seen free
	polls int   // Polls since BeginDrain
}

// DrainPatience is the number of polls of a Drain that only try its
// stripes (they never make a writer wait); the next poll waits for each
// stripe still held.
const DrainPatience = 64

// BeginDrain starts d on the writes in flight now.
func (f *Flusher) BeginDrain(d *Drain) {
	d.b = f.barrier
	d.polls = 0
	d.left = d.left[:0]
	for i := range f.barrier.Stripes() {
		d.left = append(d.left, i)
	}
}

// Poll tries each stripe not yet seen free once and reports whether every
// stripe has been (every write in flight at BeginDrain has ended). It
// never waits during the first DrainPatience polls since BeginDrain; the
// next one waits for the writes in flight on each stripe still held, and
// returns true.
func (d *Drain) Poll() bool {
	d.polls++
	if d.polls > DrainPatience {
		for _, i := range d.left {
			d.b.WaitFree(i)
		}
		d.left = d.left[:0]
		return true
	}
	k := 0
	for _, i := range d.left {
		if !d.b.Free(i) {
			d.left[k] = i
			k++
		}
	}
	d.left = d.left[:k]
	return k == 0
}

// Flush returns nil once every write that ended before the call is durable
// and a watermark covering every op complete before the call is persisted:
// the caller joins the open generation, and Flush returns nil when that
// generation and every earlier one are released. A caller that arrives
// while a generation is being written or synced joins the next one.
// Concurrent callers share generations (group commit).
//
// If the generation (or an earlier one still in flight) fails, Flush returns
// that failure's error; the flusher retries the unreleased generations at
// once for the next Flush, or after a backoff in the background. If ctx
// ends first Flush returns ctx.Err() at once and the flush goes on; while
// the flusher is stalled (Stall) it returns the stall's error at once, and
// the flush goes on too. After Close has begun it returns ErrClosed.
func (f *Flusher) Flush(ctx context.Context) error {
	tok, err := f.enter(ctx)
	if err != nil {
		return err
	}
	defer f.gate.Leave(tok)
	start := time.Now()
	f.flushes.Add(1)
	if f.idle() {
		f.latency.observe(time.Since(start))
		return nil
	}
	g := f.join()
	err = f.await(ctx, g)
	f.latency.observe(time.Since(start))
	return err
}

// await waits for g's result, ctx's end, or a Stall (see Stall: the caller
// gets the stall's error at once, its generation stays in flight).
func (f *Flusher) await(ctx context.Context, g *group) error {
	for {
		f.mu.Lock()
		sch, serr := f.stallCh, f.stallErr
		f.mu.Unlock()
		if serr != nil && !g.isDone() {
			return serr
		}
		select {
		case <-g.done:
			return g.err
		case <-ctx.Done():
			return ctx.Err()
		case <-sch:
		}
	}
}

// idle reports that a Flush has nothing to wait for: no write since the last
// freeze (dirty is read first: invariant 3), no op to claim, every frozen
// generation released, and nothing pending outside BeginWrite.
func (f *Flusher) idle() bool {
	if f.dirty.Load() {
		return false
	}
	if f.claimable() > f.claimed.Load() {
		return false
	}
	return f.frozen.Load() == f.released.Load() && f.t.PendingBytes() <= 0
}

// claimable is the claim rule: the contiguous prefix of complete ops,
// capped by the host's durable log position under Options.LogBeforeData,
// and never below the current claim.
func (f *Flusher) claimable() uint64 {
	c := f.ops.completed()
	if f.opts.LogBeforeData {
		c = min(c, f.logCap.Load())
	}
	return max(c, f.claimed.Load())
}

// join adds the caller to the open group and wakes the writer.
func (f *Flusher) join() *group {
	f.mu.Lock()
	g := f.open
	if g == nil {
		g = &group{done: make(chan struct{})}
		f.open = g
	} else {
		f.coalesced.Add(1)
	}
	g.n.Add(1)
	f.mu.Unlock()
	f.wakeWriter()
	return g
}

func (f *Flusher) wakeWriter() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

func (f *Flusher) wakeWaiter() {
	select {
	case f.waitKick <- struct{}{}:
	default:
	}
}

// kickAuto asks for a byte-triggered background flush, waking the writer at
// most once per outstanding kick.
func (f *Flusher) kickAuto() {
	if !f.kicked.Load() && f.kicked.CompareAndSwap(false, true) {
		f.wakeWriter()
	}
}

// Watermark returns the persisted watermark: the watermark of the newest
// generation whose wait returned nil (or Options.Watermark). It never
// decreases.
func (f *Flusher) Watermark() uint64 { return f.persisted.Load() }

// WatermarkNotify returns the persisted watermark and a channel that is
// closed once the persisted watermark is above it, or once Close has
// finished (after which every call returns a closed channel). The pair is
// consistent: the channel is the one the next advance closes, so a loop
// that calls WatermarkNotify again after each wake-up misses no advance.
// Nothing is sent on the channel and no goroutine is started.
func (f *Flusher) WatermarkNotify() (uint64, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.persisted.Load(), f.wmChanged
}

// WaitWatermark blocks until the persisted watermark is above after and
// returns it. It returns ErrClosed if Close has finished and the watermark
// is not above after, and ctx.Err() if ctx ends first. It starts no
// goroutine.
func (f *Flusher) WaitWatermark(ctx context.Context, after uint64) (uint64, error) {
	for {
		wm, ch := f.WatermarkNotify()
		if wm > after {
			return wm, nil
		}
		select {
		case <-f.closeDone:
			// Close closes closeDone before wmChanged, so a waiter woken
			// by wmChanged's last close finds closeDone closed here.
			if wm := f.persisted.Load(); wm > after {
				return wm, nil
			}
			return wm, kverr.ErrClosed
		default:
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return f.persisted.Load(), ctx.Err()
		}
	}
}

// InFlight returns the number of generations frozen and not yet released
// (Stats.InFlight), from two atomic loads.
func (f *Flusher) InFlight() int {
	rel := f.released.Load() // before frozen, so the difference is >= 0
	return int(f.frozen.Load() - rel)
}

// Stats returns a snapshot of the counters.
func (f *Flusher) Stats() Stats {
	f.mu.Lock()
	s := Stats{
		Generations: f.st.generations,
		Writes:      f.st.writes,
		Failures:    f.st.failures,
		LastErr:     f.st.lastErr,
		DiskFull:    f.st.diskFull,
		Stalled:     f.stallErr,
		MaxInFlight: f.st.maxInFlight,
	}
	f.mu.Unlock()
	s.Flushes = f.flushes.Load()
	s.Coalesced = f.coalesced.Load()
	s.Redelivered = f.redelivered.Load()
	s.Stalls = f.stalls.Load()
	s.StallTime = time.Duration(f.stallNs.Load())
	s.InFlight = f.InFlight()
	s.HighestOp = f.HighestOp()
	s.CompletedOp = f.CompletedOp()
	s.OpenOps = f.ops.numOpen()
	s.ClaimedOp = f.claimed.Load()
	s.Watermark = f.persisted.Load()
	s.PendingBytes = f.t.PendingBytes()
	s.Active = f.gate.InFlight()
	s.Latency = f.latency.snapshot()
	return s
}

// Close shuts the gate (later BeginWrite, EndOp, Enter, Exclusive and Flush
// get ErrClosed, and writers waiting on backpressure are woken with
// ErrClosed), waits for every admitted operation to end (Flush calls in
// flight get their generation's result), runs a final flush (retrying
// failed generations at once), stops both goroutines and returns the final
// flush's error. It is idempotent and safe to call concurrently: every call
// waits for the same shutdown and returns the same error. It waits without a
// deadline; use Done or Wait to observe it with one.
func (f *Flusher) Close() error {
	f.mu.Lock()
	if f.closeStarted {
		f.mu.Unlock()
		<-f.closeDone
		return f.closeErr
	}
	f.closeStarted = true
	f.mu.Unlock()

	close(f.closing)
	f.gate.Close()
	// Writes hold the barrier, not the gate (invariant 13): wait for the
	// ones that found the gate open.
	f.barrier.Lock()
	f.barrier.Unlock() // empty: waiting for the writes is the point
	var g *group
	if f.idle() {
		// Nothing to write: no final generation (and no writer hand-off).
	} else {
		f.mu.Lock()
		if g = f.open; g == nil {
			g = &group{done: make(chan struct{})}
			f.open = g
		}
		g.final = true
		f.mu.Unlock()
		f.wakeWriter()
		<-g.done
		f.closeErr = g.err
	}
	f.mu.Lock()
	f.stopping = true
	f.mu.Unlock()
	f.wakeWriter()
	<-f.writerDone
	<-f.waiterDone
	f.tick.Stop()
	f.gwTimer.Stop()
	close(f.closeDone)
	f.mu.Lock()
	close(f.wmChanged) // the waiter has exited: persisted cannot advance again
	f.mu.Unlock()
	return f.closeErr
}

// Done returns a channel closed once Close has finished (final flush done,
// both goroutines stopped).
func (f *Flusher) Done() <-chan struct{} { return f.closeDone }

// Wait blocks until Close has finished, returning its error, or until ctx
// ends, returning ctx.Err(). It does not start Close.
func (f *Flusher) Wait(ctx context.Context) error {
	select {
	case <-f.closeDone:
		return f.closeErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *Flusher) isClosing() bool { return chanClosed(f.closing) }

// chanClosed reports whether ch is closed, without blocking.
func chanClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
