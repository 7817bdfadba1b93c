package flush

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeTarget is a Target whose generations record which writes each one
// holds, and whose Freeze, Write, wait and Release run test hooks (which may
// block on channels, fail, panic or call runtime.Goexit). Hooks run without
// the target's lock.
type fakeTarget struct {
	t testing.TB

	mu        sync.Mutex
	pending   []string
	frozen    uint64              // last generation number frozen
	released  uint64              // last generation number released
	durable   map[string]uint64   // key -> generation that released it
	gens      map[uint64][]string // generation -> keys
	wms       map[uint64]uint64   // generation -> watermark last written
	durableWM uint64              // watermark of the last generation whose wait returned nil
	events    []string
	writes    map[uint64]int // generation -> Write calls

	bytes atomic.Int64
	busy  atomic.Int32 // Freeze and Write calls running: never more than 1

	onFreeze  func(g uint64)
	onWrite   func(g uint64, attempt int) error
	onWait    func(g uint64, attempt int) error
	onRelease func(g uint64)
}

func newFake(t testing.TB) *fakeTarget {
	return &fakeTarget{
		t:       t,
		durable: map[string]uint64{},
		gens:    map[uint64][]string{},
		wms:     map[uint64]uint64{},
		writes:  map[uint64]int{},
	}
}

// Put records a pending write; the caller holds a write Ticket.
func (ft *fakeTarget) Put(key string) {
	ft.mu.Lock()
	ft.pending = append(ft.pending, key)
	ft.mu.Unlock()
	ft.bytes.Add(16)
}

func (ft *fakeTarget) event(format string, args ...any) {
	ft.events = append(ft.events, fmt.Sprintf(format, args...))
}

// enter checks that Freeze and Write never overlap.
func (ft *fakeTarget) enter(what string) func() {
	if n := ft.busy.Add(1); n != 1 {
		ft.t.Errorf("%s runs concurrently with another Freeze or Write", what)
	}
	return func() { ft.busy.Add(-1) }
}

func (ft *fakeTarget) Freeze(g uint64) Generation {
	defer ft.enter("Freeze")()
	if ft.onFreeze != nil {
		ft.onFreeze(g)
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if g != ft.frozen+1 {
		ft.t.Errorf("Freeze(%d) after generation %d", g, ft.frozen)
	}
	ft.frozen = g
	ft.gens[g] = ft.pending
	ft.pending = nil
	ft.event("freeze %d", g)
	return &fakeGen{ft: ft, seq: g}
}

func (ft *fakeTarget) PendingBytes() int64 { return ft.bytes.Load() }

// PendingCounter makes the fake's admission read its counter in place, as
// the engine's does.
func (ft *fakeTarget) PendingCounter() *atomic.Int64 { return &ft.bytes }

type fakeGen struct {
	ft  *fakeTarget
	seq uint64
}

func (fg *fakeGen) Write(ctx context.Context, wm uint64) (func() error, error) {
	ft := fg.ft
	defer ft.enter("Write")()
	ft.mu.Lock()
	ft.writes[fg.seq]++
	attempt := ft.writes[fg.seq]
	ft.event("write %d", fg.seq)
	ft.mu.Unlock()
	if ft.onWrite != nil {
		if err := ft.onWrite(fg.seq, attempt); err != nil {
			return nil, err
		}
	}
	ft.mu.Lock()
	ft.wms[fg.seq] = wm
	ft.mu.Unlock()
	var called atomic.Bool
	return func() error {
		if called.Swap(true) {
			ft.t.Errorf("wait of generation %d called twice", fg.seq)
		}
		ft.mu.Lock()
		ft.event("wait %d", fg.seq)
		ft.mu.Unlock()
		if ft.onWait != nil {
			if err := ft.onWait(fg.seq, attempt); err != nil {
				return err
			}
		}
		ft.mu.Lock()
		ft.durableWM = max(ft.durableWM, wm)
		ft.mu.Unlock()
		return nil
	}, nil
}

// Release runs onRelease after its bookkeeping, so a panic there leaves the
// generation dropped (Release is never called twice).
func (fg *fakeGen) Release() {
	ft := fg.ft
	if ft.onRelease != nil {
		defer ft.onRelease(fg.seq)
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if fg.seq != ft.released+1 {
		ft.t.Errorf("Release(%d) after generation %d", fg.seq, ft.released)
	}
	ft.released = fg.seq
	for _, k := range ft.gens[fg.seq] {
		ft.durable[k] = fg.seq
	}
	ft.bytes.Add(-16 * int64(len(ft.gens[fg.seq])))
	ft.event("release %d", fg.seq)
}

// isDurable reports whether key is in a released generation.
func (ft *fakeTarget) isDurable(key string) bool {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	_, ok := ft.durable[key]
	return ok
}

func (ft *fakeTarget) log() []string {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return slices.Clone(ft.events)
}

// numFrozen returns the newest generation frozen.
func (ft *fakeTarget) numFrozen() uint64 {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.frozen
}

func (ft *fakeTarget) keysOf(g uint64) []string {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return slices.Clone(ft.gens[g])
}

func (ft *fakeTarget) wmOf(g uint64) uint64 {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.wms[g]
}

// settleTarget is a fakeTarget that is also a Settler.
type settleTarget struct {
	*fakeTarget
	settles atomic.Int64
}

func (st *settleTarget) Settle() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.frozen != st.released {
		st.t.Errorf("Settle with generations %d..%d in flight", st.released+1, st.frozen)
	}
	st.event("settle")
	st.settles.Add(1)
}

// put does one covered write of key for op through f.
func put(ctx context.Context, f *Flusher, ft *fakeTarget, key string, op uint64) error {
	w, err := f.BeginWrite(ctx, op, false)
	if err != nil || w.Skipped() {
		return err
	}
	ft.Put(key)
	w.End()
	return nil
}

// blocker is a channel-controlled hook: calls for generation g block until
// open(g).
type blocker struct {
	mu    sync.Mutex
	chans map[uint64]chan struct{}
}

func newBlocker() *blocker { return &blocker{chans: map[uint64]chan struct{}{}} }

func (b *blocker) ch(g uint64) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.chans[g]
	if !ok {
		c = make(chan struct{})
		b.chans[g] = c
	}
	return c
}

// block waits until g is opened.
func (b *blocker) block(g uint64) { <-b.ch(g) }

// open releases g's calls; opening it again is a no-op.
func (b *blocker) open(g uint64) {
	c := b.ch(g)
	select {
	case <-c:
	default:
		close(c)
	}
}

// recycleTarget is a fakeTarget whose generations are Recyclers: Recycle
// runs onRecycle (nil: nothing) and logs "recycle g".
type recycleTarget struct {
	*fakeTarget
	onRecycle func(g uint64)
}

func (rt *recycleTarget) Freeze(g uint64) Generation {
	return &recycleGen{fakeGen: rt.fakeTarget.Freeze(g).(*fakeGen), rt: rt}
}

type recycleGen struct {
	*fakeGen
	rt *recycleTarget
}

func (rg *recycleGen) Recycle() {
	if rg.rt.onRecycle != nil {
		rg.rt.onRecycle(rg.seq)
	}
	rg.ft.mu.Lock()
	defer rg.ft.mu.Unlock()
	rg.ft.event("recycle %d", rg.seq)
}
