package kvbuf

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestStressOutOfOrderOps (issue 20) at GOMAXPROCS well above the cores:
// writers begin ops under a host log lock and end them in any order (ops
// of one, two or three single calls, or batches); a flusher runs in a
// tight loop; a log syncer reports the durable log position behind the
// writers (LogBeforeData); snapshot takers pin old state and check that
// every op at or below Snapshot.Op() is wholly in the snapshot; a
// watermark watcher (WaitWatermark) checks that the watermark never goes
// back, never passes an op whose end was not called, nor the durable log.
// No write is ever refused.
func TestStressOutOfOrderOps(t *testing.T) {
	stressSetup(t)
	db := stressOpen(t, stressDir(t), &Options{FlushInterval: 250 * time.Microsecond, MaxPendingBytes: 8 << 20, LogBeforeData: true})
	k, err := db.KV("ops")
	if err != nil {
		t.Fatal(err)
	}
	b, err := db.Bits("ops")
	if err != nil {
		t.Fatal(err)
	}
	const maxOps = 1 << 20
	var (
		logMu   sync.Mutex
		lastOp  uint64
		ended   = make([]atomic.Bool, maxOps+1)
		logged  atomic.Uint64
		snaps   atomic.Int64
		wmSeen  atomic.Int64
		ctx     = context.Background()
		opKey   = func(op uint64, part int) []byte { return fmt.Appendf(nil, "op%07d/%d", op, part) }
		opParts = func(op uint64) int { return int(op%3) + 1 }
	)
	r := newStressRun(t)
	for w := range 8 {
		r.goWork(fmt.Sprint("writer ", w), func(wk *stressWorker) {
			for !wk.stopped() {
				logMu.Lock()
				if lastOp == maxOps {
					logMu.Unlock()
					return
				}
				lastOp++
				op := lastOp
				err := db.BeginOp(ctx, op)
				logMu.Unlock()
				if err != nil {
					r.failf("BeginOp(%d): %v", op, err)
					return
				}
				if op%5 == 0 {
					ended[op].Store(true) // a batch ends its op when it is admitted
					err = db.Update(ctx, op, func(bt *Batch) error {
						for p := range opParts(op) {
							bt.Put(k, opKey(op, p), []byte("b"))
						}
						bt.Set(b, op, true)
						return nil
					})
				} else {
					for p := range opParts(op) {
						if err = k.Put(ctx, opKey(op, p), []byte("s"), op); err != nil {
							break
						}
						wk.pause()
					}
					if err == nil {
						err = b.Set(ctx, op, true, op)
					}
					ended[op].Store(true)
					if err == nil {
						err = db.EndOp(ctx, op)
					}
				}
				if err != nil {
					r.failf("op %d: %v", op, err)
					return
				}
			}
		})
	}
	r.goWork("log syncer", func(wk *stressWorker) {
		for !wk.stopped() {
			logMu.Lock()
			n := lastOp
			logMu.Unlock()
			wk.pause()
			logged.Store(n)
			db.LogDurable(n)
		}
	})
	r.goWork("flusher", func(wk *stressWorker) {
		for !wk.stopped() {
			if err := db.Flush(ctx); err != nil {
				r.failf("Flush: %v", err)
				return
			}
		}
	})
	r.goWork("watermark watcher", func(wk *stressWorker) {
		var wm uint64
		for !wk.stopped() {
			wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			next, err := db.WaitWatermark(wctx, wm)
			cancel()
			if err != nil {
				continue // timeout: look at stopped again
			}
			if next <= wm {
				r.failf("WaitWatermark(%d) returned %d", wm, next)
				return
			}
			if l := logged.Load(); next > l {
				r.failf("watermark %d above the durable log position %d", next, l)
				return
			}
			for op := next; op > wm; op-- {
				if !ended[op].Load() {
					r.failf("watermark %d covers op %d, whose end was not called", next, op)
					return
				}
			}
			wm = next
			wmSeen.Add(1)
		}
	})
	for s := range 2 {
		r.goWork(fmt.Sprint("snapshots ", s), func(wk *stressWorker) {
			for !wk.stopped() {
				snap, err := db.NewSnapshot()
				if err != nil {
					r.failf("NewSnapshot: %v", err)
					return
				}
				sk, _ := snap.KV("ops")
				sb, _ := snap.Bits("ops")
				wk.pause() // pin old state while others write and flush
				op := snap.Op()
				if op < snap.Watermark() {
					r.failf("snapshot Op %d below its watermark %d", op, snap.Watermark())
				}
				// Every op <= Op is whole: its bit and every part. Check
				// the newest few (older ones were checked before).
				for o := op; o > 0 && o+64 > op; o-- {
					if v, err := sb.Get(o); err != nil || !v {
						r.failf("snapshot at op %d: bit of op %d = %v, %v", op, o, v, err)
						break
					}
					for p := range opParts(o) {
						if ok, err := sk.Has(opKey(o, p)); err != nil || !ok {
							r.failf("snapshot at op %d: part %d of op %d missing (%v)", op, p, o, err)
							break
						}
					}
				}
				snap.Close()
				snaps.Add(1)
			}
		})
	}
	r.runUntil(stressDuration(2*time.Second), 30*time.Second, func() bool {
		return snaps.Load() >= 20 && wmSeen.Load() >= 20
	})
	m := db.Metrics()
	t.Logf("ops %d, watermark %d, %d snapshots checked, %d watermark advances seen, %d generations", m.HighestOp, m.Watermark, snaps.Load(), wmSeen.Load(), m.Generations)
}
