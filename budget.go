package kvbuf

import (
	"context"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// DefaultBudgetHighPercent is the default BudgetOptions.HighPercent: past
// 90% of the budget, flushes are forced (as RocksDB's WriteBufferManager
// flushes past 90% of its buffer size).
const DefaultBudgetHighPercent = 90

// DefaultBudgetMaxFlushes is the default BudgetOptions.MaxFlushes.
const DefaultBudgetMaxFlushes = 4

// budgetRoundMax is the most writes a round lets through (rule B2): past
// it the queue's newer writes wait for the next round. A round's writes
// are admitted before their size is known, so the total may pass the size
// by what they grow their tables by; the cap bounds that by the round,
// not by the number of writers (1,000 writers, one per engine, passed it
// by more than a forced generation: doc/design.md, "Memory budget").
const budgetRoundMax = 64

// budgetRetry is how long a forced flush that failed waits before the
// budget forces another (the failing engine's flusher retries on its own).
const budgetRetry = 10 * time.Millisecond

// BudgetPolicy chooses which engine a MemoryBudget flushes first when its
// total passes the high mark.
type BudgetPolicy int

const (
	// BudgetLargestFirst flushes the engine holding the most pending bytes
	// first: each forced flush frees as much memory as one flush can (what
	// RocksDB's WriteBufferManager does).
	BudgetLargestFirst BudgetPolicy = iota + 1
	// BudgetOldestFirst flushes first the engine whose pending bytes
	// became non-zero, or whose latest forced flush began, the longest
	// ago: no engine's changes stay in memory long while others flush.
	// The default: W11 measured it faster than BudgetLargestFirst
	// (doc/design.md, "Memory budget").
	BudgetOldestFirst
)

// String returns "largest-first" or "oldest-first".
func (p BudgetPolicy) String() string {
	switch p {
	case BudgetLargestFirst:
		return "largest-first"
	case BudgetOldestFirst:
		return "oldest-first"
	}
	return "BudgetPolicy(" + strconv.Itoa(int(p)) + ")"
}

// BudgetOptions configures a MemoryBudget. A nil *BudgetOptions means
// defaults; a zero field means that field's default.
type BudgetOptions struct {
	// HighPercent is the high mark, in percent of the budget: once the
	// engines' pending bytes pass it, the budget forces flushes (Policy
	// chooses the engine) until they are below it again. Default:
	// DefaultBudgetHighPercent (90). At least 1, at most 100, else
	// ErrBadOptions.
	HighPercent int

	// Policy chooses the engine a forced flush flushes. Default:
	// BudgetOldestFirst (chosen by measurement: doc/design.md, "Memory
	// budget"). Other values are ErrBadOptions.
	Policy BudgetPolicy

	// MaxFlushes bounds the forced flushes in progress at once (each on
	// its own engine). Default: DefaultBudgetMaxFlushes. Negative values
	// are ErrBadOptions.
	MaxFlushes int
}

// MemoryBudget bounds the pending memory of any number of engines in one
// process (Options.MemoryBudget): the sum of their pending bytes
// (Metrics.PendingBytes) stays under its size, give or take one round of
// writes (below), where each engine's own Options.MaxPendingBytes bounds
// only that engine. Metrics.BudgetBytes is an engine's share.
//
// Past the high mark (BudgetOptions.HighPercent of the size) the budget
// flushes engines in the background, one engine per flush, the one
// BudgetOptions.Policy chooses first, up to BudgetOptions.MaxFlushes at a
// time, until the total is below the mark. Past half the high mark,
// writes of every engine queue together and go in rounds, one write per
// waiting writer, oldest first, at most 64 a round (a writer let through
// queues again behind the others), so no engine's writes starve while
// others write; a round starts only with
// the total within the size, so at the size writes wait, with their
// context, until flushes make room. The writes of one round may overshoot
// the size by what they grow their engines' tables by (arena chunks and
// slot arrays), as under MaxPendingBytes.
//
// A write waiting for the budget returns ctx.Err() if its context ends
// first and ErrClosed if its engine is closed meanwhile. Close of an engine
// releases its share. A MemoryBudget is safe for concurrent use; Close it
// once every engine using it is closed.
//
// # Caveats
//
//   - An engine whose flushes keep failing (a full disk, ErrSyncFailed)
//     keeps its share: once the total reaches the size, the writes of
//     every engine wait until their contexts end, not only that engine's,
//     and they get ctx.Err(), not the failing engine's error. Watch
//     Metrics.Failures and Metrics.DiskFull of each engine.
//   - A round waits for its slowest write.
//   - Rounds are fair among the writers that run: a writer the Go
//     scheduler or the operating system does not run (more goroutines or
//     processors than the machine gives the process) cannot queue, and
//     meanwhile the writers that do run go in rounds without it. With 64
//     writers at GOMAXPROCS 16 on 2 cores beside CPU-bound work, 5 runs in
//     300 of TestMemoryBudgetFairness (it runs at GOMAXPROCS 1 since) had
//     an engine whose writes queued more than twice or less than half as
//     often as the mean, up to 29x (1,147 against 40; doc/design.md,
//     "Memory budget").
type MemoryBudget struct {
	size, high int64
	fair       int64 // past it, writes go in rounds (B1): high/2
	policy     BudgetPolicy
	maxFlushes int

	total     atomic.Int64 // the sum of the shares' bytes
	maxTotal  atomic.Int64
	maxForced atomic.Int64  // the largest share a forced flush started with
	forcedSum atomic.Int64  // the shares forced flushes started with, summed
	waiting   atomic.Int64  // writes queued (len(queue) without mu)
	round     atomic.Int64  // writes of the current round not yet done
	roundSeq  atomic.Uint64 // rounds started; the current round's number

	forced, forcedErrs atomic.Int64
	waits, waitNs      atomic.Int64

	mu       sync.Mutex // guards the fields below
	closed   bool
	shares   []*budgetShare
	queue    []chan struct{} // waiting writes, oldest first
	flushing int             // forced flushes in progress
}

// NewMemoryBudget returns a budget of size bytes for the engines opened
// with it. A nil opts means defaults. A size of 0 or less, or an option
// out of range, is ErrBadOptions.
func NewMemoryBudget(size int64, opts *BudgetOptions) (*MemoryBudget, error) {
	var o BudgetOptions
	if opts != nil {
		o = *opts
	}
	if size <= 0 {
		return nil, kverr.Errorf("memory budget of %d bytes (want > 0): %w", size, ErrBadOptions)
	}
	if o.HighPercent == 0 {
		o.HighPercent = DefaultBudgetHighPercent
	}
	if o.HighPercent < 1 || o.HighPercent > 100 {
		return nil, kverr.Errorf("memory budget HighPercent %d (1 to 100): %w", o.HighPercent, ErrBadOptions)
	}
	if o.Policy == 0 {
		o.Policy = BudgetOldestFirst
	}
	if o.Policy != BudgetLargestFirst && o.Policy != BudgetOldestFirst {
		return nil, kverr.Errorf("memory budget policy %d: %w", int(o.Policy), ErrBadOptions)
	}
	if o.MaxFlushes == 0 {
		o.MaxFlushes = DefaultBudgetMaxFlushes
	}
	if o.MaxFlushes < 0 {
		return nil, kverr.Errorf("memory budget MaxFlushes %d: %w", o.MaxFlushes, ErrBadOptions)
	}
	high := int64(float64(size) * float64(o.HighPercent) / 100)
	high = max(high, 1)
	return &MemoryBudget{size: size, high: high, fair: high / 2, policy: o.Policy, maxFlushes: o.MaxFlushes}, nil
}

// Size returns the budget's size in bytes.
func (b *MemoryBudget) Size() int64 { return b.size }

// Close refuses new engines (Open with the budget then fails with
// ErrBudgetClosed). It fails with ErrBudgetInUse, closing nothing, while
// an engine opened with the budget is still open. It is idempotent.
func (b *MemoryBudget) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := len(b.shares); n > 0 {
		return kverr.Errorf("close memory budget: %d engines open: %w", n, ErrBudgetInUse)
	}
	b.closed = true
	return nil
}

// BudgetMetrics is a snapshot of a MemoryBudget's metrics.
type BudgetMetrics struct {
	// Size is the budget's size and HighMark the total past which it
	// forces flushes, in bytes.
	Size, HighMark int64
	// Bytes is the total of the engines' shares now (their pending bytes
	// as of their latest write or flush); MaxBytes its highest value so
	// far.
	Bytes, MaxBytes int64
	// ForcedBytes is the sum of the shares the engines held when the
	// budget chose them for forced flushes (ForcedBytes / ForcedFlushes is
	// the mean generation the budget forced) and MaxForcedBytes the
	// largest of them. W11 (doc/workloads.md) states how far MaxBytes
	// passes Size in mean forced generations.
	ForcedBytes, MaxForcedBytes int64
	// Engines is the number of engines open with the budget.
	Engines int
	// ForcedFlushes counts the flushes the budget forced and
	// ForcedFlushErrors those that failed (the engine keeps its changes
	// and retries on its own).
	ForcedFlushes, ForcedFlushErrors int64
	// FlushesInProgress is the number of forced flushes running now.
	FlushesInProgress int
	// Waits counts writes that queued for a round (as
	// Metrics.BudgetWaits does per engine), WaitTime their total wait,
	// Waiting those queued now.
	Waits    int64
	WaitTime time.Duration
	Waiting  int64
}

// Metrics returns a snapshot of the budget's metrics.
func (b *MemoryBudget) Metrics() BudgetMetrics {
	b.mu.Lock()
	engines, flushing := len(b.shares), b.flushing
	b.mu.Unlock()
	return BudgetMetrics{
		Size: b.size, HighMark: b.high,
		Bytes: b.total.Load(), MaxBytes: b.maxTotal.Load(), ForcedBytes: b.forcedSum.Load(), MaxForcedBytes: b.maxForced.Load(),
		Engines:       engines,
		ForcedFlushes: b.forced.Load(), ForcedFlushErrors: b.forcedErrs.Load(),
		FlushesInProgress: flushing,
		Waits:             b.waits.Load(), WaitTime: time.Duration(b.waitNs.Load()), Waiting: b.waiting.Load(),
	}
}

// detachedShare marks a share's bytes once its engine has left the budget:
// a sync racing the detach then changes nothing.
const detachedShare = math.MinInt64

// budgetShare is one engine's part of a budget. Its bytes are the
// engine's pending bytes as of its latest write or release (sync); the
// budget's total is the sum of its shares' bytes.
type budgetShare struct {
	b  *MemoryBudget
	db *DB

	bytes atomic.Int64 // detachedShare once detached
	since atomic.Int64 // unix nanos when bytes last became > 0; 0 with none

	forced, waits, waitNs atomic.Int64
	// lastRound is the number of the round that last let one of the
	// engine's writes through; repeats counts the writes let through by
	// a round that had let one through already. With one writer per
	// engine it stays 0 (B2: a round lets each waiting writer through
	// once; TestMemoryBudgetFairness).
	lastRound atomic.Uint64
	repeats   atomic.Int64

	done   chan struct{} // closed at detach: waits end with ErrClosed
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the share's forced flush

	flushing bool // b.mu held
	failedAt time.Time
}

// attach adds db to the budget.
func (b *MemoryBudget) attach(dir string, db *DB) (*budgetShare, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, kverr.Errorf("open %s: %w", dir, ErrBudgetClosed)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &budgetShare{b: b, db: db, done: make(chan struct{}), ctx: ctx, cancel: cancel}
	b.shares = append(b.shares, s)
	return s, nil
}

// detach removes the share from its budget, waits for its forced flush
// and releases its bytes. Called once, when no write of the engine can
// begin any more.
func (s *budgetShare) detach() {
	b := s.b
	b.mu.Lock()
	if i := slices.Index(b.shares, s); i >= 0 {
		b.shares = slices.Delete(b.shares, i, i+1)
	}
	close(s.done)
	s.cancel()
	b.mu.Unlock()
	s.wg.Wait()
	if old := s.bytes.Swap(detachedShare); old != detachedShare {
		b.released(b.total.Add(-old))
	}
}

// sync sets the share's bytes to the engine's pending bytes. The
// compare-and-swap orders concurrent syncs: the bytes a sync stores were
// read after every store before it.
func (s *budgetShare) sync() {
	for {
		old := s.bytes.Load()
		if old == detachedShare {
			return
		}
		p := s.db.acct.Bytes()
		if !s.bytes.CompareAndSwap(old, p) {
			continue
		}
		if p == old {
			return
		}
		switch {
		case p <= 0:
			s.since.Store(0)
		case old <= 0:
			s.since.Store(time.Now().UnixNano())
		}
		t := s.b.total.Add(p - old)
		if p > old {
			atomicMaxInt(&s.b.maxTotal, t)
		} else {
			s.b.released(t)
		}
		return
	}
}

// restart moves the share's since to start (unix nanos) if it is older:
// a flush that began at start and succeeded made every change before it
// durable, so what the engine holds now is newer. Without it, an engine
// written throughout, whose pending bytes never return to 0, would keep
// its first write's time and oldest-first would force flushes of it again
// and again, of the few bytes written since its last one (W11 at --quick
// measured forced generations of 1 KiB among engines holding 480 KiB;
// doc/design.md, "Memory budget").
func (s *budgetShare) restart(start int64) {
	for {
		cur := s.since.Load()
		if cur == 0 || cur >= start || s.since.CompareAndSwap(cur, start) {
			return
		}
	}
}

// released starts the next round of waiting writes if total is within
// the budget.
func (b *MemoryBudget) released(total int64) {
	if total <= b.size && b.waiting.Load() > 0 && b.round.Load() == 0 {
		b.mu.Lock()
		b.startRoundLocked(0)
		b.mu.Unlock()
	}
}

// startRoundLocked starts a round, if none is in progress and the total
// is within the budget: it lets the queued writes through, oldest first,
// at most budgetRoundMax, plus self more (a write starting the round) if
// they leave room for it. It reports whether self's write is let
// through. b.mu held.
func (b *MemoryBudget) startRoundLocked(self int64) bool {
	if b.round.Load() != 0 || b.total.Load() > b.size {
		return false
	}
	q := min(len(b.queue), budgetRoundMax)
	if q == budgetRoundMax {
		self = 0 // the queue fills the round: self queues behind it
	}
	n := int64(q) + self
	if n == 0 {
		return false
	}
	b.round.Store(n)
	b.roundSeq.Add(1)
	for _, ch := range b.queue[:q] {
		close(ch)
	}
	b.waiting.Add(-int64(q))
	rest := copy(b.queue, b.queue[q:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return self > 0
}

// admit is called before a write of s's engine begins (doc/design.md,
// "Memory budget", rules B1-B3). Below half the high mark with nobody
// waiting, the write goes at once (granted false: B1). Otherwise it
// forces flushes and waits for a round (granted true: the caller must call
// done once its write ended, applied or not). On error granted is false
// and the write is not let through.
//
// Rounds (B2) make the budget fair: past half the high mark every write
// queues, and a round lets the queue through, one write per waiting
// writer, oldest first and at most budgetRoundMax, once the previous
// round's writes have all ended and the total is within the size. A writer that was let through queues again behind the
// others, so however the scheduler favours one goroutine, no engine's
// writer makes a second write while another's waits (the budget's pending bytes grow in
// table-sized steps, so a write often adds nothing to the total, and
// without rounds the writer running first would write on alone).
func (b *MemoryBudget) admit(ctx context.Context, s *budgetShare) (granted bool, err error) {
	t := b.total.Load()
	if t <= b.fair && b.waiting.Load() == 0 && b.round.Load() == 0 {
		return false, nil
	}
	if t > b.high {
		b.force()
	}
	if err := b.wait(ctx, s); err != nil {
		return false, err
	}
	// The round that let this write through is the current one: it
	// cannot end before this write's done.
	if r := b.roundSeq.Load(); s.lastRound.Swap(r) == r {
		s.repeats.Add(1)
	}
	return true, nil
}

// done ends a write let through by a round; the last one starts the next
// round if writes wait and the total allows, and forces flushes if the
// round's writes took the total past the high mark (the writes waiting
// may have queued below it, forcing none, and if no forced flush is in
// progress nothing else would).
func (b *MemoryBudget) done() {
	if b.round.Add(-1) == 0 && b.waiting.Load() > 0 {
		if b.total.Load() > b.high {
			b.force()
		}
		b.mu.Lock()
		b.startRoundLocked(0)
		b.mu.Unlock()
	}
}

// wait queues the write until a round lets it through; on error the write
// is not let through (done must not be called). B3: the waiting count is
// raised before the total and the round are read again, and a release or
// done lowers them before it reads the count: one of the two sees the
// other, so a write never sleeps through the event that would let it go.
// B4: a write that queues with no round running forces flushes itself.
func (b *MemoryBudget) wait(ctx context.Context, s *budgetShare) error {
	if b.waiting.Load() == 0 && b.round.Load() == 0 {
		// This write would make a round alone: the writers the scheduler
		// has not run since the last round (more goroutines than
		// processors) get the processor first, to queue for it.
		runtime.Gosched()
	}
	b.mu.Lock()
	b.waiting.Add(1)
	if b.startRoundLocked(1) {
		// No round in progress and room: this write starts one.
		b.waiting.Add(-1)
		b.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	b.queue = append(b.queue, ch)
	// B4: no round runs and the total is past the size (hence the high
	// mark), so only a flush lets this write go; force one. The admit's
	// read of the total may predate the write that took it over, and the
	// last write of that write's round may have read the waiting count
	// before this write raised it (B3): then neither forced one, and no
	// forced flush would end to force the next.
	over := b.round.Load() == 0 && b.total.Load() > b.high
	b.mu.Unlock()
	if over {
		b.force()
	}
	b.waits.Add(1)
	s.waits.Add(1)
	start := time.Now()
	defer func() {
		d := int64(time.Since(start))
		b.waitNs.Add(d)
		s.waitNs.Add(d)
	}()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return b.dequeue(ch, ctx.Err())
	case <-s.done:
		return b.dequeue(ch, ErrClosed)
	}
}

// dequeue removes a write that gave up waiting and returns err; if a round
// let it through meanwhile, it ends its part of the round instead.
func (b *MemoryBudget) dequeue(ch chan struct{}, err error) error {
	b.mu.Lock()
	i := slices.Index(b.queue, ch)
	if i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
		b.waiting.Add(-1)
	}
	b.mu.Unlock()
	if i < 0 {
		b.done()
	}
	return err
}

// force starts forced flushes while the total is over the high mark, up to
// MaxFlushes at a time, each on the engine Policy chooses among those not
// flushing already.
func (b *MemoryBudget) force() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.flushing < b.maxFlushes && b.total.Load() > b.high {
		s := b.pickLocked()
		if s == nil {
			return
		}
		s.flushing = true
		b.flushing++
		n := s.bytes.Load()
		b.forcedSum.Add(n)
		atomicMaxInt(&b.maxForced, n)
		b.forced.Add(1)
		s.forced.Add(1)
		s.wg.Add(1)
		go s.forcedFlush()
	}
}

// pickLocked returns the share Policy flushes next, or nil. b.mu held.
func (b *MemoryBudget) pickLocked() *budgetShare {
	var best *budgetShare
	var bestKey int64
	now := time.Now()
	for _, s := range b.shares {
		n := s.bytes.Load()
		if s.flushing || n <= 0 || now.Sub(s.failedAt) < budgetRetry {
			continue
		}
		key := n
		if b.policy == BudgetOldestFirst {
			key = -s.since.Load() // older: larger key
		}
		if best == nil || key > bestKey {
			best, bestKey = s, key
		}
	}
	return best
}

// forcedFlush flushes the share's engine, then lets the budget force the
// next flush if the total is still over the high mark.
func (s *budgetShare) forcedFlush() {
	defer s.wg.Done()
	start := time.Now().UnixNano()
	err := s.db.flusher.Flush(s.ctx)
	s.sync()
	if err == nil {
		s.restart(start)
	}
	b := s.b
	b.mu.Lock()
	s.flushing = false
	b.flushing--
	if err != nil {
		b.forcedErrs.Add(1)
		s.failedAt = time.Now()
	}
	b.mu.Unlock()
	if err != nil {
		// Another engine may flush meanwhile; this one is tried again
		// after budgetRetry, by the next write that finds the total over
		// the mark, or at once below if another can go.
		select {
		case <-time.After(budgetRetry):
		case <-s.done:
			return
		}
	}
	select {
	case <-s.done:
		return
	default:
	}
	if b.total.Load() > b.high {
		b.force()
	}
}

// atomicMaxInt raises a to v.
func atomicMaxInt(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
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
