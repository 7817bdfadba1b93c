package flush

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvbuf/kvbuf/internal/stripe"
)

// Flusher makes a fixed list of targets durable: in the background (on an
// interval and when pending bytes grow), and on demand through Flush, where
// concurrent callers share one physical flush per generation. It also owns
// the engine's drain gate (BeginRead, BeginWrite, Flush all enter it) and
// the write barrier that lets a flush freeze every target at one instant.
type Flusher struct {
	targets []Target
	names   []string
	opts    Options

	gate    Gate
	barrier *stripe.RWBarrier

	persisted atomic.Uint64
	kicked    atomic.Bool   // a byte-triggered kick is outstanding
	backoff   time.Duration // current retry delay, 0 while healthy; loop goroutine only

	kick     chan struct{} // buffered(1): wake the loop
	stop     chan struct{} // closed by Close after the final flush
	loopDone chan struct{} // closed when the loop goroutine returns
	closing  chan struct{} // closed when Close begins

	mu        sync.Mutex
	next      *generation   // the generation new Flush callers join
	flushed   chan struct{} // closed and replaced after every flush attempt
	stats     Stats
	closeOnce bool
	closeDone chan struct{}
	closeErr  error
}

// generation is one physical flush shared by every caller that joined it
// before it started.
type generation struct {
	done chan struct{}
	err  error // written before done is closed
}

// Stats is a snapshot of a Flusher's counters.
type Stats struct {
	// Flushes counts Flush calls that were admitted (not ErrClosed).
	Flushes int64
	// Coalesced counts Flush calls that joined a generation another caller
	// had already opened, i.e. did not cause a physical flush of their own.
	Coalesced int64
	// PhysicalFlushes counts flush attempts that froze and applied targets
	// (including failed ones; flushes skipped because nothing was pending
	// are not counted).
	PhysicalFlushes int64
	// Failures counts physical flushes that returned an error.
	Failures int64
	// LastErr is the error of the most recent failed flush, or nil if none
	// has failed yet.
	LastErr error
	// Syncs counts Target.Apply calls (each makes one durable sync).
	Syncs int64
	// PendingBytes is the current sum of Target.PendingBytes.
	PendingBytes int64
	// Watermark is the persisted watermark (see Flusher.Watermark).
	Watermark uint64
	// InFlight is the number of operations inside the gate.
	InFlight int64
}

// New returns a Flusher for targets, applied in the given order on every
// flush: put the receipt target (the one whose watermark the host reads
// after a crash) last. Nil entries are ignored. It starts one background
// goroutine, stopped by Close.
func New(targets []Target, opts *Options) *Flusher {
	f := &Flusher{
		opts:      opts.withDefaults(),
		barrier:   stripe.NewRWBarrier(stripe.Count()),
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		loopDone:  make(chan struct{}),
		closing:   make(chan struct{}),
		flushed:   make(chan struct{}),
		closeDone: make(chan struct{}),
	}
	f.gate.Stripe() // every read and write enters it
	for _, t := range targets {
		if t != nil {
			f.targets = append(f.targets, t)
			f.names = append(f.names, targetName(t))
		}
	}
	f.persisted.Store(f.opts.Watermark)
	go f.loop()
	return f
}

// Op is one admitted read or write; call End exactly once when it is over.
// The zero Op's End does nothing.
type Op struct {
	f   *Flusher
	tok Token
	w   *sync.RWMutex // shared side of the write barrier; nil for reads
}

// End leaves the write barrier (for writes) and the gate.
func (op Op) End() {
	if op.w != nil {
		op.w.RUnlock()
	}
	if op.f != nil {
		op.f.gate.Leave(op.tok)
	}
}

// BeginRead admits a read. It returns ErrClosed once Close has begun, and
// never blocks.
func (f *Flusher) BeginRead() (Op, error) {
	tok, err := f.gate.Enter()
	if err != nil {
		return Op{}, err
	}
	return Op{f: f, tok: tok}, nil
}

// BeginWrite admits a write: it enters the gate and the shared side of the
// write barrier, so a flush cannot freeze targets while the write is half
// done. Writes that complete (End) before a Flush call starts are covered
// by that Flush.
//
// Backpressure: if the targets hold more than Options.MaxPendingBytes it
// kicks a flush and waits until pending bytes drop under the bound; it
// returns ctx.Err() if ctx ends first and ErrClosed if Close begins.
//
// Do not call Flush or Close between BeginWrite and End: the flush needs the
// barrier the caller holds.
func (f *Flusher) BeginWrite(ctx context.Context) (Op, error) {
	tok, err := f.gate.Enter()
	if err != nil {
		return Op{}, err
	}
	if f.opts.MaxPendingBytes > 0 {
		if p := f.pendingBytes(); p > f.opts.FlushBytes {
			f.kickAuto()
			if p > f.opts.MaxPendingBytes {
				if err := f.backpressure(ctx); err != nil {
					f.gate.Leave(tok)
					return Op{}, err
				}
			}
		}
	}
	return Op{f: f, tok: tok, w: f.barrier.RLock()}, nil
}

// backpressure waits until pending bytes are within the bound. The flush
// channel is read before pending bytes are, so a flush that ends between
// the two cannot be missed.
func (f *Flusher) backpressure(ctx context.Context) error {
	for {
		f.mu.Lock()
		ch := f.flushed
		f.mu.Unlock()
		if f.pendingBytes() <= f.opts.MaxPendingBytes {
			return nil
		}
		f.kickAuto()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-f.closing:
			return ErrClosed
		}
	}
}

// Flush returns once every write that completed before the call is durable
// in every target and the watermark covering it is persisted, or with the
// error of the physical flush that should have covered it. Concurrent
// callers share one physical flush: a caller that arrives while a flush is
// running waits for the next one (the running one may have frozen the
// targets before the caller's writes), shared with everyone else who
// arrived meanwhile.
//
// If ctx ends first Flush returns ctx.Err() at once; the shared flush still
// runs for the other callers. After Close has begun it returns ErrClosed.
func (f *Flusher) Flush(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tok, err := f.gate.Enter()
	if err != nil {
		return err
	}
	defer f.gate.Leave(tok)
	g := f.join(true)
	select {
	case <-g.done:
		return g.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// join returns the open generation (opening one if needed) and wakes the
// loop. The loop detaches the generation under mu before freezing, so every
// joiner's earlier writes are in the frozen sets.
func (f *Flusher) join(count bool) *generation {
	f.mu.Lock()
	g := f.next
	if g == nil {
		g = &generation{done: make(chan struct{})}
		f.next = g
	} else if count {
		f.stats.Coalesced++
	}
	if count {
		f.stats.Flushes++
	}
	f.mu.Unlock()
	f.signal()
	return g
}

func (f *Flusher) signal() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// kickAuto wakes the loop for a byte-triggered flush, at most once per
// flush so that writers do not all hit the channel.
func (f *Flusher) kickAuto() {
	if !f.kicked.Load() && f.kicked.CompareAndSwap(false, true) {
		f.signal()
	}
}

func (f *Flusher) pendingBytes() int64 {
	var n int64
	for _, t := range f.targets {
		n += t.PendingBytes()
	}
	return n
}

// Watermark returns the persisted watermark: the highest op number covered
// by the last successful flush (or Options.Watermark). It never decreases.
func (f *Flusher) Watermark() uint64 { return f.persisted.Load() }

// Stats returns a snapshot of the counters.
func (f *Flusher) Stats() Stats {
	f.mu.Lock()
	s := f.stats
	f.mu.Unlock()
	s.PendingBytes = f.pendingBytes()
	s.Watermark = f.persisted.Load()
	s.InFlight = f.gate.InFlight()
	return s
}

// Close shuts the gate (later BeginRead, BeginWrite and Flush get
// ErrClosed, and writers waiting on backpressure are woken with ErrClosed),
// waits for every in-flight operation to end, runs a final flush, stops the
// background goroutine and returns the final flush's error. It is
// idempotent and safe to call concurrently: every call waits for the same
// shutdown and returns the same error. It waits without a deadline for
// in-flight operations; use Done or Wait to observe it with one.
func (f *Flusher) Close() error {
	f.mu.Lock()
	if f.closeOnce {
		f.mu.Unlock()
		<-f.closeDone
		return f.closeErr
	}
	f.closeOnce = true
	f.mu.Unlock()

	close(f.closing)
	f.gate.Close()
	g := f.join(false)
	<-g.done
	close(f.stop)
	<-f.loopDone
	f.closeErr = g.err
	close(f.closeDone)
	return g.err
}

// Done returns a channel closed once Close has finished (final flush done,
// background goroutine stopped).
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

// loop is the background goroutine. Explicit generations run as soon as
// they are opened; automatic flushes (interval, pending bytes) run only
// when something is pending and, after a failure, not before the backoff
// delay.
//
// Flushes run on this goroutine, so a Flush costs two goroutine hand-offs
// (caller to loop, loop to callers). A panic in a target is recovered in
// run; a runtime.Goexit cannot be stopped, so run completes the generation
// and the deferred function below starts a replacement loop.
func (f *Flusher) loop() {
	normal := false
	defer func() {
		if normal {
			close(f.loopDone)
		} else {
			go f.loop()
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	resetTimer := func() {
		switch {
		case f.backoff > 0:
			timer.Reset(f.backoff)
		case f.opts.Interval > 0:
			timer.Reset(f.opts.Interval)
		default:
			timer.Stop()
		}
	}
	resetTimer()
	for {
		fired := false
		select {
		case <-f.stop:
			normal = true
			return
		case <-f.kick:
		case <-timer.C:
			fired = true
		}
		f.mu.Lock()
		g := f.next
		f.next = nil
		f.mu.Unlock()
		if g == nil {
			if !fired && f.backoff > 0 {
				// A byte-triggered kick during backoff: the retry timer
				// will run that one (run clears kicked).
				continue
			}
			// Clear kicked before looking at pending bytes: a kick taken
			// here must never leave it set without a flush to come, or
			// kickAuto stays silent and writers in backpressure wait
			// forever (TestBackpressureKickNotLost in the root package).
			if !f.kicked.Swap(false) && !fired {
				// A stale wake-up: its generation already ran.
				continue
			}
			if f.pendingBytes() == 0 {
				if fired {
					resetTimer()
				}
				continue
			}
		}
		f.run(g)
		resetTimer()
	}
}

// run performs one physical flush and hands its result to g (if any), to
// the stats, to writers waiting on backpressure and to the backoff state. A
// panic or runtime.Goexit in a target becomes a *PanicError.
func (f *Flusher) run(g *generation) {
	f.kicked.Store(false)
	var st step
	var err error
	normal := false
	defer func() {
		if !normal {
			r := recover()
			err = f.targetErr(st, &PanicError{Value: r, Goexit: r == nil, Stack: debug.Stack()})
		}
		skipped := err == errSkipped
		if skipped {
			err = nil
		} else if err != nil {
			f.backoff = min(max(2*f.backoff, f.opts.RetryMin), f.opts.RetryMax)
		} else {
			f.backoff = 0
		}
		f.mu.Lock()
		if !skipped {
			f.stats.PhysicalFlushes++
			if err != nil {
				f.stats.Failures++
				f.stats.LastErr = err
			}
		}
		ch := f.flushed
		f.flushed = make(chan struct{})
		f.mu.Unlock()
		close(ch)
		if g != nil {
			g.err = err
			close(g.done)
		}
	}()
	err = f.physical(&st)
	normal = true
}

// errSkipped is physical's internal result for a flush with nothing to do.
var errSkipped = errors.New("flush: nothing pending")

// step records which target call is running, to name it in panic errors.
type step struct {
	op string
	i  int
}

func (f *Flusher) targetErr(st step, err error) error {
	if st.op == "" {
		return err
	}
	return fmt.Errorf("flush: target %d (%s) %s: %w", st.i, f.names[st.i], st.op, err)
}

// physical: freeze every target under the exclusive write barrier, compute
// the watermark, apply in order (receipt last), then release. On an error
// nothing is released, so the frozen sets are merged by the next Freeze.
func (f *Flusher) physical(st *step) error {
	maxOp, skip := f.freezeAll(st)
	if skip {
		return errSkipped
	}
	wm := max(f.persisted.Load(), maxOp)
	for i, t := range f.targets {
		*st = step{"apply", i}
		f.mu.Lock()
		f.stats.Syncs++
		f.mu.Unlock()
		if err := t.Apply(context.Background(), wm); err != nil {
			return f.targetErr(*st, err)
		}
	}
	f.persisted.Store(wm) // only this goroutine stores, and wm >= the old value
	for i, t := range f.targets {
		*st = step{"release", i}
		t.Release()
	}
	return nil
}

func (f *Flusher) freezeAll(st *step) (maxOp uint64, skip bool) {
	f.barrier.Lock()
	defer f.barrier.Unlock()
	var pending int64
	for i, t := range f.targets {
		*st = step{"pending-bytes", i}
		pending += t.PendingBytes()
	}
	if pending == 0 {
		*st = step{}
		return 0, true
	}
	for i, t := range f.targets {
		*st = step{"freeze", i}
		maxOp = max(maxOp, t.Freeze())
	}
	*st = step{}
	return maxOp, false
}
