package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/buffer"
)

// W1 sizes at Scale 1 (workloads.md).
const (
	w1Bits    = 4_194_304
	w1Sets    = 1_000_000
	w1Lookups = 1_000_000
)

// w1Change is one random Set of the workload.
type w1Change struct {
	i uint64
	v bool
}

// w1Changes draws n Sets over [0, nbits) in the order the buffer package's
// W1 benchmark drew them.
func w1Changes(rng *rand.Rand, n int, nbits uint64) []w1Change {
	c := make([]w1Change, n)
	for k := range c {
		c[k] = w1Change{rng.Uint64N(nbits), rng.IntN(2) == 1}
	}
	return c
}

// engineOptions are the kvbuf options every suite opens engines with: no
// interval flush and no pending-memory bound, so that pending changes stay
// pending while they are measured and W4 counts only the flushes it asks
// for.
func engineOptions() *kvbuf.Options {
	return &kvbuf.Options{FlushInterval: -1, MaxPendingBytes: -1}
}

// setupW1 builds W1: a kvbuf engine bitslice and a raw bitslice file with
// the same flushed Sets, the lookup indexes, and the map baselines, whose
// pending changes (and the engine's) are added by the second workload's
// prepare step.
func setupW1(ctx context.Context, s *Suite, c Config) error {
	nbits := uint64(c.scaled(w1Bits, 64))
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed))

	db, err := kvbuf.Open(filepath.Join(s.dir, "engine"), engineOptions())
	if err != nil {
		return err
	}
	s.onClose(db.Close)
	bits, err := db.Bits("w1")
	if err != nil {
		return err
	}
	raw, err := bitslice.Create(filepath.Join(s.dir, "raw.bits"), nbits)
	if err != nil {
		return err
	}
	s.onClose(raw.Close)
	// The overlay row: the buffer package's Bits over its own file, without
	// the engine's drain gate, to show what the gate costs per lookup.
	ovFile, err := bitslice.Create(filepath.Join(s.dir, "overlay.bits"), nbits)
	if err != nil {
		return err
	}
	s.onClose(ovFile.Close)
	ov := buffer.NewBits(ovFile, nil)

	var op uint64
	for _, ch := range w1Changes(rng, c.scaled(w1Sets, 16), nbits) {
		op++
		if err := bits.Set(ctx, ch.i, ch.v, op); err != nil {
			return err
		}
		if err := ov.Set(ch.i, ch.v, op); err != nil {
			return err
		}
		if err := raw.Set(ch.i, ch.v); err != nil {
			return err
		}
	}
	if err := db.Flush(ctx); err != nil {
		return err
	}
	ov.Freeze()
	if err := ov.Apply(ctx, op); err != nil {
		return err
	}
	ov.Release()
	raw.SetWatermark(op)
	if err := raw.Sync(); err != nil {
		return err
	}
	lookups := make([]uint64, c.scaled(w1Lookups, 16))
	for k := range lookups {
		lookups[k] = rng.Uint64N(nbits)
	}

	var (
		mu   sync.Mutex
		rwmu sync.RWMutex
		mm   = make(map[uint64]bool)
		rwm  = make(map[uint64]bool)
		sm   sync.Map
		xm   = xsync.NewMap[uint64, bool]()
	)
	b2i := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	// Each baseline is a pending map in front of the raw file: the map
	// first, the file on a miss (what qdrant's buffered bitslice did).
	impls := func(floorRaw bool) []Impl {
		return []Impl{
			{Name: ImplKvbuf, Op: func(i int) (int, error) {
				v, err := bits.Get(lookups[i])
				return b2i(v), err
			}},
			{Name: ImplKvbufOverlay, Op: func(i int) (int, error) {
				return b2i(ov.Get(lookups[i])), nil
			}},
			{Name: ImplRaw, Floor: floorRaw, Op: func(i int) (int, error) {
				return b2i(raw.Get(lookups[i])), nil
			}},
			{Name: ImplMutexMap, Op: func(i int) (int, error) {
				k := lookups[i]
				mu.Lock()
				v, ok := mm[k]
				mu.Unlock()
				if !ok {
					v = raw.Get(k)
				}
				return b2i(v), nil
			}},
			{Name: ImplRWMutexMap, Op: func(i int) (int, error) {
				k := lookups[i]
				rwmu.RLock()
				v, ok := rwm[k]
				rwmu.RUnlock()
				if !ok {
					v = raw.Get(k)
				}
				return b2i(v), nil
			}},
			{Name: ImplSyncMap, Op: func(i int) (int, error) {
				k := lookups[i]
				if v, ok := sm.Load(k); ok {
					return b2i(v.(bool)), nil
				}
				return b2i(raw.Get(k)), nil
			}},
			{Name: ImplXsyncMap, Op: func(i int) (int, error) {
				k := lookups[i]
				v, ok := xm.Load(k)
				if !ok {
					v = raw.Get(k)
				}
				return b2i(v), nil
			}},
		}
	}
	pendingSets := c.scaled(w1Sets, 16)
	s.Workloads = []*Workload{
		{Name: "W1/lookup-without-pending-changes", Ops: len(lookups), Impls: impls(false)},
		{Name: "W1/lookup-with-pending-changes", Ops: len(lookups), Impls: impls(true),
			prepare: func(ctx context.Context) error {
				for _, ch := range w1Changes(rng, pendingSets, nbits) {
					op++
					if err := bits.Set(ctx, ch.i, ch.v, op); err != nil {
						return err
					}
					if err := ov.Set(ch.i, ch.v, op); err != nil {
						return err
					}
					mm[ch.i] = ch.v
					rwm[ch.i] = ch.v
					sm.Store(ch.i, ch.v)
					xm.Store(ch.i, ch.v)
				}
				if n, err := bits.Len(); err != nil || n > nbits {
					return fmt.Errorf("engine bitslice length %d (%v), want at most %d", n, err, nbits)
				}
				return nil
			}},
	}
	return nil
}
