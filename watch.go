package kvbuf

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/flush"
	"github.com/kvbuf/kvbuf/internal/invariants"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// The change feed (doc/design.md, "Change feed"). Writes record their
// changes, tagged with their op, while they hold the write barrier; a
// resolver goroutine cuts the record where every write of the ops at or
// below an op n has recorded its changes (every freeze, an instant where
// no write is in flight; and for visible-mode watches a tick that never
// stops the writers: n = the flusher's CompletedOp, then a drain of the
// writes in flight, then the record count, rule C1 below), so the resolver
// moves those records, sorted by op, into the resolved log and appends a
// resolved mark. A step is durable once the
// generation that holds its changes is released and the persisted
// watermark covers its mark. Watches read the resolved log from their own
// cursor (visible mode up to its end, durable mode up to the durable
// position); nothing a slow watch does holds back a writer or another
// watch.

var (
	// ErrResync is matched by every error that ends a watch because the
	// changes it needs are no longer held (ErrLagged, ErrCompacted): take
	// a Snapshot and watch from its Op()+1. Text: "kvbuf: resync from a
	// snapshot".
	ErrResync = kverr.ErrResync

	// ErrLagged ends a watch (Watch.Next) that fell behind the change
	// feed's bounded buffer (Options.WatchBufferBytes), or, reading changes
	// retained in the store, behind their trimming (WatchRetention): the
	// changes it had not read were dropped. A watch that selects only what
	// the store retains does not lag behind the buffer: it reads the
	// changes the buffer dropped from the store. It matches ErrResync.
	// Text: "kvbuf: watch fell behind the change buffer".
	ErrLagged = kverr.ErrLagged

	// ErrCompacted is returned by DB.Watch for a start op below the oldest
	// op whose changes the feed still holds (or has held since it began
	// recording). It matches ErrResync. Text: "kvbuf: watch start below the
	// changes held".
	ErrCompacted = kverr.ErrCompacted
)

// DefaultWatchBufferBytes is the default Options.WatchBufferBytes: 32 MiB.
const DefaultWatchBufferBytes = 32 << 20

// DefaultWatchBuffer is the default WatchOptions.Buffer: 1024 events.
const DefaultWatchBuffer = 1024

// watchTick is how often the resolver cuts the record for visible-mode
// watches: their delivery latency. Each idle tick costs one load; a tick
// with new changes or ops reads CompletedOp and drains the writes in
// flight (flush.Drain: a TryLock of each stripe of the write barrier,
// never a wait), retried at the next tick if a stripe stayed held; after
// flush.DrainPatience polls (16 ticks of drainTries) it waits for the
// writes in flight on a stripe that writes kept held without a gap, so
// that sustained writes cannot hold visible-mode delivery off forever.
const watchTick = 2 * time.Millisecond

// drainTries is how many times a tick polls a drain (yielding between
// polls) before it leaves the rest to the next tick.
const drainTries = 4

// WatchEventKind says what a WatchEvent is.
type WatchEventKind uint8

// The kinds of WatchEvent.
const (
	// EventPut: Key in Keyspace was set to Value.
	EventPut WatchEventKind = iota + 1
	// EventDelete: Key in Keyspace was deleted.
	EventDelete
	// EventDeleteRange: every key k of Keyspace with Key <= k < End was
	// deleted (nil Key or End: open on that side), clipped to the watch's
	// prefix.
	EventDeleteRange
	// EventDropKeyspace: Keyspace was dropped (DB.DropKV) and everything
	// in it deleted; a later DB.KV of the name creates it again, and the
	// watch goes on reporting it. Every DropKV that is not a redelivery
	// is reported, even of a keyspace that did not exist (a host's replay
	// of an op whose drop was already durable).
	EventDropKeyspace
	// EventSetBits: bits [Lo, Hi) of Bitslice were set to Bit.
	EventSetBits
	// EventResolved: a resolved mark. Every change of every op from the
	// watch's start up to Op has been delivered (and, in durable mode, is
	// durable, under Watermark).
	EventResolved
)

// String returns the kind's name as kvtool watch prints it.
func (k WatchEventKind) String() string {
	switch k {
	case EventPut:
		return "put"
	case EventDelete:
		return "delete"
	case EventDeleteRange:
		return "delete-range"
	case EventDropKeyspace:
		return "drop-keyspace"
	case EventSetBits:
		return "set-bits"
	case EventResolved:
		return "resolved"
	}
	return "unknown"
}

// WatchEvent is one change, or a resolved mark, delivered by Watch.Next.
// Its byte slices are shared with other watches and must not be modified;
// they stay valid after later calls.
type WatchEvent struct {
	Kind WatchEventKind
	// Op is the change's op (0 for a write of op 0), or for EventResolved
	// the resolved op.
	Op uint64
	// Keyspace names the keyspace of a KV change.
	Keyspace string
	// Key is the key of EventPut and EventDelete, the lower bound of
	// EventDeleteRange (nil: open).
	Key []byte
	// Value is EventPut's value.
	Value []byte
	// End is EventDeleteRange's upper bound (nil: open).
	End []byte
	// Bitslice names the bitslice of EventSetBits.
	Bitslice string
	// Lo and Hi bound EventSetBits' bits [Lo, Hi), set to Bit.
	Lo, Hi uint64
	// Bit is the value EventSetBits set.
	Bit bool
	// Watermark is, for EventResolved in durable mode, the persisted
	// watermark that covers Op; 0 otherwise.
	Watermark uint64
}

// WatchKeyspace selects a keyspace's changes: the keys with Prefix (nil or
// empty: every key).
type WatchKeyspace struct {
	Name   string
	Prefix []byte
}

// WatchOptions configures DB.Watch. The zero value (or nil) watches every
// keyspace and bitslice from now on, in visible mode.
type WatchOptions struct {
	// Keyspaces and Bitslices select what the watch reports; both empty
	// means everything, including keyspaces and bitslices created later.
	// Each named keyspace and bitslice must exist when Watch is called.
	// A keyspace may be listed several times, with different prefixes.
	Keyspaces []WatchKeyspace
	Bitslices []string
	// From is the first op to deliver: 0 means now (the op after the last
	// op complete when Watch is called, or the first op the feed holds
	// whole if it is later). A subscriber resuming after its last
	// resolved mark N passes N+1; after a Snapshot s, s.Op()+1.
	From uint64
	// Durable delivers changes only once they are durable, each step
	// closed by a resolved mark that carries the watermark covering it.
	// Otherwise changes are delivered once visible to reads (within a few
	// milliseconds of their op's end).
	Durable bool
	// Buffer is how many events Next reads from the feed at once (it then
	// returns them one by one without locking). Default DefaultWatchBuffer;
	// negative is ErrBadOptions.
	Buffer int
}

// Watch is an open subscription to the engine's changes (DB.Watch). Its
// methods are not safe for concurrent use, except Close.
type Watch struct {
	db      *DB
	f       *feed
	ctx     context.Context
	stopCtx func() bool
	from    uint64
	durable bool
	all     bool
	kvs     map[string][][]byte // name -> prefixes (nil entry: every key)
	bits    map[string]bool
	batch   int

	start    uint64 // the first op delivered (From)
	pos      uint64 // next log position to read
	stored   bool   // reading retained changes from the store (watch_retain.go)
	rop      uint64 // with stored: the op and index of the next entry to read
	ridx     uint32
	mop      uint64 // reading the log: the op and index (among its op's
	midx     uint32 // changes) of the next change not processed
	buf      []WatchEvent
	runs     []watchRun // batch records' changes Next builds one by one, between buf's events
	r        int        // the first run in runs not wholly returned
	steps    []feedStep // read's copies of the steps it reads
	i        int
	lastMark uint64
	unmarked bool // changes delivered since the last mark
	err      error
	closed   atomic.Bool
	done     chan struct{} // closed by close
	once     sync.Once
}

// Watch subscribes to the engine's changes: every change of every op from
// the start (WatchOptions.From) on, to the keyspaces (with a prefix) and
// bitslices chosen, in op order, each with its op, interleaved with
// resolved marks (EventResolved: every change of every op up to the mark
// has been delivered). A nil opts means defaults (see WatchOptions). Read
// it with Next; Close it when done. The watch ends when ctx ends (Next then
// returns ctx's error) or the engine closes.
//
// A watch from s after a Snapshot whose Op() is s-1 neither skips nor
// repeats a change: every change of every op above Op() is delivered
// exactly once and none at or below it, so the snapshot's state with the
// events folded in is the engine's at each resolved mark. Changes of an op
// at or below Op() are never delivered; those of a later op that the
// snapshot already holds are delivered too (folding them again changes
// nothing).
//
// The engine records changes for watches from Open if
// Options.WatchFromOpen is set, else from its first Watch call. Writes of
// op 0 have no place in op order: each is delivered at the first resolved
// mark cut after it returned, after that step's numbered changes (see
// doc/design.md, "Change feed").
//
// Errors: ErrBadOptions (a negative Buffer); ErrBadName and ErrNotFound for
// a keyspace or bitslice name that is bad or does not exist; ErrBadOp for a
// From above the op after the highest op seen, or above MaxOp;
// ErrCompacted (matching ErrResync) for a From below the oldest op the feed
// holds whole (in memory, or retained in the store with
// Options.WatchRetain for a watch that selects only what is retained);
// ErrClosed; ctx's error.
//
// With Options.WatchRetain a From below what memory holds is served from
// the store: the retained changes of the ops from From to the watermark of
// the newest flush released, a resolved mark there, then the live feed,
// with nothing skipped or repeated (doc/design.md, "Retention in the
// store"). This is how a subscriber resumes after either side restarted.
func (db *DB) Watch(ctx context.Context, opts *WatchOptions) (*Watch, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var o WatchOptions
	if opts != nil {
		o = *opts
	}
	w := &Watch{db: db, f: &db.feed, ctx: ctx, done: make(chan struct{}), from: o.From, durable: o.Durable, batch: o.Buffer}
	if w.batch < 0 {
		return nil, kverr.Errorf("watch: Buffer %d: %w", o.Buffer, ErrBadOptions)
	}
	if w.batch == 0 {
		w.batch = DefaultWatchBuffer
	}
	if o.From > flush.MaxOp {
		return nil, kverr.Errorf("watch from op %d: above the largest op number %d: %w", o.From, uint64(flush.MaxOp), ErrBadOp)
	}
	w.all = len(o.Keyspaces) == 0 && len(o.Bitslices) == 0
	if err := w.select_(o); err != nil {
		return nil, err
	}
	// Checked before recording starts too, so that a refused call leaves
	// the writers unrecorded (the ops only grow: a From past hi+1 now is
	// refused below unless ops came meanwhile).
	if hi := db.flusher.HighestOp(); o.From > hi+1 && !db.feed.on.Load() {
		return nil, kverr.Errorf("watch from op %d: the highest op seen is %d: %w", o.From, hi, ErrBadOp)
	}
	if err := db.feed.start(ctx); err != nil {
		return nil, err
	}
	if hi := db.flusher.HighestOp(); o.From > hi+1 {
		return nil, kverr.Errorf("watch from op %d: the highest op seen is %d: %w", o.From, hi, ErrBadOp)
	}
	if err := db.feed.add(w); err != nil {
		return nil, err
	}
	w.stopCtx = context.AfterFunc(ctx, w.close)
	return w, nil
}

// select_ records the watch's selection, checking every name.
func (w *Watch) select_(o WatchOptions) error {
	db := w.db
	t, err := db.flusher.Enter()
	if err != nil {
		return err
	}
	defer t.End()
	db.mu.Lock()
	defer db.mu.Unlock()
	w.kvs = map[string][][]byte{}
	w.bits = map[string]bool{}
	for _, k := range o.Keyspaces {
		if err := enginedir.CheckName("keyspace", k.Name); err != nil {
			return kverr.Errorf("watch: %w", err)
		}
		if _, ok := db.keyspaces[k.Name]; !ok {
			return kverr.Errorf("watch: keyspace %q: %w", k.Name, ErrNotFound)
		}
		var p []byte
		if len(k.Prefix) > 0 {
			p = bytes.Clone(k.Prefix)
		}
		w.kvs[k.Name] = append(w.kvs[k.Name], p)
	}
	for _, name := range o.Bitslices {
		if err := enginedir.CheckName("bitslice", name); err != nil {
			return kverr.Errorf("watch: %w", err)
		}
		if _, ok := db.bits[name]; !ok {
			return kverr.Errorf("watch: bitslice %q: %w", name, ErrNotFound)
		}
		w.bits[name] = true
	}
	return nil
}

// From returns the first op the watch delivers (WatchOptions.From, or the
// op "now" stood for).
func (w *Watch) From() uint64 { return w.start }

// Next returns the next event: a change, or a resolved mark. It blocks
// until one is ready, ctx ends (ctx's error; the watch goes on) or the
// watch ends: ErrLagged (matching ErrResync) if it fell behind the feed's
// buffer, the Watch ctx's error once it ended, ErrClosed after Close of
// the watch, or of the engine once every event ready before it was read
// (a watch reading changes retained in the store ends with ErrClosed when
// the engine closes; it resumes from the store after the next Open). If
// the Watch ctx has ended when Next first finds the watch closed, the
// ctx's error is returned instead of ErrClosed. Once the watch has ended
// every call returns the same error.
func (w *Watch) Next(ctx context.Context) (e WatchEvent, err error) {
	for {
		if w.r < len(w.runs) && w.runs[w.r].at == w.i {
			// Built here, in the result itself (a put, the common
			// change, without a call), not in the buffer first nor in a
			// value copied into the result (BenchmarkWatchRead).
			run := &w.runs[w.r]
			rb := run.rb
			if h, s, e0, e1 := rb.at(run.j); h&recKindMask == uint16(opPut) {
				e.Kind, e.Op, e.Keyspace = EventPut, run.op, rb.names[h>>recNameShift]
				e.Key, e.Value = rb.data[s:e0:e0], rb.data[e0:e1:e1]
			} else {
				e = rb.event(run.op, run.j)
			}
			if run.j++; run.j == run.end {
				// A run's events are counted at once, with its last
				// (an atomic add an event was a fifth of Next's CPU).
				w.r++
				w.f.delivered.Add(uint64(run.end - run.j0))
			}
			return e, nil
		}
		if w.i < len(w.buf) {
			e := w.buf[w.i]
			w.i++
			w.f.delivered.Add(1)
			return e, nil
		}
		if err := w.fill(ctx); err != nil {
			return WatchEvent{}, err
		}
	}
}

// fill is what Next and NextEvents do when no event is ready: one step of
// reading the feed (or the store), waiting for it to grow, or ending the
// watch. It returns the error to return (the watch's, or ctx's), or nil
// to look for ready events again.
func (w *Watch) fill(ctx context.Context) error {
	if w.err != nil {
		return w.err
	}
	if w.closed.Load() {
		w.err = w.f.endErr(w)
		return nil
	}
	if w.stored {
		if err := w.f.readStored(w); err != nil {
			w.f.endWith(err)
			w.err = err
			w.Close()
		}
		return nil
	}
	ch, rerr := w.f.read(w)
	if rerr != nil {
		w.f.endWith(rerr)
		w.err = rerr
		w.Close()
		return nil
	}
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.done:
	}
	return nil
}

// NextEvents returns the events Next would return next, in the same
// order, lent rather than built: at least one (it blocks and ends as Next
// does, returning Next's error and no events), and as many as are ready
// together (up to WatchOptions.Buffer): a run of one recorded Batch's
// changes, read from the feed's record of the batch (for a uniform
// batch with no WatchEvent built: see WatchEvents), or events the watch
// had built. The WatchEvents is
// valid until the watch's next call of Next, NextMany or NextEvents (the
// memory it reads may then be reused); the slices its methods return stay
// valid after, as a WatchEvent's do. A subscriber that reads only some
// fields of each change (a put's key and value) saves building the rest,
// which is most of what an event costs it through NextMany.
//
// N1 (doc/design.md, "Change feed", rule 5). A lend is of what the
// watch's last read made ready, in Next's order: a run's changes (read
// from the record, which is never reused: their slices stay valid), or
// the buffer's events up to the place of the next run (not past it:
// mutation 627), so the buffer the WatchEvents points into is refilled
// only by a later call. Every method checks its index, so an index
// outside [0, Len()) panics rather than reading another change of the
// record (mutations 624 and 628); a uniform run's bytes end at the run's
// last change besides.
func (w *Watch) NextEvents(ctx context.Context) (WatchEvents, error) {
	for {
		if w.r < len(w.runs) && w.runs[w.r].at == w.i {
			run := &w.runs[w.r]
			v := lendRun(run.rb, run.op, run.j, run.end)
			w.f.delivered.Add(uint64(run.end - run.j0))
			run.j = run.end
			w.r++
			return v, nil
		}
		if w.i < len(w.buf) {
			end := len(w.buf)
			if w.r < len(w.runs) {
				end = w.runs[w.r].at // runs come before buf[at]
			}
			v := WatchEvents{evs: w.buf[w.i:end:end], n: end - w.i}
			w.f.delivered.Add(uint64(end - w.i))
			w.i = end
			return v, nil
		}
		if err := w.fill(ctx); err != nil {
			return WatchEvents{}, err
		}
	}
}

// WatchEvents is a run of events lent by Watch.NextEvents, in the order
// Watch.Next would return them: the event at index i, 0 <= i < Len(), is
// Event(i), and Kind, Op, Key and Value return its fields: for a run of
// a uniform Batch (puts of one keyspace, one key length and one value
// length) without building the event, otherwise Key and Value build it
// as Event does. It is valid until the next call of its watch's
// Next, NextMany or NextEvents; the byte slices its methods return are
// shared as WatchEvent's are (not to be modified, valid after later
// calls). An index out of range panics. The zero value holds no events.
type WatchEvents struct {
	n int
	// A run of rb's changes j, ..., j+n-1, of op op; with uni (a uniform
	// record's: recBatch.uni) their bytes, change j+i's key of kl bytes
	// at i*w in uni and its value of vl bytes at i*w in vals (uni[kl:]).
	rb        *recBatch
	op        uint64
	j         int
	uni, vals []byte
	kl, vl, w int
	evs       []WatchEvent // without rb: the events
}

// lendRun returns changes j, ..., end-1 of rb, of op op, as a
// WatchEvents.
func lendRun(rb *recBatch, op uint64, j, end int) WatchEvents {
	v := WatchEvents{n: end - j, rb: rb, op: op, j: j}
	if rb.uni && rb.kl+rb.vl > 0 {
		v.kl, v.vl, v.w = int(rb.kl), int(rb.vl), int(rb.kl+rb.vl)
		v.uni = rb.data[j*v.w : end*v.w : end*v.w]
		v.vals = v.uni[v.kl:]
	}
	return v
}

// Len is how many events v holds.
func (v *WatchEvents) Len() int { return v.n }

// Event returns event i, built as Next builds it.
func (v *WatchEvents) Event(i int) WatchEvent {
	if v.rb == nil {
		return v.evs[i]
	}
	return v.rb.event(v.op, v.index(i))
}

// Kind returns event i's Kind.
func (v *WatchEvents) Kind(i int) WatchEventKind {
	if v.uni != nil && uint(i) < uint(v.n) {
		return EventPut
	}
	return v.kind(i)
}

// Op returns event i's Op.
func (v *WatchEvents) Op(i int) uint64 {
	if v.rb != nil && uint(i) < uint(v.n) {
		return v.op
	}
	return v.evs[i].Op
}

// Key returns event i's Key.
func (v *WatchEvents) Key(i int) []byte {
	// i is checked here, not left to the slice expression: i*v.w can
	// overflow into range (i = 1<<61 with w = 8 read change 0).
	if v.uni == nil || uint(i) >= uint(v.n) {
		return v.key(i)
	}
	return v.uni[i*v.w:][:v.kl:v.kl]
}

// Value returns event i's Value.
func (v *WatchEvents) Value(i int) []byte {
	if v.vals == nil || uint(i) >= uint(v.n) {
		return v.value(i)
	}
	return v.vals[i*v.w:][:v.vl:v.vl]
}

// index returns the change of v.rb that event i is, after checking i.
func (v *WatchEvents) index(i int) int {
	if uint(i) >= uint(v.n) {
		panic(kverr.Errorf("WatchEvents index %d out of range [0, %d)", i, v.n))
	}
	return v.j + i
}

// kind, key and value are Kind's, Key's and Value's other cases.
func (v *WatchEvents) kind(i int) WatchEventKind {
	if v.rb == nil {
		return v.evs[i].Kind
	}
	h, _, _, _ := v.rb.at(v.index(i))
	return eventKinds[h&recKindMask]
}

func (v *WatchEvents) key(i int) []byte {
	if v.rb == nil {
		return v.evs[i].Key
	}
	return v.rb.event(v.op, v.index(i)).Key
}

func (v *WatchEvents) value(i int) []byte {
	if v.rb == nil {
		return v.evs[i].Value
	}
	return v.rb.event(v.op, v.index(i)).Value
}

// NextMany appends to dst the events Next would return next, in the same
// order, and returns the extended slice: at least one (it blocks and ends
// as Next does; on an error it returns dst unchanged and the error Next
// would return) and at most cap(dst)-len(dst) when that is more than one.
// It returns what is ready without waiting for more. A subscriber that
// reads many events saves the copy of each event out of Next (an event is
// built in its place in dst), about half of what an event costs it
// (BenchmarkWatchRead).
func (w *Watch) NextMany(ctx context.Context, dst []WatchEvent) ([]WatchEvent, error) {
	n0 := len(dst)
	end := n0 + max(cap(dst)-n0, 1) // not past the room the caller gave
	for {
		dst = w.ready(dst, end)
		if len(dst) > n0 {
			return dst, nil
		}
		e, err := w.Next(ctx) // waits, refills, or ends the watch
		if err != nil {
			return dst, err
		}
		if dst = append(dst, e); len(dst) == end {
			return dst, nil
		}
	}
}

// ready appends to dst, up to end events or its capacity, the events Next
// would return without reading the feed: the runs and the buffer's events
// read, in Next's order, each counted as Next counts it.
func (w *Watch) ready(dst []WatchEvent, end int) []WatchEvent {
	end = min(end, cap(dst))
	var fromBuf uint64
	for len(dst) < end {
		if w.r < len(w.runs) && w.runs[w.r].at == w.i {
			run := &w.runs[w.r]
			k := min(run.end-run.j, end-len(dst))
			dst = run.rb.eventsInto(dst, run.op, run.j, run.j+k)
			if run.j += k; run.j == run.end {
				w.r++
				w.f.delivered.Add(uint64(run.end - run.j0))
			}
			continue
		}
		if w.i < len(w.buf) {
			dst = append(dst, w.buf[w.i])
			w.i++
			fromBuf++
			continue
		}
		break
	}
	if fromBuf > 0 {
		w.f.delivered.Add(fromBuf)
	}
	return dst
}

// Close ends the watch and releases what it holds in the feed. It is
// idempotent and safe to call concurrently with Next (which then returns
// ErrClosed).
func (w *Watch) Close() { w.close() }

func (w *Watch) close() {
	w.once.Do(func() {
		w.f.mu.Lock()
		w.f.remove(w)
		w.f.mu.Unlock()
		w.closed.Store(true)
		close(w.done)
		if w.stopCtx != nil {
			w.stopCtx()
		}
	})
}

// match appends to w.buf what of e the watch reports (a KV change clipped
// to each prefix it watches in that keyspace).
func (w *Watch) match(e *WatchEvent) {
	switch e.Kind {
	case EventResolved:
		if e.Op < w.from || (e.Op <= w.lastMark && !w.unmarked) {
			return
		}
		m := *e
		if !w.durable {
			m.Watermark = 0
		}
		w.buf = append(w.buf, m)
		w.lastMark, w.unmarked = max(w.lastMark, e.Op), false
		return
	case EventSetBits:
		if e.Op != 0 && e.Op < w.from || !(w.all || w.bits[e.Bitslice]) {
			return
		}
		w.buf = append(w.buf, *e)
		w.unmarked = true
		return
	}
	if e.Op != 0 && e.Op < w.from {
		return
	}
	if w.all {
		w.buf = append(w.buf, *e)
		w.unmarked = true
		return
	}
	for _, p := range w.kvs[e.Keyspace] {
		if c, ok := clip(e, p); ok {
			w.buf = append(w.buf, c)
			w.unmarked = true
		}
	}
}

// clip returns e restricted to the keys with prefix p (nil: every key).
func clip(e *WatchEvent, p []byte) (WatchEvent, bool) {
	if p == nil {
		return *e, true
	}
	switch e.Kind {
	case EventPut, EventDelete:
		return *e, bytes.HasPrefix(e.Key, p)
	case EventDropKeyspace:
		return *e, true
	}
	// A range: intersect [Key, End) with [p, prefixEnd(p)).
	c := *e
	if c.Key == nil || bytes.Compare(c.Key, p) < 0 {
		c.Key = p
	}
	pe := prefixEnd(p)
	if pe != nil && (c.End == nil || bytes.Compare(c.End, pe) > 0) {
		c.End = pe
	}
	if c.End != nil && bytes.Compare(c.Key, c.End) >= 0 {
		return c, false
	}
	return c, true
}

// feed is the engine's change feed. Writers call the record methods while
// they hold the write barrier; everything else is under mu.
type feed struct {
	db *DB
	// on is set (under the exclusive barrier) once the engine records
	// changes; writers load it with the shared barrier held.
	on atomic.Bool
	// frozen is the newest generation frozen (Freeze).
	frozen atomic.Uint64

	startMu sync.Mutex // serialises start

	mu sync.Mutex
	// pending holds recorded changes not yet resolved, in record order;
	// recSeq counts every record ever appended (pending[0] is record
	// recSeq-len(pending)).
	pending   []feedRec
	pendBytes int64
	recSeq    uint64
	cuts      []feedCut
	// steps is the resolved log: steps of changes in op order, each
	// closed by its mark, at consecutive positions from base to end.
	steps    []feedStep
	base     uint64
	end      uint64
	bytes    int64
	lastN    uint64 // the newest mark's op
	floor    uint64 // every change of every op >= floor is held
	durable  uint64 // log positions below it are durable
	dstep    int    // index in steps of the first step not yet durable
	durOp    uint64 // the newest durable step's mark
	released uint64 // newest generation released
	visible  int    // open visible-mode watches
	watches  map[*Watch]struct{}
	notify   chan struct{} // closed and replaced when the log or durable grows
	epoch    uint64        // bumped by each overflow
	closed   bool
	stopping bool // shutdown began: start starts no resolver
	running  bool

	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	// resMu serialises process: the resolver, and a flush that needs its
	// generation's changes resolved (retainWrite).
	resMu sync.Mutex
	// ret is the retention in the store (watch_retain.go); nil without
	// Options.WatchRetain. Its state is under mu.
	ret *retainer
	// arena is the memory batch records are carved from (recArena).
	arena recArena

	// Counters for Metrics.
	delivered atomic.Uint64 // events returned by Next
	lagged    atomic.Uint64 // watches ended by ErrLagged
	overflows atomic.Uint64 // overflows (every watch lagged)
}

// feedCut is a cut of the record: every write of every op <= n has
// recorded its changes among the first seq records, and all of those are
// in generation gen or an earlier one.
//
// C1 (doc/design.md, "Change feed", rule 2). A freeze's cut is an instant
// with the write barrier held exclusively. A visible-mode cut does not
// stop the writers: the resolver reads n = CompletedOp, then drains the
// writes in flight (flush.Drain: each stripe of the barrier seen free at
// an instant after), then, under mu, reads seq = recSeq and gen = frozen+1.
// A write is admitted (its op begun, or for a batch begun and ended) and
// records its changes while it holds a stripe, so a write of an op <= n,
// admitted before n was read (a later one would be refused: its op is
// complete), has recorded before the drain is done, hence before seq. A
// freeze stores frozen and queues its cut under mu in one step, so a
// visible cut that reads frozen = g is queued after g's cut and its
// records past g's are in g+1. Reading n after the drain, or skipping the
// drain, delivers a batch's changes after a mark at its op (mutations
// 140, 141; TestWatchVisibleCutOrder).
type feedCut struct{ n, seq, gen uint64 }

// feedStep is a step of the resolved log: its changes, in op order, at
// positions pos, pos+1, ..., then its mark (op n, durable once generation
// gen is released and the watermark reaches n). The changes are kept as
// the records made by the writes (a Batch is one record of many changes),
// sorted by op; a watch expands them into events as it reads them
// (Watch's read), so a cut costs O(records), not O(changes). ends[i] is
// the number of changes in recs[:i+1].
type feedStep struct {
	pos    uint64
	recs   []feedRec
	ends   []uint64
	n, gen uint64
	wm     uint64 // the watermark that covers it, once durable
	bytes  int64
}

// nChanges is how many changes s holds.
func (s *feedStep) nChanges() uint64 {
	if len(s.ends) == 0 {
		return 0
	}
	return s.ends[len(s.ends)-1]
}

// markPos is the position of s's mark.
func (s *feedStep) markPos() uint64 { return s.pos + s.nChanges() }

// mark returns s's resolved mark.
func (s *feedStep) mark() WatchEvent {
	return WatchEvent{Kind: EventResolved, Op: s.n, Watermark: s.wm}
}

// rec returns the index in s.recs of the record holding change c of s
// (c < nChanges), and c's index within that record.
func (s *feedStep) rec(c uint64) (int, int) {
	i, _ := slices.BinarySearch(s.ends, c+1)
	lo := uint64(0)
	if i > 0 {
		lo = s.ends[i-1]
	}
	return i, int(c - lo)
}

func (f *feed) init(db *DB) {
	f.db = db
	f.watches = map[*Watch]struct{}{}
	f.notify = make(chan struct{})
	f.kick = make(chan struct{}, 1)
	f.stop = make(chan struct{})
	f.done = make(chan struct{})
}

// startAtOpen turns recording on before the flusher starts: every op above
// the watermark wm is recorded whole.
func (f *feed) startAtOpen(wm uint64) {
	f.floor, f.lastN = wm+1, wm
	f.on.Store(true)
	f.running = true
	go f.run()
}

// start turns recording on if it is not: under the exclusive barrier, so
// that every op begun after the instant is recorded whole.
func (f *feed) start(ctx context.Context) error {
	f.startMu.Lock()
	defer f.startMu.Unlock()
	if f.on.Load() {
		return nil
	}
	err := f.db.flusher.Exclusive(ctx, func() {
		hi := f.db.flusher.HighestOp()
		f.mu.Lock()
		f.floor, f.lastN = hi+1, hi
		f.mu.Unlock()
		f.on.Store(true)
	})
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopping {
		// Close began after the instant: nothing runs the resolver.
		return ErrClosed
	}
	f.running = true
	go f.run()
	return nil
}

// add positions w and registers it.
func (f *feed) add(w *Watch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	if w.from == 0 {
		w.from = max(f.floor, f.db.flusher.CompletedOp()+1)
	}
	w.start = w.from
	w.lastMark = w.from - 1
	if w.from < f.floor {
		r := f.ret
		if r == nil || w.from < r.floor || !r.covers(w) {
			held := f.floor
			if r != nil && r.covers(w) {
				held = r.floor
			}
			return kverr.Errorf("watch from op %d: the feed holds every change from op %d: %w", w.from, held, ErrCompacted)
		}
		// The store retains it (watch_retain.go, R3).
		w.stored, w.rop, w.ridx = true, w.from, 0
	} else {
		w.pos = f.logPos(w.from)
		w.mop = w.from
	}
	f.watches[w] = struct{}{}
	if !w.durable {
		f.visible++
	}
	f.kickRun()
	return nil
}

// logPos is where a watch from op from starts in the log: after the last
// mark below from (every later change is of an op above that mark, or of
// op 0). f.mu held.
func (f *feed) logPos(from uint64) uint64 {
	i, _ := slices.BinarySearchFunc(f.steps, from, func(s feedStep, from uint64) int {
		if s.n < from {
			return -1
		}
		return 1
	})
	if i > 0 {
		return f.steps[i-1].markPos() + 1
	}
	return f.base
}

// trackChange advances the watch's place in op order (mop, midx: the key
// of the first retained change it has not processed, should it read on in
// the store) past a change of op. Changes of op 0 are not retained; those
// of ops before the place were processed before it.
func (w *Watch) trackChange(op uint64) {
	if op == 0 || op < w.mop {
		return
	}
	if op > w.mop {
		w.mop, w.midx = op, 0
	}
	w.midx++
}

// trackChanges is trackChange for n changes of op.
func (w *Watch) trackChanges(op uint64, n int) {
	if op == 0 || op < w.mop {
		return
	}
	if op > w.mop {
		w.mop, w.midx = op, 0
	}
	w.midx += uint32(n)
}

// trackMark advances the watch's place past a mark at n.
func (w *Watch) trackMark(n uint64) {
	if n+1 > w.mop {
		w.mop, w.midx = n+1, 0
	}
}

// endWith counts how a watch ended.
func (f *feed) endWith(err error) {
	if errors.Is(err, ErrLagged) {
		f.lagged.Add(1)
	}
}

// remove unregisters w. f.mu held.
func (f *feed) remove(w *Watch) {
	if _, ok := f.watches[w]; !ok {
		return
	}
	delete(f.watches, w)
	if !w.durable {
		f.visible--
	}
}

// endErr is the error of a watch closed by Close or its ctx.
func (f *feed) endErr(w *Watch) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	return ErrClosed
}

// read fills w.buf (and, for a watch of everything, w.runs: a batch
// record's changes that Next builds as it returns them) from the log. It
// returns a channel to wait on when nothing is ready, nil when it read
// something (or skipped events).
//
// It holds f.mu only to find its place and copy the headers of the steps
// it reads (at most readSteps); it expands their records into events
// after unlocking (and Next builds a run's later still): a step's records and counts are never changed once the
// step is in the log (resolve builds them before appending it; trim and
// an overflow drop steps from the log, never change them; the watermark
// of a durable step is set under f.mu before the durable position passes
// it, so the copies hold it for every position below the limit), so
// writers recording under f.mu do not wait while a watch expands a buffer
// of events.
func (f *feed) read(w *Watch) (<-chan struct{}, error) {
	f.mu.Lock()
	if w.pos < f.base {
		defer f.mu.Unlock()
		if r := f.ret; r != nil && r.covers(w) && w.mop >= r.floor {
			// The log dropped durable steps the watch had not read:
			// the store retains them. Read on there from the first
			// change not processed (R3).
			w.stored, w.rop, w.ridx = true, w.mop, w.midx
			return nil, nil
		}
		return nil, kverr.Errorf("watch from op %d: at op %d: %w", w.start, w.lastMark, ErrLagged)
	}
	limit := f.end
	if w.durable {
		limit = f.durable
	}
	if w.pos >= limit {
		defer f.mu.Unlock()
		if f.closed {
			return nil, ErrClosed
		}
		return f.notify, nil
	}
	i, _ := slices.BinarySearchFunc(f.steps, w.pos, func(s feedStep, pos uint64) int {
		if s.markPos() < pos {
			return -1
		}
		return 1
	})
	steps := append(w.steps[:0], f.steps[i:min(len(f.steps), i+readSteps)]...)
	f.mu.Unlock()
	w.steps = steps
	w.buf, w.i = w.buf[:0], 0
	clear(w.runs) // the watch keeps no record alive
	w.runs, w.r = w.runs[:0], 0
	queued := 0 // events in runs
	for k := 0; k < len(steps) && w.pos < limit && len(w.buf)+queued < w.batch; k++ {
		st := &steps[k]
		nc := st.nChanges()
		var r, j int // the record of w.pos and the change within it
		if c := w.pos - st.pos; c < nc {
			r, j = st.rec(c)
		}
		for w.pos <= st.markPos() && w.pos < limit && len(w.buf)+queued < w.batch {
			if w.all && w.pos-st.pos < nc && st.recs[r].batch != nil {
				// A watch of everything takes a batch record's changes
				// in one run, which Next builds as it returns them.
				rec := &st.recs[r]
				n := min(rec.count()-j, int(limit-w.pos), w.batch-len(w.buf)-queued)
				w.trackChanges(rec.Op, n)
				if rec.Op == 0 || rec.Op >= w.from {
					w.runs = append(w.runs, watchRun{rb: rec.batch, op: rec.Op, j0: j, j: j, end: j + n, at: len(w.buf)})
					queued += n
					w.unmarked = true
				}
				w.pos += uint64(n)
				if j += n; j == rec.count() {
					r, j = r+1, 0
				}
				continue
			}
			if w.pos-st.pos < nc {
				rec := &st.recs[r]
				if w.all {
					// What match does for a watch of everything, with the
					// event built in its place in the buffer, not copied
					// there (BenchmarkWatchRead).
					w.buf = append(w.buf, WatchEvent{})
					e := &w.buf[len(w.buf)-1]
					rec.eventInto(e, j)
					op := e.Op
					if op != 0 && op < w.from {
						*e = WatchEvent{}
						w.buf = w.buf[:len(w.buf)-1]
					} else {
						w.unmarked = true
					}
					w.trackChange(op)
				} else {
					e := rec.event(j)
					w.trackChange(e.Op)
					w.match(&e)
				}
				if j++; j == rec.count() {
					r, j = r+1, 0
				}
			} else {
				w.trackMark(st.n)
				m := st.mark()
				w.match(&m)
			}
			w.pos++
		}
	}
	clear(steps) // the watch keeps no step alive
	return nil, nil
}

// watchRun is a run of a batch record's changes that a watch of
// everything returns, built by Next one by one as it returns them, before
// w.buf[at] (runs at the same place in the order read): changes j0, ...,
// end-1 of rb, of op op, j the next to return. Each change is built once,
// in the event Next returns, not built in the buffer and then copied out
// of it; with W8's batches (all changes in batch records) the buffer
// stays empty.
type watchRun struct {
	rb         *recBatch
	op         uint64
	j0, j, end int
	at         int
}

// readSteps bounds the steps one read copies under f.mu.
const readSteps = 32

// Recording. Each method is called by a write holding the barrier's shared
// side, after it changed the overlay, only when f.on is set.

// feedRec is a recorded change (Kind set), or a whole batch's changes
// (batch set), of op Op: a batch is recorded as one copy of its changes,
// kept so in the resolved log, and expanded into events by each watch as
// it reads them, off the write path and off the resolver's.
type feedRec struct {
	WatchEvent
	batch *recBatch
}

// recBatch is a Batch's changes as applied (those it discarded left
// out), in one pointer-free allocation the garbage collector does not
// scan: the bytes of the changes, as the Batch laid them out (each
// change's after the previous one's), then two 32-bit ends a change, then
// a 16-bit head a change (its kind, flags and name). A put costs its key
// and value and 10 bytes; the names are in names, the bit indexes in bits.
// A uniform record (uni: every change a put to names[0] with a key of kl
// bytes and a value of vl, W8's and a bulk load's batches) has no ends
// and no heads: change j's bytes are at j*(kl+vl) (uniformPuts).
type recBatch struct {
	n      int      // changes
	buf    []byte   // data, then the ends, then the heads (none if uni)
	data   []byte   // buf[:len(data)], capped
	names  []string // name0[:k] unless a batch names more than one
	bits   []uint64 // lo, hi of each bit change
	name0  [1]string
	kl, vl int32 // with uni: every key's and value's length
	uni    bool
}

// A change's head: its kind in the low 3 bits, recV its bit value,
// recLower and recUpper a range delete's bounds present, and the index of
// its name in recBatch.names from recNameShift up.
const (
	recKindMask  = 7
	recV         = 1 << 3
	recLower     = 1 << 4
	recUpper     = 1 << 5
	recNameShift = 6
	recMaxNames  = 1 << (16 - recNameShift)
)

// eventKinds maps a change's head's kind (recKindMask) to its event's.
var eventKinds = [recKindMask + 1]WatchEventKind{
	opPut: EventPut, opDelete: EventDelete, opDeleteRange: EventDeleteRange,
	opSet: EventSetBits, opSetRange: EventSetBits,
}

// at returns change j's head and its bytes' bounds: s to e0 to e1 in
// data (a put's key [s, e0) and value [e0, e1); a range delete's bounds
// [s, e0) and [e0, e1)), or for a bit change e0 the index of its lo in
// bits. The change's bytes start where the previous change's end (e1).
func (rb *recBatch) at(j int) (head uint16, s, e0, e1 int) {
	if rb.uni {
		w := int(rb.kl + rb.vl)
		s = j * w
		return uint16(opPut), s, s + int(rb.kl), s + w
	}
	ends := rb.buf[len(rb.data):]
	if j > 0 {
		s = int(binary.LittleEndian.Uint32(ends[8*j-4:]))
	}
	e0 = int(binary.LittleEndian.Uint32(ends[8*j:]))
	e1 = int(binary.LittleEndian.Uint32(ends[8*j+4:]))
	head = binary.LittleEndian.Uint16(ends[8*rb.n+2*j:])
	return
}

// maxRecData bounds the data of a batch recorded as one recBatch (its
// offsets are 32-bit); a larger batch records each change on its own.
var maxRecData = math.MaxInt32 // a var: TestWatchBatchRecordForms lowers it

// recChunk is the size of the chunks recArena carves batch records'
// buffers from, and recHeaders how many record headers a slab holds
// (doc/design.md, "Change feed", watch12).
const (
	recChunk   = 64 << 10
	recHeaders = 64
)

// recArena is the writers' record memory: batch records' buffers are
// carved from pointer-free chunks of recChunk bytes, one after the other,
// and their headers from slabs of recHeaders, so recording a batch costs a
// copy, not an allocation and its clear. Nothing is ever reused: a chunk
// or slab is freed by the garbage collector once nothing points into it,
// so an event a watch holds (its Key and Value point into a chunk) keeps
// its chunk alive, at most recChunk bytes, and a held record its slab. A
// buffer over a quarter of recChunk is allocated on its own.
type recArena struct {
	mu    sync.Mutex // writers record concurrently
	chunk []byte     // the current chunk's part not yet carved
	slab  []recBatch // the current slab's headers not yet taken
}

// alloc returns a record header and a buffer of size bytes whose contents
// are not cleared (the caller writes every byte).
func (a *recArena) alloc(size int) (*recBatch, []byte) {
	a.mu.Lock()
	if len(a.slab) == 0 {
		a.slab = make([]recBatch, recHeaders)
	}
	rb := &a.slab[0]
	a.slab = a.slab[1:]
	var buf []byte
	if size <= recChunk/4 {
		if len(a.chunk) < size {
			a.chunk = make([]byte, recChunk)
		}
		buf = a.chunk[:size:size]
		a.chunk = a.chunk[size:]
	}
	a.mu.Unlock()
	if buf == nil {
		buf = make([]byte, size)
	}
	return rb, buf
}

// newRecBatch copies b's changes but those skip marks (nil: none) into
// memory from a; len(b.data) is at most maxRecData. It returns nil for a
// batch that names more than recMaxNames keyspaces and bitslices
// (recorded change by change instead).
func newRecBatch(a *recArena, b *Batch, skip []bool) *recBatch {
	n, size := len(b.ops), len(b.data)
	if skip == nil {
		if kl, vl, ok := uniformPuts(b); ok {
			rb, buf := a.alloc(size)
			copy(buf, b.data)
			rb.n, rb.uni, rb.kl, rb.vl = n, true, int32(kl), int32(vl)
			rb.name0[0] = b.ops[0].k.name
			rb.names = rb.name0[:1]
			rb.buf, rb.data = buf, buf[:size:size]
			return rb
		}
	}
	if skip != nil {
		n, size = 0, 0
		for i := range b.ops {
			if !skip[i] {
				n++
				if d, e := batchOpSpan(&b.ops[i]); d >= 0 {
					size += e - d
				}
			}
		}
	}
	// A batch of too many names, found below, wastes what it took from a
	// (rare: over recMaxNames keyspaces and bitslices in one batch).
	rb, buf := a.alloc(size + 10*n)
	rb.n = n
	rb.names = rb.name0[:0]
	if skip == nil {
		copy(buf, b.data)
	}
	ends := buf[size : size+8*n]
	heads := buf[size+8*n:]
	// A batch's changes come in runs of one keyspace or bitslice: the
	// name is looked up once a run, found by comparing the change's
	// keyspace and bitslice pointers with the last change's (no string
	// compare a change).
	var lastK *KV
	var lastB *Bits
	var name uint16
	at, j := 0, 0 // the end of the changes' bytes so far in buf; the change
	for i := range b.ops {
		if skip != nil && skip[i] {
			continue
		}
		o := &b.ops[i]
		if j == 0 || o.k != lastK || o.b != lastB {
			nm := ""
			if o.k != nil {
				nm = o.k.name
			} else if o.b != nil {
				nm = o.b.name
			}
			x := slices.Index(rb.names, nm) // a batch names few keyspaces
			if x < 0 {
				if x = len(rb.names); x == recMaxNames {
					return nil
				}
				rb.names = append(rb.names, nm)
			}
			lastK, lastB = o.k, o.b
			name = uint16(x) << recNameShift
		}
		head := name | uint16(o.kind)
		if o.v {
			head |= recV
		}
		d := -1 // where the change's bytes start in b.data
		e0, e1 := at, at
		switch o.kind {
		case opSet, opSetRange:
			e0 = len(rb.bits)
			rb.bits = append(rb.bits, o.lo, o.hi)
		case opPut:
			d, e0, e1 = o.a0, o.a1, o.b1
		case opDelete:
			d, e0, e1 = o.a0, o.a1, o.a1
		case opDeleteRange:
			if o.a0 >= 0 {
				head |= recLower
				d, e0, e1 = o.a0, o.a1, o.a1
			}
			if o.b0 >= 0 {
				head |= recUpper
				if d < 0 {
					d, e0 = o.b0, o.b0
				}
				e1 = o.b1
			}
		}
		if d >= 0 {
			if skip != nil {
				// The changes kept move down over those left out.
				copy(buf[at:], b.data[d:e1])
				e0, e1 = e0+at-d, e1+at-d
			} else if invariants.Enabled {
				invariants.Check(d == at && (o.kind == opDelete || o.a0 < 0 || o.b0 < 0 || o.b0 == o.a1),
					"kvbuf: feed: batch change %d's bytes do not follow the previous change's", i)
			}
			at = e1
		}
		binary.LittleEndian.PutUint32(ends[8*j:], uint32(e0))
		binary.LittleEndian.PutUint32(ends[8*j+4:], uint32(e1))
		binary.LittleEndian.PutUint16(heads[2*j:], head)
		j++
	}
	rb.buf, rb.data = buf, buf[:size:size]
	return rb
}

// uniformPuts reports whether b's changes are all puts to one keyspace
// with keys of kl bytes and values of vl bytes, laid out one after
// another from the start of b.data with nothing else there: a record of
// them needs no ends and no heads (recBatch.uni), 10 bytes a put fewer to
// write and to allocate (doc/design.md, "Change feed", watch24).
func uniformPuts(b *Batch) (kl, vl int, ok bool) {
	if len(b.ops) == 0 || b.ops[0].kind != opPut || b.ops[0].a0 != 0 {
		return 0, 0, false
	}
	o0 := &b.ops[0]
	kl, vl = o0.a1-o0.a0, o0.b1-o0.b0
	w := kl + vl
	if w > maxRecData/len(b.ops) || len(b.data) != len(b.ops)*w {
		return 0, 0, false
	}
	k := o0.k
	for i := range b.ops {
		o := &b.ops[i]
		at := i * w
		if o.kind != opPut || o.k != k || o.a0 != at || o.a1 != at+kl || o.b0 != at+kl || o.b1 != at+w {
			return 0, 0, false
		}
	}
	return kl, vl, true
}

// batchOpSpan is where o's bytes start and end in its Batch's data (-1:
// it has none).
func batchOpSpan(o *batchOp) (int, int) {
	switch o.kind {
	case opPut:
		return o.a0, o.b1
	case opDelete:
		return o.a0, o.a1
	case opDeleteRange:
		switch {
		case o.a0 >= 0 && o.b0 >= 0:
			return o.a0, o.b1
		case o.a0 >= 0:
			return o.a0, o.a1
		case o.b0 >= 0:
			return o.b0, o.b1
		}
	}
	return -1, -1
}

// batchEvents returns b's changes (skip: those it discarded) as events of
// op with their own copies of the bytes: how a batch too large for a
// recBatch is recorded.
func batchEvents(op uint64, b *Batch, skip []bool) []WatchEvent {
	var evs []WatchEvent
	for i := range b.ops {
		if skip != nil && skip[i] {
			continue
		}
		o := &b.ops[i]
		e := WatchEvent{Op: op}
		view := func(a, z int) []byte { return bytes.Clone(b.data[a:z]) }
		switch o.kind {
		case opPut:
			e.Kind, e.Keyspace, e.Key, e.Value = EventPut, o.k.name, view(o.a0, o.a1), view(o.b0, o.b1)
		case opDelete:
			e.Kind, e.Keyspace, e.Key = EventDelete, o.k.name, view(o.a0, o.a1)
		case opDeleteRange:
			e.Kind, e.Keyspace = EventDeleteRange, o.k.name
			if o.a0 >= 0 {
				e.Key = view(o.a0, o.a1)
			}
			if o.b0 >= 0 {
				e.End = view(o.b0, o.b1)
			}
		case opSet:
			e.Kind, e.Bitslice, e.Lo, e.Hi, e.Bit = EventSetBits, o.b.name, o.lo, o.lo+1, o.v
		case opSetRange:
			e.Kind, e.Bitslice, e.Lo, e.Hi, e.Bit = EventSetBits, o.b.name, o.lo, o.hi, o.v
		}
		evs = append(evs, e)
	}
	return evs
}

// bytes is the memory the feed counts for r.
func (r *feedRec) bytes() int64 {
	if r.batch != nil {
		return int64(len(r.batch.data)) + int64(r.batch.n)*eventOverhead
	}
	return eventBytes(&r.WatchEvent)
}

// count is how many changes r holds.
func (r *feedRec) count() int {
	if r.batch == nil {
		return 1
	}
	return r.batch.n
}

// event returns change j of r.
func (r *feedRec) event(j int) WatchEvent {
	var e WatchEvent
	r.eventInto(&e, j)
	return e
}

// event returns change j of rb, of op op: what eventInto builds, for a
// watch's run (watchRun).
func (rb *recBatch) event(op uint64, j int) WatchEvent {
	var e WatchEvent
	rb.eventInto(&e, op, j)
	return e
}

// eventInto sets *e, a zero event, to change j of r.
func (r *feedRec) eventInto(e *WatchEvent, j int) {
	if r.batch == nil {
		*e = r.WatchEvent
		return
	}
	r.batch.eventInto(e, r.Op, j)
}

// eventsInto appends changes j, ..., end-1 of rb, of op op, to dst,
// which has room for them, each built in its slot: what eventInto builds,
// a put (W8's every change) field by field in the loop, each change's
// start taken from the previous change's end.
func (rb *recBatch) eventsInto(dst []WatchEvent, op uint64, j, end int) []WatchEvent {
	n := len(dst)
	out := dst[n : n+end-j]
	if rb.uni {
		// Every change a put of one key and value length: no ends to
		// read, no kind to test.
		kl, w, name := int(rb.kl), int(rb.kl+rb.vl), rb.names[0]
		s := j * w
		for x := range out {
			e, e0, e1 := &out[x], s+kl, s+w
			e.Kind, e.Op, e.Keyspace = EventPut, op, name
			e.Key, e.Value, e.End = rb.data[s:e0:e0], rb.data[e0:e1:e1], nil
			e.Bitslice, e.Lo, e.Hi, e.Bit, e.Watermark = "", 0, 0, false, 0
			s = e1
		}
		return dst[:n+len(out)]
	}
	nd := len(rb.data)
	ends := rb.buf[nd : nd+8*rb.n]
	heads := rb.buf[nd+8*rb.n : nd+10*rb.n]
	s := 0
	if j > 0 {
		s = int(binary.LittleEndian.Uint32(ends[8*j-4:]))
	}
	for x := range out {
		e, c := &out[x], j+x
		e0 := int(binary.LittleEndian.Uint32(ends[8*c:]))
		e1 := int(binary.LittleEndian.Uint32(ends[8*c+4:]))
		if h := binary.LittleEndian.Uint16(heads[2*c:]); h&recKindMask == uint16(opPut) {
			// Field by field: a composite literal is built on the
			// stack and then copied.
			e.Kind, e.Op, e.Keyspace = EventPut, op, rb.names[h>>recNameShift]
			e.Key, e.Value, e.End = rb.data[s:e0:e0], rb.data[e0:e1:e1], nil
			e.Bitslice, e.Lo, e.Hi, e.Bit, e.Watermark = "", 0, 0, false, 0
		} else {
			*e = WatchEvent{}
			rb.eventInto(e, op, c)
		}
		s = e1
	}
	return dst[:n+len(out)]
}

// eventInto sets *e, a zero event, to change j of rb, of op op.
func (rb *recBatch) eventInto(e *WatchEvent, op uint64, j int) {
	h, s, e0, e1 := rb.at(j)
	e.Op = op
	name := rb.names[h>>recNameShift]
	switch batchKind(h & recKindMask) {
	case opPut:
		e.Kind, e.Keyspace, e.Key, e.Value = EventPut, name, rb.data[s:e0:e0], rb.data[e0:e1:e1]
	case opDelete:
		e.Kind, e.Keyspace, e.Key = EventDelete, name, rb.data[s:e0:e0]
	case opDeleteRange:
		e.Kind, e.Keyspace = EventDeleteRange, name
		if h&recLower != 0 {
			e.Key = rb.data[s:e0:e0]
		}
		if h&recUpper != 0 {
			e.End = rb.data[e0:e1:e1]
		}
	case opSet:
		lo := rb.bits[e0]
		e.Kind, e.Bitslice, e.Lo, e.Hi, e.Bit = EventSetBits, name, lo, lo+1, h&recV != 0
	case opSetRange:
		e.Kind, e.Bitslice, e.Lo, e.Hi, e.Bit = EventSetBits, name, rb.bits[e0], rb.bits[e0+1], h&recV != 0
	}
}

// batch records a Batch applied as op (skip: changes it discarded).
func (f *feed) batch(op uint64, b *Batch, skip []bool) {
	var rb *recBatch
	if len(b.data) <= maxRecData {
		rb = newRecBatch(&f.arena, b, skip)
	}
	if rb == nil {
		f.events(batchEvents(op, b, skip))
		return
	}
	r := feedRec{batch: rb}
	r.Op = op
	f.mu.Lock()
	f.pending = append(f.pending, r)
	f.pendBytes += r.bytes()
	f.recSeq++
	over := f.pendBytes > f.pendLimit()
	f.mu.Unlock()
	if over {
		f.overflow()
	}
}

func (f *feed) record(e WatchEvent, n int64) {
	f.mu.Lock()
	f.pending = append(f.pending, feedRec{WatchEvent: e})
	f.pendBytes += n
	f.recSeq++
	over := f.pendBytes > f.pendLimit()
	f.mu.Unlock()
	if over {
		f.overflow()
	}
}

// pendLimit is how far unresolved changes may grow: the buffer, plus what
// the engine may hold pending between two cuts.
func (f *feed) pendLimit() int64 {
	return f.db.opts.WatchBufferBytes + max(f.db.opts.MaxPendingBytes, 0)
}

const eventOverhead = 96 // bytes a WatchEvent costs beyond its slices

func (f *feed) put(op uint64, ks string, key, value []byte) {
	b := make([]byte, len(key)+len(value))
	copy(b, key)
	copy(b[len(key):], value)
	f.record(WatchEvent{Kind: EventPut, Op: op, Keyspace: ks, Key: b[:len(key):len(key)], Value: b[len(key):]}, int64(len(b))+eventOverhead)
}

func (f *feed) del(op uint64, ks string, key []byte) {
	f.record(WatchEvent{Kind: EventDelete, Op: op, Keyspace: ks, Key: bytes.Clone(key)}, int64(len(key))+eventOverhead)
}

func (f *feed) delRange(op uint64, ks string, lo, hi []byte) {
	f.record(WatchEvent{Kind: EventDeleteRange, Op: op, Keyspace: ks, Key: cloneOrNil(lo), End: cloneOrNil(hi)}, int64(len(lo)+len(hi))+eventOverhead)
}

func (f *feed) drop(op uint64, ks string) {
	f.record(WatchEvent{Kind: EventDropKeyspace, Op: op, Keyspace: ks}, eventOverhead)
}

func (f *feed) setBits(op uint64, name string, lo, hi uint64, v bool) {
	f.record(WatchEvent{Kind: EventSetBits, Op: op, Bitslice: name, Lo: lo, Hi: hi, Bit: v}, eventOverhead)
}

// events records evs under one lock.
func (f *feed) events(evs []WatchEvent) {
	f.mu.Lock()
	for i := range evs {
		f.pending = append(f.pending, feedRec{WatchEvent: evs[i]})
		f.pendBytes += eventBytes(&evs[i])
	}
	f.recSeq += uint64(len(evs))
	over := f.pendBytes > f.pendLimit()
	f.mu.Unlock()
	if over {
		f.overflow()
	}
}

// setMany records Bits.SetMany's changes under one lock.
func (f *feed) setMany(op uint64, name string, idx []uint64, vals []bool) {
	f.mu.Lock()
	for j, i := range idx {
		f.pending = append(f.pending, feedRec{WatchEvent: WatchEvent{Kind: EventSetBits, Op: op, Bitslice: name, Lo: i, Hi: i + 1, Bit: vals[j]}})
	}
	f.pendBytes += int64(len(idx)) * eventOverhead
	f.recSeq += uint64(len(idx))
	over := f.pendBytes > f.pendLimit()
	f.mu.Unlock()
	if over {
		f.overflow()
	}
}

func cloneOrNil(b []byte) []byte {
	if b == nil {
		return nil
	}
	return bytes.Clone(b)
}

// overflow drops everything the feed holds when its unresolved changes
// outgrow the buffer (an op held open while others write): every watch
// lags, and the feed holds ops begun from now on. The highest op is read
// after the drop, so every op above it records all of its changes after.
func (f *feed) overflow() {
	f.mu.Lock()
	if f.pendBytes <= f.pendLimit() {
		f.mu.Unlock()
		return
	}
	clear(f.pending)
	f.pending, f.pendBytes = f.pending[:0], 0
	f.cuts = f.cuts[:0]
	f.mu.Unlock()
	hi := f.db.flusher.HighestOp()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropLog()
	f.floor = max(f.floor, hi+1)
	f.overflows.Add(1)
	if f.ret != nil {
		// R4: changes of ops up to hi were lost.
		clear(f.ret.pool)
		f.ret.pool = f.ret.pool[:0]
		f.ret.raiseFloor(hi + 1)
	}
	f.lastN = max(f.lastN, hi)
	f.broadcast()
}

// dropLog drops the whole resolved log, leaving a gap of one position so
// that every watch lags. f.mu held.
func (f *feed) dropLog() {
	f.epoch++
	f.end++
	f.base = f.end
	f.steps, f.bytes, f.dstep = nil, 0, 0
	f.durable = f.base
}

// freezeHook is called by Freeze(g), with the barrier held exclusively:
// a cut (no write in flight). frozen is stored with the cut under f.mu, so
// a visible cut (visibleCut) that sees frozen = g finds g's cut queued
// before its own (C1).
func (f *feed) freezeHook(g uint64) {
	if !f.on.Load() {
		f.frozen.Store(g)
		return
	}
	n := f.db.flusher.CompletedOp()
	f.mu.Lock()
	f.frozen.Store(g)
	f.cuts = append(f.cuts, feedCut{n: n, seq: f.recSeq, gen: g})
	f.mu.Unlock()
	f.kickRun()
}

// visibleCut queues a visible-mode cut at n once the drain begun after n
// was read is done (C1): every write of an op at or below n has recorded.
// The records counted so far are in the generation after the newest one
// frozen, or an earlier one. It returns the record count.
func (f *feed) visibleCut(n uint64) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq := f.recSeq
	f.cuts = append(f.cuts, feedCut{n: n, seq: seq, gen: f.frozen.Load() + 1})
	return seq
}

// releaseHook is called once generation g is released.
//
// D1 (doc/design.md, "Change feed", rule 4). It is the first thing
// generation g's Release does: after g's wait returned (its data synced,
// and the persisted watermark stored by the flusher before it calls
// Release), before the engine releases g's tables, retains them in the
// read tier and tells the memory budget. A durable watch's delivery needs
// only the first two, and the rest took 0.6-13 ms of the feed's part of
// the durable latency while the hook came last (doc/bench/2026-12-07-watchlat13).
// Never earlier than the wait's return: a durable watch would deliver
// changes not yet synced (op 0's, which no watermark covers; and retained
// changes read from the store, R3), which TestWatchDurableAfterSync catches
// (mutation 590: the hook at the end of Write).
func (f *feed) releaseHook(g uint64) {
	if !f.on.Load() {
		return
	}
	f.mu.Lock()
	f.released = max(f.released, g)
	if f.ret != nil {
		f.ret.released(g)
	}
	f.mu.Unlock()
	f.kickRun()
}

func (f *feed) kickRun() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// run is the resolver goroutine: it turns cuts into steps of the log,
// makes visible-mode cuts while visible watches are open, and advances
// the durable position. It stops at shutdown.
func (f *feed) run() {
	defer close(f.done)
	tick := time.NewTicker(watchTick)
	defer tick.Stop()
	var seenSeq, seenOp uint64
	var d flush.Drain
	draining := false
	var dn uint64 // with draining: the cut's op
	for {
		select {
		case <-f.stop:
			return
		case <-f.kick:
		case <-tick.C:
			if !draining {
				f.mu.Lock()
				want := f.visible > 0 && (f.recSeq != seenSeq || f.db.flusher.CompletedOp() != seenOp)
				f.mu.Unlock()
				if want {
					// C1: n is read before the drain begins.
					dn = f.db.flusher.CompletedOp()
					f.db.flusher.BeginDrain(&d)
					draining = true
				}
			}
			if draining && pollDrain(&d) {
				draining = false
				seenOp, seenSeq = dn, f.visibleCut(dn)
			}
		}
		f.process()
	}
}

// pollDrain polls d up to drainTries times, yielding between polls.
func pollDrain(d *flush.Drain) bool {
	for i := range drainTries {
		if d.Poll() {
			return true
		}
		if i+1 < drainTries {
			runtime.Gosched()
		}
	}
	return false
}

// process resolves the cuts queued, advances the durable position, trims
// the log to its bound and wakes the watches.
func (f *feed) process() {
	f.resMu.Lock()
	defer f.resMu.Unlock()
	f.mu.Lock()
	cuts := f.cuts
	f.cuts = nil
	f.mu.Unlock()
	grew := false
	for _, c := range cuts {
		if f.resolve(c) {
			grew = true
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	wm := f.db.flusher.Watermark()
	for f.dstep < len(f.steps) {
		st := &f.steps[f.dstep]
		if f.released < st.gen || wm < st.n {
			break
		}
		st.wm = wm
		f.durOp = max(f.durOp, st.n)
		f.durable = st.markPos() + 1
		f.dstep++
		grew = true
	}
	f.trim()
	if grew {
		f.broadcast()
	}
}

// resolve moves the changes cut c resolves into the log, in op order
// (changes of op 0 last, in record order), closed by a mark. It takes the
// records under f.mu, drops empty ones and sorts them without it (writers record
// meanwhile; O(records), never O(changes)), and appends the step under f.mu unless an overflow dropped
// the log meanwhile. Only the resolver (or shutdown, after it) calls it.
func (f *feed) resolve(c feedCut) bool {
	f.mu.Lock()
	first := f.recSeq - uint64(len(f.pending))
	k := 0 // pending records before the cut
	if c.seq > first {
		k = int(min(c.seq-first, uint64(len(f.pending))))
	}
	// The records resolved go to the step (take, sized for the records
	// before the cut: every record of an op <= c.n is one of them); those
	// kept move to the front of pending, which keeps its capacity, so
	// that writers do not grow it again from empty after every cut.
	take := make([]feedRec, 0, k)
	nk := 0
	var n, gone int64
	sorted, prev := true, uint64(0)
	for i := range f.pending {
		r := &f.pending[i]
		switch {
		case i < k && r.Op == 0:
		case r.Op != 0 && r.Op <= c.n:
			if invariants.Enabled {
				invariants.Check(i < k, "kvbuf: feed: a change of op %d recorded after a cut at op %d", r.Op, c.n)
			}
			if r.Op < f.floor {
				// A change of an op begun before the feed held ops
				// whole: no watch may start there.
				gone += r.bytes()
				continue
			}
		default:
			f.pending[nk] = *r // nk <= i
			nk++
			continue
		}
		if key := r.Op - 1; key < prev { // op 0 wraps to the end
			sorted = false
		} else {
			prev = key
		}
		n += r.bytes()
		take = append(take, *r)
	}
	clear(f.pending[nk:])
	f.pending = f.pending[:nk]
	f.pendBytes -= n + gone
	epoch, last := f.epoch, f.lastN
	mark := max(c.n, last)
	f.mu.Unlock()
	if len(take) == 0 && mark == last {
		return false
	}
	k = 0
	for i := range take {
		if take[i].count() > 0 { // a batch whose every change was discarded
			take[k] = take[i]
			k++
		}
	}
	clear(take[k:])
	take = take[:k] // a step's records are not empty (its read relies on it)
	if !sorted {
		// Each record is of one op: sorting the records stably sorts
		// their changes.
		slices.SortStableFunc(take, func(a, b feedRec) int {
			ka, kb := a.Op-1, b.Op-1
			switch {
			case ka < kb:
				return -1
			case ka > kb:
				return 1
			}
			return 0
		})
	}
	ends := make([]uint64, len(take))
	var nc uint64
	for i := range take {
		nc += uint64(take[i].count())
		ends[i] = nc
	}
	var recs []retRec
	if f.ret != nil {
		recs = f.ret.collect(take)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if epoch != f.epoch {
		return false // an overflow dropped the log: every watch lags
	}
	if f.ret != nil {
		f.ret.pool = append(f.ret.pool, recs...)
	}
	mark = max(mark, f.lastN)
	st := feedStep{pos: f.end, recs: take, ends: ends, n: mark, gen: c.gen, bytes: n + eventOverhead}
	f.steps = append(f.steps, st)
	f.end = st.markPos() + 1
	f.bytes += st.bytes
	f.lastN = mark
	return true
}

func eventBytes(e *WatchEvent) int64 {
	return int64(len(e.Key)+len(e.Value)+len(e.End)) + eventOverhead
}

// trim drops the oldest durable steps while the log is over its bound.
// f.mu held.
func (f *feed) trim() {
	k := 0
	for f.bytes > f.db.opts.WatchBufferBytes && k < f.dstep {
		f.bytes -= f.steps[k].bytes
		f.floor = max(f.floor, f.steps[k].n+1)
		k++
	}
	if k == 0 {
		return
	}
	f.base = f.steps[k-1].markPos() + 1
	clear(f.steps[:k])
	f.steps = f.steps[k:]
	f.dstep -= k
}

// broadcast wakes every watch waiting in Next. f.mu held.
func (f *feed) broadcast() {
	close(f.notify)
	f.notify = make(chan struct{})
}

// shutdown stops the resolver once the flusher has stopped (Close),
// resolves what the final flush cut, and ends every watch once it has read
// what is ready.
func (f *feed) shutdown() {
	f.mu.Lock()
	f.stopping = true
	running := f.running
	f.mu.Unlock()
	if running {
		close(f.stop)
		<-f.done
	}
	f.process()
	f.mu.Lock()
	f.closed = true
	f.broadcast()
	f.mu.Unlock()
}
