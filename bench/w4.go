package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/kvbuf/kvbuf/buffer"
	"github.com/kvbuf/kvbuf/storage"
)

// w4Goroutines are W4's G values (doc/workloads.md).
var w4Goroutines = [...]int{1, 4, 16, 64}

// w4Think is the think time of W4/flush-g16-think1ms.
const w4Think = time.Millisecond

var w4Value = []byte("w4-value-16bytes")

// w4Impl is one W4 implementation: how a goroutine writes one key, how it
// flushes, how the harness checks that a write is durable and counts
// physical syncs.
//
// Writes are ordered: a write takes mu, numbers itself with the next op,
// writes and closes its op before releasing mu, so op n is complete before
// op n+1 starts (what the engine's watermark requires of a host). After
// every Flush that returned nil the caller reads its own key back from the
// store under the implementation and requires the store's persisted
// watermark to cover its op: exact for every row alike (a later flush
// between the return and the check can still hide a violation, never
// invent one).
type w4Impl struct {
	name    string
	mu      sync.Mutex                                             // orders writes (and excludes them from the baselines' freezes)
	next    uint64                                                 // the last op written; mu held
	write   func(ctx context.Context, key []byte, op uint64) error // mu held
	flush   func(ctx context.Context) error
	store   *storage.Store
	ks      storage.KeyspaceID
	syncs   func() int64
	rounds  atomic.Uint64 // round ids, so that every round writes new keys
	scratch sync.Pool
}

// w4Key is the key goroutine g writes in its i-th iteration of round r.
func w4Key(dst []byte, r uint64, g, i int) []byte {
	dst = binary.BigEndian.AppendUint64(dst, r)
	dst = binary.BigEndian.AppendUint32(dst, uint32(g))
	return binary.BigEndian.AppendUint32(dst, uint32(i))
}

// writeOrdered writes key as the next op and returns the op.
func (im *w4Impl) writeOrdered(ctx context.Context, key []byte) (uint64, error) {
	im.mu.Lock()
	defer im.mu.Unlock()
	op := im.next + 1
	if err := im.write(ctx, key, op); err != nil {
		return 0, err
	}
	im.next = op
	return op, nil
}

// durable reports whether key, written as op, is durable: in the store,
// under a persisted watermark that covers op.
func (im *w4Impl) durable(key []byte, op uint64) (bool, error) {
	wm, err := im.store.Watermark()
	if err != nil {
		return false, err
	}
	bp, _ := im.scratch.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	defer im.scratch.Put(bp)
	*bp, err = im.store.GetAppend((*bp)[:0], im.ks, key)
	switch {
	case err == nil:
		return wm >= op, nil
	case errors.Is(err, storage.ErrNotFound):
		return false, nil
	}
	return false, err
}

// round runs one W4 round: G goroutines each doing per {write one key,
// Flush, check, think} iterations.
func (im *w4Impl) round(ctx context.Context, G, per int, think time.Duration) (RoundResult, error) {
	r := im.rounds.Add(1)
	lat := make([][]time.Duration, G)
	viol := make([]int64, G)
	errs := make([]error, G)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s0 := im.syncs()
	var wg sync.WaitGroup
	start := time.Now()
	for g := range G {
		lat[g] = make([]time.Duration, 0, per)
		wg.Go(func() {
			var key []byte
			for i := range per {
				key = w4Key(key[:0], r, g, i)
				op, err := im.writeOrdered(ctx, key)
				if err != nil {
					errs[g] = fmt.Errorf("write g=%d i=%d: %w", g, i, err)
					cancel()
					return
				}
				t0 := time.Now()
				err = im.flush(ctx)
				lat[g] = append(lat[g], time.Since(t0))
				if err != nil {
					errs[g] = fmt.Errorf("flush g=%d i=%d: %w", g, i, err)
					cancel()
					return
				}
				ok, err := im.durable(key, op)
				if err != nil {
					errs[g] = fmt.Errorf("check g=%d i=%d: %w", g, i, err)
					cancel()
					return
				}
				if !ok {
					viol[g]++
				}
				if think > 0 {
					time.Sleep(think)
				}
			}
		})
	}
	wg.Wait()
	res := RoundResult{Elapsed: time.Since(start), Syncs: im.syncs() - s0}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	for g := range G {
		res.Flushes += int64(len(lat[g]))
		res.Violations += viol[g]
		res.FlushLatencies = append(res.FlushLatencies, lat[g]...)
	}
	res.Ops = int(res.Flushes)
	res.Checks = res.Flushes
	return res, nil
}

// setupW4 builds W4: a kvbuf engine (group commit by its flusher) and two
// buffer.KV overlays, each over its own storage.Store, flushed by every
// caller under a mutex (per-caller-sync) or through one singleflight key
// (x/sync-singleflight, which lets a caller join a flush that froze before
// its write: a coverage violation).
func setupW4(ctx context.Context, s *Suite, c Config) error {
	db, err := openEngine(s, "engine")
	if err != nil {
		return err
	}
	kv, err := db.KV("w4")
	if err != nil {
		return err
	}
	engine := &w4Impl{
		name: ImplKvbuf,
		write: func(ctx context.Context, key []byte, op uint64) error {
			if err := kv.Put(ctx, key, w4Value, op); err != nil {
				return err
			}
			return db.EndOp(ctx, op)
		},
		flush: db.Flush,
		store: engineStore(db),
		ks:    engineKeyspace(kv),
		syncs: func() int64 { return db.Metrics().Generations },
	}

	// A baseline: a buffer overlay over its own store. physical freezes
	// the overlay with writers excluded (im.mu), writes the generation and
	// the highest op written in one synced batch, and releases it.
	baseline := func(name string, wrap func(physical func(context.Context) error) func(context.Context) error) (*w4Impl, error) {
		st, err := openStore(s, name)
		if err != nil {
			return nil, err
		}
		ov, err := buffer.NewKV(st, 1, nil, nil)
		if err != nil {
			return nil, err
		}
		im := &w4Impl{name: name, store: st, ks: 1}
		var gen uint64
		var syncs atomic.Int64
		physical := func(ctx context.Context) error {
			im.mu.Lock()
			gen++
			g := gen
			frozen := ov.Freeze(g)
			wm := im.next
			im.mu.Unlock()
			b := st.NewBatch()
			if frozen != nil {
				if err := frozen.AddTo(ctx, b); err != nil {
					return err
				}
			}
			b.SetWatermark(wm)
			if err := st.Apply(b); err != nil {
				return err
			}
			if frozen != nil {
				frozen.Release()
			}
			syncs.Add(1)
			return nil
		}
		im.write = func(_ context.Context, key []byte, _ uint64) error { return ov.Put(key, w4Value) }
		im.flush = wrap(physical)
		im.syncs = syncs.Load
		return im, nil
	}
	var pcsMu sync.Mutex
	pcs, err := baseline(ImplPerCallerSync, func(physical func(context.Context) error) func(context.Context) error {
		return func(ctx context.Context) error {
			pcsMu.Lock()
			defer pcsMu.Unlock()
			return physical(ctx)
		}
	})
	if err != nil {
		return err
	}
	var sf singleflight.Group
	var sfMu sync.Mutex // singleflight runs one call at a time; this orders memory for the race detector
	sfl, err := baseline(ImplSingleflight, func(physical func(context.Context) error) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err, _ := sf.Do("flush", func() (any, error) {
				sfMu.Lock()
				defer sfMu.Unlock()
				return nil, physical(ctx)
			})
			return err
		}
	})
	if err != nil {
		return err
	}

	per := c.FlushesPerGoroutine
	w4 := func(name string, G, per int, think time.Duration) *Workload {
		w := &Workload{Name: name, Unit: "write+flush"}
		for _, im := range []*w4Impl{engine, pcs, sfl} {
			w.Impls = append(w.Impls, Impl{Name: im.name, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
				return im.round(ctx, G, per, think)
			})})
		}
		return w
	}
	for _, G := range w4Goroutines {
		n := per
		if G == 64 {
			n = max(per/4, 1) // 64 serial syncs per iteration for per-caller-sync
		}
		s.add(w4(fmt.Sprintf("W4/flush-g%d", G), G, n, 0))
	}
	s.add(w4("W4/flush-g16-think1ms", 16, per, w4Think))
	return nil
}
