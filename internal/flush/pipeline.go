package flush

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/kvbuf/kvbuf/internal/invariants"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// maxGroupSpins bounds the spinning phase of a sibling wait. The wait
// normally ends on its deadline (GroupWait) or when the k callers joined;
// the bound matters where time does not advance while goroutines run
// (testing/synctest) and after it the writer sleeps until the deadline.
const maxGroupSpins = 4096

// action is what the writer does next.
type action int

const (
	actSleep     action = iota // wait for a kick or a timer
	actStop                    // Close: return
	actRewrite                 // write q[nWritten] again after a failure
	actFreeze                  // freeze (the detached open group, if any) and write
	actGroupWait               // wait for siblings to join the open group
)

// writeLoop is the writer goroutine: it decides, freezes and writes. State
// lives in the Flusher, so a replacement started after a runtime.Goexit
// resumes it (invariant 12).
func (f *Flusher) writeLoop() {
	for {
		byteKick := f.kicked.Load() && f.kicked.Swap(false)
		f.mu.Lock()
		if f.failSeq != f.seenFail {
			// A failure since the last look: background work waits for the
			// backoff (explicit Flush calls do not).
			f.seenFail = f.failSeq
			f.bgDue = false
			f.armTickLocked()
		}
		if byteKick && f.backoff == 0 {
			f.bgDue = true // during a backoff the retry timer runs it
		}
		act, grp, gn, epoch, k := f.decideLocked()
		f.mu.Unlock()
		switch act {
		case actStop:
			f.mu.Lock()
			f.wExited = true
			f.mu.Unlock()
			f.wakeWaiter()
			close(f.writerDone)
			return
		case actSleep:
			select {
			case <-f.kick:
			case <-f.tick.C:
				f.bgDue = true
			}
		case actGroupWait:
			f.groupWait(grp, k)
		case actRewrite:
			f.write(gn, epoch)
		case actFreeze:
			f.freeze(grp)
		}
	}
}

// decideLocked picks the writer's next action (under mu).
func (f *Flusher) decideLocked() (act action, grp *group, gn *gen, epoch uint64, k int) {
	if f.stopping {
		return actStop, nil, nil, 0, 0
	}
	explicit := f.open != nil && (f.open.n.Load() > 0 || f.open.final)
	if f.nWritten < len(f.q) {
		// A failure left generations to write again: they go first, in
		// order, once the waits of the failed attempt returned (invariant 6),
		// at once for an explicit caller, else when the backoff elapsed.
		if f.stale > 0 {
			return actSleep, nil, nil, 0, 0
		}
		waiting := explicit
		for _, g := range f.q[f.nWritten:] {
			waiting = waiting || len(g.groups) > 0
		}
		if waiting || f.bgDue {
			return actRewrite, nil, f.q[f.nWritten], f.epoch, 0
		}
		return actSleep, nil, nil, 0, 0
	}
	if !explicit && !f.bgDue {
		return actSleep, nil, nil, 0, 0
	}
	if len(f.q) >= f.opts.PipelineDepth {
		return actSleep, nil, nil, 0, 0 // a release will wake us
	}
	if explicit && !f.open.final && !f.eager && f.callersInFlightLocked() {
		// A sync is in flight for other Flush callers: they will be back
		// soon after it ends. Writing now would only queue this generation
		// for the sync after it (a sequential log syncs one batch of writes
		// at a time) and leave them to the one after that: two cohorts that
		// alternate, each waiting two syncs. Holding until the release lets
		// the sibling wait merge them.
		return actSleep, nil, nil, 0, 0
	}
	if o := f.open; explicit && !o.final && !o.waited && f.opts.GroupWait > 0 &&
		f.inWait == 0 && f.relCallers > 1 && o.n.Load() < o.base+int32(f.relCallers) {
		// No sync in flight: the callers of the generations just released
		// are coming back one by one; wait (bounded) for them to make one
		// generation instead of two.
		o.waited = true
		return actGroupWait, o, nil, 0, int(o.base) + f.relCallers
	}
	grp = f.open
	f.open = nil
	f.bgDue = false
	f.relCallers = 0
	return actFreeze, grp, nil, 0, 0
}

// callersInFlightLocked reports whether a generation in flight has Flush
// callers.
func (f *Flusher) callersInFlightLocked() bool {
	for _, g := range f.q {
		if len(g.groups) > 0 {
			return true
		}
	}
	return false
}

// groupWait waits until grp has k callers, Close began, GroupWait has
// passed, or no caller joined for groupGap(GroupWait): the returning
// siblings come back in a burst, so a pause means the rest are not coming
// soon. It spins, yielding, (Go timers shorter than a millisecond sleep
// about a millisecond when every goroutine is idle) and sleeps only after
// maxGroupSpins yields.
func (f *Flusher) groupWait(grp *group, k int) {
	start := time.Now()
	deadline := start.Add(f.opts.GroupWait)
	gap := groupGap(f.opts.GroupWait)
	n, last := grp.n.Load(), start
	for spins := 0; ; spins++ {
		if int(n) >= k || f.isClosing() || grp.isDone() {
			return // enough siblings, Close, or a failure completed grp
		}
		now := time.Now()
		if m := grp.n.Load(); m != n {
			n, last = m, now
			continue
		}
		end := last.Add(gap)
		if deadline.Before(end) {
			end = deadline
		}
		if !now.Before(end) {
			return
		}
		if spins < maxGroupSpins {
			runtime.Gosched()
			continue
		}
		if invariants.Enabled {
			invariants.Check(spins < maxGroupSpins+1<<20, "flush: group wait spun %d times", spins)
		}
		f.gwTimer.Reset(end.Sub(now))
		select {
		case <-f.kick:
		case <-f.gwTimer.C:
		case <-f.closing:
		}
		f.gwTimer.Stop()
	}
}

// groupGap is how long the sibling wait lasts without a new caller.
func groupGap(wait time.Duration) time.Duration { return wait / 4 }

// armTickLocked arms the background timer: the retry delay while failing,
// else the interval (under mu, writer only).
func (f *Flusher) armTickLocked() { f.armTick(f.backoff) }

func (f *Flusher) armTick(backoff time.Duration) {
	switch {
	case backoff > 0:
		f.tick.Reset(backoff)
	case f.opts.Interval > 0:
		f.tick.Reset(f.opts.Interval)
	default:
		f.tick.Stop()
	}
}

// call runs fn, turning a panic into a *PanicError. If fn calls
// runtime.Goexit, call cannot stop the goroutine from ending: it passes the
// error to resume, which must start a goroutine that handles it and
// continues the loop (invariant 12).
func call(fn func(), resume func(error)) (err error) {
	ok := false
	defer func() {
		if ok {
			return
		}
		r := recover()
		err = &PanicError{Value: r, Goexit: r == nil, Stack: debug.Stack()}
		if r == nil {
			resume(err)
		}
	}()
	fn()
	ok = true
	return nil
}

func stageErr(seq uint64, stage string, err error) error {
	return kverr.Errorf("flush generation %d %s: %w", seq, stage, err)
}

// freeze freezes a generation for grp (nil for a background flush) and
// writes it, or decides that nothing needs one.
func (f *Flusher) freeze(grp *group) {
	var gn *gen
	err := call(func() { gn = f.freezeExclusive() }, func(err error) {
		go func() { f.afterFreeze(grp, nil, err); f.writeLoop() }()
	})
	f.afterFreeze(grp, gn, err)
}

// freezeExclusive takes the barrier exclusively, applies the claim rule and
// calls Freeze, unless there is nothing to freeze (nil). Writers excluded
// (publication order 14 in internal/buffer/protocol.go).
func (f *Flusher) freezeExclusive() *gen {
	f.barrier.Lock()
	defer f.barrier.Unlock()
	claimed := f.claimed.Load()
	wm := f.claimable()
	if !f.dirty.Load() && wm == claimed &&
		(f.frozen.Load() != f.released.Load() || f.t.PendingBytes() <= 0) {
		return nil
	}
	seq := f.frozen.Load() + 1
	g := f.t.Freeze(seq)
	if g == nil {
		panic(fmt.Sprintf("flush: Target.Freeze(%d) returned nil", seq))
	}
	if invariants.Enabled {
		invariants.Check(wm >= claimed, "flush: claim went back from %d to %d", claimed, wm)
	}
	f.claimed.Store(wm)
	f.frozen.Store(seq)
	f.dirty.Store(false) // after frozen (invariant 3)
	return &gen{seq: seq, g: g, wm: wm}
}

func (f *Flusher) afterFreeze(grp *group, gn *gen, err error) {
	f.mu.Lock()
	switch {
	case err != nil:
		err = stageErr(f.frozen.Load()+1, "freeze", err)
		if grp != nil {
			grp.complete(err)
		}
		f.failLocked(err)
		f.mu.Unlock()
		return
	case gn == nil:
		// Nothing new: grp waits for the newest unreleased generation, or
		// for nothing.
		if grp != nil {
			if n := len(f.q); n > 0 {
				f.attachLocked(f.q[n-1], grp)
				grp = nil
			}
		}
		f.armTickLocked()
		f.mu.Unlock()
		if grp != nil {
			grp.complete(nil)
		}
		return
	}
	f.q = append(f.q, gn)
	if grp != nil {
		f.attachLocked(gn, grp)
	}
	f.st.generations++
	f.st.maxInFlight = max(f.st.maxInFlight, len(f.q))
	f.armTickLocked()
	if f.q[f.nWritten] != gn {
		// A wait failed while we froze: the retry writes the earlier
		// generations first (the writer loop does it).
		f.mu.Unlock()
		return
	}
	epoch := f.epoch
	f.mu.Unlock()
	f.write(gn, epoch)
}

func (f *Flusher) attachLocked(gn *gen, grp *group) {
	gn.groups = append(gn.groups, grp)
	gn.callers += int(grp.n.Load())
}

// write calls gn's Write and hands its wait to the waiter.
func (f *Flusher) write(gn *gen, epoch uint64) {
	var wait func() error
	var werr error
	err := call(func() { wait, werr = gn.g.Write(context.Background(), gn.wm) }, func(err error) {
		go func() { f.afterWrite(gn, epoch, nil, err); f.writeLoop() }()
	})
	if err != nil {
		werr = err
	}
	f.afterWrite(gn, epoch, wait, werr)
}

func (f *Flusher) afterWrite(gn *gen, epoch uint64, wait func() error, err error) {
	f.mu.Lock()
	f.st.writes++
	if f.epoch != epoch {
		// A wait failed during Write: this write is part of the failed
		// attempt (its generation was failed and will be written again).
		if err == nil {
			f.waits = append(f.waits, waitItem{gen: gn, wait: wait, epoch: epoch})
			f.inWait++
			f.stale++
			f.mu.Unlock()
			f.wakeWaiter()
			return
		}
		f.mu.Unlock()
		return
	}
	if invariants.Enabled {
		invariants.Check(f.q[f.nWritten] == gn, "flush: wrote generation %d out of order (next is %d)", gn.seq, f.q[f.nWritten].seq)
	}
	if err != nil {
		f.failFromLocked(f.nWritten, stageErr(gn.seq, "write", err), false)
		f.mu.Unlock()
		return
	}
	f.nWritten++
	f.waits = append(f.waits, waitItem{gen: gn, wait: wait, epoch: epoch})
	f.inWait++
	f.mu.Unlock()
	f.wakeWaiter()
}

// failFromLocked fails q[i:]: their groups get err. newAttempt (a wait or
// Release failure) also makes every wait in flight stale and q to be written
// again from its head (invariant 9).
func (f *Flusher) failFromLocked(i int, err error, newAttempt bool) {
	for _, g := range f.q[i:] {
		for _, grp := range g.groups {
			grp.complete(err)
		}
		g.groups = nil
	}
	if newAttempt {
		f.epoch++
		f.stale = len(f.waits)
		f.nWritten = 0
	}
	f.failLocked(err)
}

// failLocked records a failure: the open group gets err too (its callers
// joined before the failure, so they may need a failed generation, and each
// caller gets the result of one attempt), then stats, backoff, and a wake-up
// for writers in backpressure and for the writer (which re-arms its timer).
func (f *Flusher) failLocked(err error) {
	if f.open != nil {
		f.open.complete(err)
		f.open = nil
	}
	f.st.failures++
	f.st.lastErr = err
	if errors.Is(err, kverr.ErrDiskFull) {
		f.st.diskFull++
	}
	f.backoff = min(max(2*f.backoff, f.opts.RetryMin), f.opts.RetryMax)
	f.failSeq++
	close(f.progress)
	f.progress = make(chan struct{})
	f.wakeWriter()
}

// waitLoop is the waiter goroutine: it calls the wait functions in order and
// releases generations (invariants 6 to 8).
func (f *Flusher) waitLoop() {
	for {
		f.mu.Lock()
		for len(f.waits) == 0 {
			if f.wExited {
				f.mu.Unlock()
				close(f.waiterDone)
				return
			}
			f.mu.Unlock()
			<-f.waitKick
			f.mu.Lock()
		}
		it := f.waits[0]
		f.waits[0] = waitItem{}
		f.waits = f.waits[1:]
		f.mu.Unlock()
		var werr error
		if it.wait != nil {
			err := call(func() { werr = it.wait() }, func(err error) {
				go func() { f.afterWait(it, err); f.waitLoop() }()
			})
			if err != nil {
				werr = err
			}
		}
		f.afterWait(it, werr)
	}
}

func (f *Flusher) afterWait(it waitItem, err error) {
	f.mu.Lock()
	f.inWait--
	if it.epoch != f.epoch {
		f.stale--
		f.mu.Unlock()
		f.wakeWriter()
		return
	}
	gn := it.gen
	if invariants.Enabled {
		invariants.Check(len(f.q) > 0 && f.q[0] == gn, "flush: wait of generation %d is not the oldest's", gn.seq)
	}
	if err != nil {
		f.failFromLocked(0, stageErr(gn.seq, "wait", err), true)
		f.mu.Unlock()
		return
	}
	if invariants.Enabled {
		old := f.persisted.Load()
		invariants.Check(gn.wm >= old, "flush: watermark went back from %d to %d", old, gn.wm)
	}
	if gn.wm > f.persisted.Load() {
		// Watchers (WatermarkNotify) read the watermark and the channel
		// under mu: the channel they get is the one closed at the next
		// advance.
		f.persisted.Store(gn.wm)
		close(f.wmChanged)
		f.wmChanged = make(chan struct{})
	}
	f.mu.Unlock()
	f.release(gn)
}

// release calls gn's Release, then wakes its callers. Only after gn's
// wait returned: the generation is durable (publication order 18 in
// internal/buffer/protocol.go).
func (f *Flusher) release(gn *gen) {
	if invariants.Enabled {
		r := f.released.Load()
		invariants.Check(gn.seq == r+1, "flush: release of generation %d after %d", gn.seq, r)
	}
	err := call(gn.g.Release, func(err error) {
		go func() { f.afterRelease(gn, err); f.waitLoop() }()
	})
	f.afterRelease(gn, err)
}

func (f *Flusher) afterRelease(gn *gen, err error) {
	f.mu.Lock()
	f.q[0] = nil
	f.q = f.q[1:]
	f.nWritten--
	f.released.Store(gn.seq)
	groups := gn.groups
	gn.groups = nil
	if err != nil {
		// Release was called (it is not called again) but did not finish:
		// its callers and every later generation's fail.
		err = stageErr(gn.seq, "release", err)
		for _, grp := range groups {
			grp.complete(err)
		}
		groups = nil
		f.failFromLocked(0, err, true)
	} else {
		f.backoff = 0
		if f.open != nil && f.relCallers == 0 {
			// The first release since the last freeze: callers already
			// waiting do not count among the k returning ones.
			f.open.base = f.open.n.Load()
		}
		f.relCallers += gn.callers
		close(f.progress)
		f.progress = make(chan struct{})
		f.unstallLocked() // the store wrote again: a stall ends with a release
	}
	settle := f.settler != nil && len(f.q) == 0
	recycle, _ := gn.g.(Recycler)
	if err != nil {
		recycle = nil
	}
	f.mu.Unlock()
	// Wake the writer first: the goroutine readied last runs first on this
	// processor, and the callers' latency is what counts.
	f.wakeWriter()
	for _, grp := range groups {
		grp.complete(nil)
	}
	if recycle != nil && len(groups) > 0 {
		// The caller woken last is this processor's next goroutine, and
		// runs only once this one blocks or yields: yield, so that it
		// returns before the reset instead of after it (0.1 ms of a 1M-bit
		// flush, issue 26; the reset goes on wherever the scheduler puts
		// this goroutine, usually the other processor).
		runtime.Gosched()
	}
	if settle {
		f.settle()
	}
	if recycle != nil {
		// After the callers were woken: nothing they wait for is left
		// (the Release published what they read, B8).
		f.runHook("recycle", recycle.Recycle)
	}
}

// settle calls Settle with the barrier held exclusively if no generation is
// in flight (a freeze takes the same barrier, so the check cannot race one;
// publication order 14 in internal/buffer/protocol.go).
func (f *Flusher) settle() {
	f.runHook("settle", func() {
		f.barrier.Lock()
		defer f.barrier.Unlock()
		if f.frozen.Load() == f.released.Load() {
			f.settler.Settle()
		}
	})
}

// runHook runs one of the Target's optional hooks (Settle, Recycle) on the
// waiter: a panic is counted and fails no caller; after a runtime.Goexit a
// new waiter carries on, as after a Release.
func (f *Flusher) runHook(hook string, fn func()) {
	err := call(fn, func(err error) {
		go func() { f.hookFailed(hook, err); f.waitLoop() }()
	})
	f.hookFailed(hook, err)
}

// hookFailed counts a failure (a panic) of the Target's Settle or
// Recycle, which fails no caller: Stats.Failures and LastErr show it.
func (f *Flusher) hookFailed(hook string, err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	f.st.failures++
	f.st.lastErr = kverr.Errorf("flush %s: %w", hook, err)
	f.mu.Unlock()
}
