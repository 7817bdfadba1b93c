package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/internal/workload"
	"github.com/kvbuf/kvbuf/storage"
)

// w4Goroutines are W4's G values (doc/workloads.md).
var w4Goroutines = [...]int{1, 4, 16, 64}

// w4Think is the think time of W4/flush-g16-think1ms.
const w4Think = time.Millisecond

var w4Value = []byte("w4-value-16bytes")

// w4UserBytes is the user data of one W4 op: a 16-byte key (w4Key) and
// its value.
const w4UserBytes = 16 + 16

// w4Impl is one W4 implementation as the loop of internal/workload drives
// it: how a goroutine writes one key, how it flushes, what its durable
// watermark is, how many physical syncs it made.
//
// Writes are ordered: a write takes mu, numbers itself with the next op,
// writes and closes its op before releasing mu, so op n is complete before
// op n+1 starts (what the engine's watermark requires of a host). After
// every Flush that returned nil the caller requires the implementation's
// durable watermark (kvbuf: DB.Watermark; the baselines: the watermark of
// their last physical flush that returned) to cover its op. That is read
// after Flush returned, so the count of violations is a lower bound on
// every row alike: a later flush completing between the return and the
// read can hide a violation, never invent one (exact counting would need
// Flush to report the watermark it made durable).
type w4Impl struct {
	name    string
	mu      sync.Mutex                                             // orders writes (and excludes them from the baselines' freezes)
	next    uint64                                                 // the last op written; mu held
	write   func(ctx context.Context, key []byte, op uint64) error // mu held
	flush   func(ctx context.Context) error
	durable func() uint64 // the durable watermark
	syncs   func() int64
	get     kvGetter      // reads a key back once its Flush returned
	rounds  atomic.Uint64 // round ids, so that every round writes new keys
	// readBack is Config.ReadBack: how many keys a round reads back.
	readBack int
	// store is a baseline's storage.Store (nil for the engine).
	store *storage.Store
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

// round runs one W4 round: G goroutines each doing per {write one key,
// Flush, check, think} iterations.
func (im *w4Impl) round(ctx context.Context, G, per int, think time.Duration) (RoundResult, error) {
	r := im.rounds.Add(1)
	keys := make([][]byte, G)
	loop := workload.FlushLoop{
		Goroutines: G, PerGoroutine: per, Think: think,
		Write: func(ctx context.Context, g, i int) (uint64, error) {
			keys[g] = w4Key(keys[g][:0], r, g, i)
			return im.writeOrdered(ctx, keys[g])
		},
		Flush:   im.flush,
		Durable: func(_, _ int, op uint64) (bool, error) { return im.durable() >= op, nil },
	}
	s0 := im.syncs()
	c0, cok := processCPU()
	res, err := loop.Run(ctx)
	c1, cok1 := processCPU()
	out := RoundResult{Elapsed: res.Elapsed, Syncs: im.syncs() - s0, Flushes: res.Flushes, Violations: res.Violations,
		FlushLatencies: res.Latencies, Ops: int(res.Flushes), Checks: res.Flushes, CPU: c1 - c0, CPUMeasured: cok && cok1}
	if err != nil {
		return out, err
	}
	// Every write was followed by its writer's Flush: all of them must be
	// readable (and, the Flushes having returned, durable) now.
	idx := readBackSample(G*per, im.readBack, r)
	var kb []byte
	out.ReadBack, err = readBackKV(im.name, idx, func(j int) []byte {
		kb = w4Key(kb[:0], r, j/per, j%per)
		return kb
	}, func(int) []byte { return w4Value }, im.get)
	return out, err
}

// setupW4 builds W4: a kvbuf engine opened with default Options (group
// commit by its flusher) and three baselines, each a mutex-guarded map in
// front of its own storage.Store, flushed per caller, through
// x/sync/singleflight, or through the careful group commit
// (internal/workload).
func setupW4(_ context.Context, s *Suite, c Config) error {
	db, kv, err := openKV(s, "engine", "w4", nil)
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
		flush:    db.Flush,
		durable:  db.Watermark,
		syncs:    func() int64 { return db.Metrics().Generations },
		get:      kvbufGetter(kv),
		readBack: c.ReadBack,
	}
	impls := []*w4Impl{engine}
	for _, b := range []struct {
		name       string
		discipline func(func(context.Context) error) func(context.Context) error
	}{
		{ImplPerCallerSync, workload.PerCallerSync},
		{ImplSingleflight, workload.Singleflight},
		{ImplGroupCommit, workload.GroupCommit},
	} {
		im, err := w4Baseline(s, b.name, b.discipline)
		if err != nil {
			return err
		}
		im.readBack = c.ReadBack
		impls = append(impls, im)
	}
	per := c.FlushesPerGoroutine
	var stores []*storage.Store
	for _, im := range impls[1:] {
		stores = append(stores, im.store)
	}
	settle := settleStores([]*kvbuf.DB{db}, stores)
	w4 := func(name string, G, per int, think time.Duration) *Workload {
		w := &Workload{Name: name, Unit: "write+flush", Writes: true, UserBytesPerOp: w4UserBytes, settle: settle}
		for _, im := range impls {
			row := Impl{Name: im.name, Round: RoundFunc(func(ctx context.Context, _ int) (RoundResult, error) {
				return im.round(ctx, G, per, think)
			})}
			if im.name == ImplSingleflight {
				row.Label = LabelBreaksDurability
			}
			w.Impls = append(w.Impls, row)
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

// w4Baseline is a W4 baseline: a map of pending writes guarded by the
// implementation's write mutex, in front of its own storage.Store. Its
// physical flush swaps the map out with writers excluded, writes it and
// the highest op written in one synced batch, and then publishes that op
// as its durable watermark; discipline turns it into a Flush.
func w4Baseline(s *Suite, name string, discipline func(func(context.Context) error) func(context.Context) error) (*w4Impl, error) {
	st, err := storage.Open(filepath.Join(s.dir, name), nil)
	if err != nil {
		return nil, err
	}
	s.onClose(st.Close)
	const ks storage.KeyspaceID = rawKeyspace
	im := &w4Impl{name: name, store: st}
	pending := map[string][]byte{}
	var durable atomic.Uint64
	var syncs atomic.Int64
	physical := func(context.Context) error {
		im.mu.Lock()
		frozen := pending
		pending = make(map[string][]byte, len(frozen))
		wm := im.next
		im.mu.Unlock()
		b := st.NewBatch()
		for k, v := range frozen {
			b.Put(ks, []byte(k), v)
		}
		b.SetWatermark(wm)
		if err := st.Apply(b); err != nil {
			return err
		}
		syncs.Add(1)
		if wm > durable.Load() { // physical flushes run one at a time
			durable.Store(wm)
		}
		return nil
	}
	im.write = func(_ context.Context, key []byte, _ uint64) error {
		pending[string(key)] = append([]byte(nil), w4Value...) // copied, as kvbuf copies it
		return nil
	}
	im.flush = discipline(physical)
	im.durable = durable.Load
	im.syncs = syncs.Load
	// A read sees the pending map first, then the store, as a reader of
	// such a buffer would (and as kvbuf's KV.Get sees pending changes):
	// whether a Flush covered its caller's write is what the violation
	// count checks.
	im.get = func(dst, key []byte) ([]byte, bool, error) {
		im.mu.Lock()
		v, ok := pending[string(key)]
		im.mu.Unlock()
		if ok {
			return append(dst, v...), true, nil
		}
		v, err := st.GetAppend(dst, ks, key)
		if errors.Is(err, kvbuf.ErrNotFound) {
			return dst, false, nil
		}
		return v, err == nil, err
	}
	return im, nil
}
